package debug_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/debug"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/watch"
)

func explainPick(t *testing.T, h http.Handler, cluster, key string) debug.PickResult {
	t.Helper()
	q := url.Values{"cluster": {cluster}, "key": {key}, "explain": {"1"}}
	resp := get(t, h, "/debug/pick?"+q.Encode(), nil)
	var res debug.PickResult
	if err := json.Unmarshal([]byte(body(t, resp)), &res); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d, %v", q.Encode(), resp.StatusCode, err)
	}
	return res
}

// Every data plane's explanation names the entry its pick came from: the
// first at or after the key's hash (wrapping), or for Maglev the slot hash
// mod size, with its neighbours in ring order.
func TestExplainNamesTheEntryEachPickComesFrom(t *testing.T) {
	h := newHandler(&fakePublisher{snap: exampleSnapshot(t)})
	if res := explainPick(t, h, "products", "k"); len(res.Explain) != len(res.ByClient) {
		t.Fatalf("explained %d of %d data planes", len(res.Explain), len(res.ByClient))
	}
	if q := get(t, h, "/debug/pick?cluster=products&key=k", nil); strings.Contains(body(t, q), `"explain"`) {
		t.Fatal("explanations without explain=1")
	}
	for _, cluster := range []string{"products", "inventory", "catalog"} {
		for i := range 100 {
			key := fmt.Sprintf("key-%d", i)
			res := explainPick(t, h, cluster, key)
			hash, _ := strconv.ParseUint(res.Hash, 10, 64)
			for impl, x := range res.Explain {
				where := fmt.Sprintf("%s %s %s", cluster, key, impl)
				if x.Entry.Endpoint != res.ByClient[impl] {
					t.Fatalf("%s: explained entry owned by %s, pick %s", where, x.Entry.Endpoint, res.ByClient[impl])
				}
				if len(x.Before) != 2 || len(x.After) != 2 || x.Why == "" {
					t.Fatalf("%s: %d before, %d after, why %q", where, len(x.Before), len(x.After), x.Why)
				}
				n := x.Size
				if x.Before[1].Index != (x.Entry.Index-1+n)%n || x.After[0].Index != (x.Entry.Index+1)%n {
					t.Fatalf("%s: neighbours %d, %d of entry %d", where, x.Before[1].Index, x.After[0].Index, x.Entry.Index)
				}
				if x.Policy == ringhash.PolicyMaglev {
					if x.Entry.Index != int(hash%uint64(n)) {
						t.Fatalf("%s: slot %d, want hash mod %d = %d", where, x.Entry.Index, n, hash%uint64(n))
					}
					continue
				}
				entry, _ := strconv.ParseUint(x.Entry.Hash, 10, 64)
				prev, _ := strconv.ParseUint(x.Before[1].Hash, 10, 64)
				switch {
				case entry >= hash && (prev < hash || x.Entry.Index == 0):
				case entry < hash && x.Entry.Index == 0 && prev < hash:
				default:
					t.Fatalf("%s: hash %d lands on entry %d (%d), after %d", where, hash, x.Entry.Index, entry, prev)
				}
			}
		}
	}
	// A key hashed above the last entry of the Skipper ring wraps to
	// entry 0, its neighbours the ring's last entries and entry 1, 2.
	var eps []ringhash.Endpoint
	for _, port := range []uint32{9301, 9302, 9303} {
		eps = append(eps, ringhash.Endpoint{Key: ringhash.SkipperIdentity("http", "127.0.0.1", port)})
	}
	sk, err := ringhash.NewSkipper(eps)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	sk.Entries(func(h uint64, _ int) { last = max(last, h) })
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("wrap-%d", i); ringhash.HashKey(k) > last {
			key = k
		}
	}
	x := explainPick(t, h, "catalog", key).Explain["clientlib"]
	if x.Policy != ringhash.PolicySkipper || x.Entry.Index != 0 || x.Before[0].Index != x.Size-2 || x.Before[1].Index != x.Size-1 ||
		x.After[0].Index != 1 || !strings.Contains(x.Why, "wraps past its last entry") {
		t.Fatalf("key %s above the last entry: %+v", key, x)
	}
}

// Mid-fade, an entry the key would land on once the fade is over but that
// the data plane does not hold yet is listed as skipped, and belongs to
// the fading endpoint; the package's N-ring says when the key cuts over.
func TestExplainShowsEntriesSkippedMidFade(t *testing.T) {
	state, err := watch.ParseFile(examples.DefaultEndpointsName, examples.DefaultEndpoints)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	products, _ := state.Cluster("products")
	for i := range products.Endpoints {
		if products.Endpoints[i].Port == 9103 {
			products.Endpoints[i].FirstSeen = now.Add(-12 * time.Second) // 30 s fade: about 10% in
		}
	}
	snap, err := snapshot.Build(state, now)
	if err != nil {
		t.Fatal(err)
	}
	h := debug.New(debug.Options{Server: &fakePublisher{snap: snap}, Gatherer: prometheus.NewRegistry(), Now: func() time.Time { return now }})
	skipped, cutOver := map[string]int{}, 0
	for i := range 300 {
		res := explainPick(t, h, "products", fmt.Sprintf("key-%d", i))
		for impl, x := range res.Explain {
			for _, s := range x.Skipped {
				// The key may land on an entry of the fading endpoint that
				// is in already, past one that is not yet.
				if s.Endpoint != "127.0.0.1:9103" || !strings.Contains(s.Reason, "fading in") {
					t.Fatalf("%s key-%d: skipped %+v, landing on %s", impl, i, s, x.Entry.Endpoint)
				}
			}
			if len(x.Skipped) > 0 {
				skipped[impl]++
				if !strings.Contains(x.Why, "still fading in (skipped)") {
					t.Fatalf("%s key-%d: why %q does not mention the skip", impl, i, x.Why)
				}
			}
			if impl == "grpc-go-grpcbalancer" && strings.Contains(x.Why, "cut-over point") {
				cutOver++
			}
		}
	}
	// Envoy follows the weight ramp, grpcbalancer its N-ring.
	if skipped["envoy"] == 0 || skipped["grpc-go-grpcbalancer"] == 0 || cutOver == 0 {
		t.Fatalf("explanations with skipped entries %v, %d with a cut-over; want some of each mid-fade", skipped, cutOver)
	}
}
