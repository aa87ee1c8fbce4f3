package xdscache

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// answer is what a stream received, in a form both caches can be compared in.
type answer struct {
	names, removed []string
	returned       map[string]string
	version        string
}

func (a *answer) String() string {
	if a == nil {
		return "no response"
	}
	return fmt.Sprintf("names %v removed %v version %s returned %v", a.names, a.removed, a.version, a.returned)
}

// side is one stream's state against one cache implementation, as
// go-control-plane's server keeps it.
type side struct {
	c       cache.Cache
	sub     stream.Subscription
	cancel  func()
	sotwCh  chan cache.Response
	deltaCh chan cache.DeltaResponse
	version string
	// open: the last watch has not answered yet.
	open bool
}

// receive takes the pending response, if any, and applies it to the
// subscription as the server does when it sends it.
func (s *side) receive(t *testing.T) *answer {
	t.Helper()
	select {
	case r := <-s.sotwCh:
		s.open = false
		m, err := r.GetDiscoveryResponse()
		if err != nil {
			t.Fatal(err)
		}
		a := &answer{returned: r.GetReturnedResources(), version: r.GetResponseVersion()}
		for _, res := range m.GetResources() {
			a.names = append(a.names, resourceName(t, res.GetValue()))
		}
		slices.Sort(a.names)
		s.sub.SetReturnedResources(r.GetReturnedResources())
		s.version = r.GetResponseVersion()
		return a
	case r := <-s.deltaCh:
		s.open = false
		m, err := r.GetDeltaDiscoveryResponse()
		if err != nil {
			t.Fatal(err)
		}
		a := &answer{returned: r.GetReturnedResources(), version: r.GetResponseVersion(), removed: slices.Sorted(slices.Values(m.GetRemovedResources()))}
		for _, res := range m.GetResources() {
			if got := resourceName(t, res.GetResource().GetValue()); got != res.GetName() {
				t.Fatalf("delta resource named %q carries %q", res.GetName(), got)
			}
			a.names = append(a.names, res.GetName())
		}
		slices.Sort(a.names)
		s.sub.SetReturnedResources(r.GetReturnedResources())
		return a
	default:
		return nil
	}
}

func resourceName(t *testing.T, b []byte) string {
	t.Helper()
	var cla endpoint.ClusterLoadAssignment
	if err := proto.Unmarshal(b, &cla); err != nil {
		t.Fatal(err)
	}
	return cla.GetClusterName()
}

func claResource(name string, weight uint32) types.Resource {
	return &endpoint.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpoint.LocalityLbEndpoints{
		{LoadBalancingWeight: wrapperspb.UInt32(weight)},
	}}
}

// TestAnswersLikeLinearCache drives this cache and go-control-plane's
// LinearCache with the same random updates and stream requests, SotW and
// delta, named and wildcard, for a type answered in full state and one
// answered by change, and requires every stream to receive the same
// resources, removals, versions and returned-version maps from both.
func TestAnswersLikeLinearCache(t *testing.T) {
	for _, typeURL := range []string{resource.EndpointType, resource.ClusterType} {
		for seed := range uint64(40) {
			t.Run(fmt.Sprintf("%s/%d", typeURL[len(typeURL)-10:], seed), func(t *testing.T) {
				differential(t, typeURL, seed, 300)
			})
		}
	}
}

