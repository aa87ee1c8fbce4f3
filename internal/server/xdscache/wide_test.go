package xdscache

// TestAnswersLikeLinearCache widened. More names,
// listener and route types too, delta streams that (re)connect with
// initial_resource_versions (right, wrong and unknown versions), SotW
// streams that (re)connect naming a version_info, streams that reconnect
// mid-run, and, optionally, delta responses still queued when the stream
// arms its next watch (go-control-plane's delta server flushes the queue
// before the request's callbacks and cancels the watch after them).

import (
	"fmt"
	"math/rand/v2"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
)

type wideOpts struct {
	// deltaQueued: some delta requests are processed while the previous
	// response is still queued; it is sent after the new watch is armed.
	deltaQueued bool
}

func TestAnswersLikeLinearCacheWide(t *testing.T) {
	for _, typeURL := range []string{resource.EndpointType, resource.ClusterType, resource.ListenerType, resource.RouteType} {
		for seed := range uint64(60) {
			t.Run(fmt.Sprintf("%s/%d", typeURL[len(typeURL)-10:], seed), func(t *testing.T) {
				wideDifferential(t, typeURL, seed, 400, wideOpts{})
			})
		}
	}
}

// TestDeltaQueuedResponseLikeLinearCache: the same with a delta response
// queued while the next watch is armed, which go-control-plane's delta
// server allows.
func TestDeltaQueuedResponseLikeLinearCache(t *testing.T) {
	for _, typeURL := range []string{resource.EndpointType, resource.ClusterType} {
		for seed := range uint64(60) {
			t.Run(fmt.Sprintf("%s/%d", typeURL[len(typeURL)-10:], seed), func(t *testing.T) {
				wideDifferential(t, typeURL, seed, 400, wideOpts{deltaQueued: true})
			})
		}
	}
}

func wideDifferential(t *testing.T, typeURL string, seed uint64, steps int, o wideOpts) {
	rng := rand.New(rand.NewPCG(seed, 11))
	ours, theirs := New(typeURL), cache.NewLinearCache(typeURL)
	var names []string
	for i := range 14 {
		names = append(names, fmt.Sprintf("n%02d", i))
	}
	legacyWildcard := typeURL != resource.EndpointType && typeURL != resource.RouteType // as ringxds configures
	const streams = 8
	var pairs [streams][2]*side
	newPair := func(i int) {
		for j, c := range []cache.Cache{ours, theirs} {
			if pairs[i][j] != nil && pairs[i][j].cancel != nil {
				pairs[i][j].cancel()
			}
			pairs[i][j] = &side{c: c, sotwCh: make(chan cache.Response, 1), deltaCh: make(chan cache.DeltaResponse, 4)}
		}
	}
	for i := range pairs {
		newPair(i)
	}
	// held is what a delta client of each stream holds, by name, as it
	// would list it in initial_resource_versions on reconnecting.
	held := make([]map[string]string, streams)
	randomNames := func(p int) []string {
		var out []string
		for _, n := range names {
			if rng.IntN(p) == 0 {
				out = append(out, n)
			}
		}
		if rng.IntN(6) == 0 {
			out = append(out, "*")
		}
		return out
	}
	// one response pending per SotW side, several per delta side
	receiveAll := func(step, i int) {
		for {
			a, b := pairs[i][0].receive(t), pairs[i][1].receive(t)
			if a.String() != b.String() {
				t.Fatalf("step %d stream %d: ours %s, LinearCache %s", step, i, a, b)
			}
			if a == nil {
				return
			}
			if i%2 == 1 {
				held[i] = map[string]string{}
				for k, v := range a.returned {
					held[i][k] = v
				}
			}
		}
	}
	for step := range steps {
		switch r := rng.IntN(10); {
		case r < 3:
			up := map[string]types.Resource{}
			var del []string
			for _, n := range names {
				switch rng.IntN(8) {
				case 0:
					up[n] = claResource(n, uint32(rng.IntN(2)))
				case 1:
					del = append(del, n)
				}
			}
			update(t, ours, up, del...)
			update(t, theirs, up, del...)
		case r == 3:
			// reconnect
			i := rng.IntN(streams)
			newPair(i)
			delta := i%2 == 1
			subNames := randomNames(3)
			if delta {
				initial := map[string]string{}
				for k, v := range held[i] {
					switch rng.IntN(4) {
					case 0: // forgotten
					case 1:
						initial[k] = "stale"
					default:
						initial[k] = v
					}
				}
				if rng.IntN(4) == 0 {
					initial[names[rng.IntN(len(names))]] = "unknown"
				}
				for _, s := range pairs[i] {
					s.sub = stream.NewDeltaSubscription(subNames, nil, clone(initial), legacyWildcard)
					var err error
					s.cancel, err = s.c.CreateDeltaWatch(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: subNames}, s.sub, s.deltaCh)
					if err != nil {
						t.Fatal(err)
					}
					if s.cancel == nil {
						s.cancel = func() {}
					}
					s.open = true
				}
			} else {
				version := ""
				if rng.IntN(2) == 0 {
					version = "old"
				}
				for _, s := range pairs[i] {
					s.sub = stream.NewSotwSubscription(subNames, legacyWildcard)
					var err error
					s.cancel, err = s.c.CreateWatch(&discovery.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: version, ResourceNames: subNames}, s.sub, s.sotwCh)
					if err != nil {
						t.Fatal(err)
					}
					s.open = true
				}
			}
		default:
			i := rng.IntN(streams)
			delta := i%2 == 1
			first := pairs[i][0].sub.SubscribedResources() == nil
			subNames, unsub := randomNames(2), randomNames(3)
			queued := delta && o.deltaQueued && rng.IntN(2) == 0
			switch {
			case !delta && rng.IntN(2) == 0:
				for _, s := range pairs[i] {
					s.drop()
				}
			case queued:
				// the response stays queued across the request
			default:
				receiveAll(step, i)
			}
			for _, s := range pairs[i] {
				wideRequest(t, s, typeURL, delta, first, legacyWildcard, subNames, unsub)
			}
			if queued {
				receiveAll(step, i)
			}
		}
		for i := range pairs {
			if rng.IntN(4) != 0 {
				receiveAll(step, i)
			}
		}
	}
	for i := range pairs {
		receiveAll(steps, i)
	}
}

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func wideRequest(t *testing.T, s *side, typeURL string, delta, first, legacyWildcard bool, names, unsub []string) {
	t.Helper()
	if s.cancel != nil {
		s.cancel()
	}
	var err error
	if delta {
		if first {
			s.sub = stream.NewDeltaSubscription(names, unsub, nil, legacyWildcard)
		} else {
			s.sub.UpdateResourceSubscriptions(names, unsub)
		}
		nonce := ""
		if !first {
			nonce = "1"
		}
		s.cancel, err = s.c.CreateDeltaWatch(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: nonce}, s.sub, s.deltaCh)
	} else {
		if first {
			s.sub = stream.NewSotwSubscription(names, legacyWildcard)
		} else {
			s.sub.SetResourceSubscription(names)
		}
		s.cancel, err = s.c.CreateWatch(&discovery.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: s.version, ResourceNames: names}, s.sub, s.sotwCh)
	}
	if err != nil {
		t.Fatal(err)
	}
	if s.cancel == nil {
		s.cancel = func() {}
	}
	s.open = true
}