func differential(t *testing.T, typeURL string, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	ours, theirs := New(typeURL), cache.NewLinearCache(typeURL)
	names := []string{"a", "b", "c", "d", "e", "f"}
	const streams = 6
	var pairs [streams][2]*side
	for i := range pairs {
		for j, c := range []cache.Cache{ours, theirs} {
			pairs[i][j] = &side{c: c, sotwCh: make(chan cache.Response, 1), deltaCh: make(chan cache.DeltaResponse, 1)}
		}
	}
	randomNames := func() []string {
		var out []string
		for _, n := range names {
			if rng.IntN(2) == 0 {
				out = append(out, n)
			}
		}
		if rng.IntN(8) == 0 {
			out = append(out, "*")
		}
		return out
	}
	for step := range steps {
		if rng.IntN(3) == 0 {
			up := map[string]types.Resource{}
			var del []string
			for _, n := range names {
				switch rng.IntN(6) {
				case 0:
					up[n] = claResource(n, uint32(rng.IntN(3))) // often the same content again
				case 1:
					del = append(del, n)
				}
			}
			for _, c := range []interface {
				UpdateResources(map[string]types.Resource, []string) error
			}{ours, theirs} {
				if err := c.UpdateResources(up, del); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			i := rng.IntN(streams)
			delta := i%2 == 1
			first := pairs[i][0].cancel == nil
			subNames, unsub := randomNames(), randomNames()
			// A request overtaking a response: a SotW ADS stream drops
			// the response, a delta stream sends it first.
			if !delta && rng.IntN(2) == 0 {
				for _, s := range pairs[i] {
					s.drop()
				}
			} else {
				compare(t, step, i, pairs[i])
			}
			for _, s := range pairs[i] {
				request(t, s, typeURL, delta, first, subNames, unsub)
			}
		}
		for i := range pairs {
			if rng.IntN(4) != 0 { // some streams are slow to send
				compare(t, step, i, pairs[i])
			}
		}
	}
	for i := range pairs {
		compare(t, steps, i, pairs[i])
	}
	// LinearCache's own count goes wrong once a fired watch is cancelled,
	// so the streams' view is the reference.
	open := 0
	for i := range pairs {
		if pairs[i][0].open {
			open++
		}
	}
	if got := ours.NumWatches(); got != open {
		t.Fatalf("%d open watches, the streams wait on %d", got, open)
	}
}

func compare(t *testing.T, step, stream int, pair [2]*side) {
	t.Helper()
	a, b := pair[0].receive(t), pair[1].receive(t)
	if a.String() != b.String() {
		t.Fatalf("step %d stream %d: ours %s, LinearCache %s", step, stream, a, b)
	}
}

// drop discards a pending response unsent, as a SotW ADS stream does when a
// request of the same type overtakes it.
func (s *side) drop() {
	select {
	case <-s.sotwCh:
		s.open = false
	default:
	}
}

// request does what go-control-plane's servers do on a request: cancel the
// open watch, update the subscription, open a new watch.
func request(t *testing.T, s *side, typeURL string, delta, first bool, names, unsub []string) {
	t.Helper()
	wideRequest(t, s, typeURL, delta, first, typeURL == resource.ClusterType, names, unsub)
}

func TestUpdateWithAnUnmarshallableResourceChangesNothing(t *testing.T) {
	c := New(resource.EndpointType)
	if err := c.UpdateResources(map[string]types.Resource{"a": claResource("a", 1)}, nil); err != nil {
		t.Fatal(err)
	}
	before := c.Resources()
	err := c.UpdateResources(map[string]types.Resource{"a": claResource("a", 2), "b": nil}, []string{"a"})
	if err == nil {
		t.Fatal("an update with a nil resource succeeded")
	}
	if !maps.EqualFunc(before, c.Resources(), func(x, y []byte) bool { return string(x) == string(y) }) {
		t.Fatal("a failed update changed the cache")
	}
}

// TestResponseAllocationsDoNotGrowWithTheSubscription pins what the cache
// allocates for one change reaching a stream and the stream re-arming: the
// same whether the stream subscribes to 10 names or 1,000. LinearCache
// copied the client's whole returned-versions map into every response.
func TestResponseAllocationsDoNotGrowWithTheSubscription(t *testing.T) {
	allocs := func(n int) float64 {
		c := New(resource.EndpointType)
		names := make([]string, n)
		all := make(map[string]types.Resource, n)
		for i := range names {
			names[i] = fmt.Sprintf("cluster-%04d", i)
			all[names[i]] = claResource(names[i], 1)
		}
		if err := c.UpdateResources(all, nil); err != nil {
			t.Fatal(err)
		}
		sub := stream.NewSotwSubscription(names, false)
		ch := make(chan cache.Response, 1)
		req := &discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names}
		arm := func() {
			if _, err := c.CreateWatch(req, sub, ch); err != nil {
				t.Fatal(err)
			}
		}
		take := func() {
			r := <-ch
			sub.SetReturnedResources(r.GetReturnedResources())
			req.VersionInfo = r.GetResponseVersion()
		}
		arm()
		take()
		arm()
		update := map[string]types.Resource{names[0]: claResource(names[0], 2)}
		return testing.AllocsPerRun(50, func() {
			if err := c.UpdateResources(update, nil); err != nil {
				t.Fatal(err)
			}
			take()
			arm()
		})
	}
	small, large := allocs(10), allocs(1000)
	t.Logf("allocations per change and re-arm: %.0f at 10 names, %.0f at 1,000", small, large)
	if large > small {
		t.Fatalf("a stream subscribing to 1,000 names costs %.0f allocations per response, one with 10 costs %.0f", large, small)
	}
}
