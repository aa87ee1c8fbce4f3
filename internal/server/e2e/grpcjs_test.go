package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/testcp"
)

// The product's promise for proxyless Node services: grpc-js's own xDS
// client (@grpc/grpc-js-xds 1.14.1 from npm) and ring_hash balancer send
// every key where /debug/pick says grpc-js sends it, which is where Envoy
// sends it.

func keyList(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("product-%d", i)
	}
	return keys
}

// routeAgreed routes keys through the grpc-js client until every key goes
// where /debug/pick?client=grpc-js says, for up to 20 s (the client may
// still be applying a push). It returns the backend per key.
func routeAgreed(t *testing.T, cp *testcp.ControlPlane, node *testcp.LineClient, cluster string, keys []string, when string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := node.Route(keys)
		bad, first := 0, ""
		if err == nil {
			for _, key := range keys {
				want := cp.Pick(cluster, key, dataplane.GRPCJS)
				if want.Policy != "ring_hash" {
					t.Fatalf("%s: /debug/pick says grpc-js runs %q on %s, want ring_hash", when, want.Policy, cluster)
				}
				if got[key] != want.Endpoint {
					if bad == 0 {
						first = fmt.Sprintf("key %s: grpc-js sent it to %s, /debug/pick says %s", key, got[key], want.Endpoint)
					}
					bad++
				}
			}
			if bad == 0 {
				return got
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d/%d keys disagree with /debug/pick (%s); routing error: %v", when, bad, len(keys), first, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestGRPCJSAgreesWithDebugPick(t *testing.T) {
	for _, tc := range []struct {
		name, policy string
		weights      []int
		// verdict is what /debug/clients must say of the client: a Maglev
		// cluster runs Maglev on Envoy, which gRPC cannot.
		verdict string
	}{
		{"ring_hash weights 1 1 2", "ring_hash", []int{1, 1, 2}, dataplane.StateOK},
		// Weights that do not sum to a power of two: grpc-js (doubles, like
		// Envoy) and grpc-go (A113 fixed point) may round differently, and
		// /debug/pick answers for each.
		{"ring_hash weights 1 2 3", "ring_hash", []int{1, 2, 3}, dataplane.StateOK},
		{"maglev served as ring_hash", "maglev", nil, dataplane.StateRingDiffers},
		{"skipper served as ring_hash", "skipper", []int{2, 1, 1}, dataplane.StateOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backends := testcp.StartBackends(t, 3)
			cp := testcp.Start(t, testcp.TempFile(t, endpointsYAML("products", tc.policy, "x-product-id", "", backends, tc.weights)))
			node := testcp.StartNodeClient(t, cp.XDSAddr, "products", "x-product-id")
			got := routeAgreed(t, cp, node, "products", keyList(1000), tc.policy)
			perBackend := map[string]int{}
			for _, be := range got {
				perBackend[be]++
			}
			t.Logf("grpc-js: 1000/1000 keys agree with /debug/pick; per backend %v", perBackend)
			if len(perBackend) != len(backends) {
				t.Fatalf("only %d of %d backends received keys: %v", len(perBackend), len(backends), perBackend)
			}
			assertVerdict(t, cp, dataplane.GRPCJS, "grpc-legacy", tc.verdict)
		})
	}
}

// assertVerdict checks /debug/clients for the connected client of
// implementation impl: recognised with its version, served kind, and
// judged state.
func assertVerdict(t *testing.T, cp *testcp.ControlPlane, impl, kind, state string) {
	t.Helper()
	var c server.ClientStatus
	testcp.WaitFor(t, 5*time.Second, "the "+impl+" client to be assessed on /debug/clients", func() bool {
		var body struct{ Clients []server.ClientStatus }
		cp.GetJSON("/debug/clients", &body)
		for _, s := range body.Clients {
			if s.Implementation.Implementation == impl && len(s.Verdicts) > 0 {
				c = s
				return true
			}
		}
		return false
	})
	if string(c.Kind) != kind || c.Compatibility != state || !c.Implementation.Version.Known() {
		t.Fatalf("/debug/clients: %s served %s, compatibility %s, version %q, verdicts %+v; want %s, %s, a version",
			c.Implementation.Implementation, c.Kind, c.Compatibility, c.Implementation.Version, c.Verdicts, kind, state)
	}
}

// A fade held mid-way: grpc-js follows each step's ring size (CDS) and
// weights (EDS) exactly, like Envoy and grpc-go.
func TestGRPCJSFollowsFadeIn(t *testing.T) {
	const fade = "    fade_in: {duration: 6s, exponent: 1}\n"
	backends := testcp.StartBackends(t, 11)
	clk := &clock{}
	cp := testcp.Start(t, testcp.TempFile(t, endpointsYAML("products", "ring_hash", "x-product-id", fade, backends[:10], nil)), testcp.WithClock(clk.Now))
	node := testcp.StartNodeClient(t, cp.XDSAddr, "products", "x-product-id")
	keys := keyList(1000)
	before := routeAgreed(t, cp, node, "products", keys, "before the scale-up")

	testcp.WriteFile(t, cp.File, endpointsYAML("products", "ring_hash", "x-product-id", fade, backends, nil))
	var start time.Time
	testcp.WaitFor(t, 5*time.Second, "the new endpoint to fade in", func() bool {
		if st := cp.Server.Current().Fading["products"]; len(st) == 1 {
			start = st[0].Start
			return true
		}
		return false
	})
	clk.Set(start.Add(2500 * time.Millisecond))
	testcp.WaitFor(t, 5*time.Second, "the held step", func() bool {
		st := cp.Server.Current().Fading["products"]
		return len(st) == 1 && st[0].Share >= 0.25 && st[0].Share < 0.5
	})
	mid := routeAgreed(t, cp, node, "products", keys, "mid-fade")
	newAddr := backends[10].Addr
	isNew := func(be string) bool { return be == newAddr }
	onNew := newOnly(t, "mid-fade", before, mid, isNew)[newAddr]

	clk.Set(start.Add(7 * time.Second))
	testcp.WaitFor(t, 5*time.Second, "the fade to end", func() bool { return len(cp.Server.Current().Fading["products"]) == 0 })
	after := routeAgreed(t, cp, node, "products", keys, "after the fade")
	final := newOnly(t, "over the fade", before, after, isNew)[newAddr]
	t.Logf("grpc-js mid-fade: 1000/1000 keys agree with /debug/pick; the new backend holds %d keys mid-fade, %d after", onNew, final)
	if onNew == 0 || onNew >= final {
		t.Fatalf("new backend holds %d keys mid-fade and %d after; want a partial share", onNew, final)
	}
}

// A removed endpoint stops receiving keys from grpc-js. (Other keys can
// move too: the ring keeps its size, so the remaining endpoints gain
// entries.)
func TestGRPCJSStopsUsingRemovedEndpoint(t *testing.T) {
	backends := testcp.StartBackends(t, 3)
	cp := testcp.Start(t, testcp.TempFile(t, endpointsYAML("products", "ring_hash", "x-product-id", "", backends, nil)))
	node := testcp.StartNodeClient(t, cp.XDSAddr, "products", "x-product-id")
	keys := keyList(1000)
	before := routeAgreed(t, cp, node, "products", keys, "before the removal")
	victim := backends[2].Addr
	hitsBefore := backends[2].Hits()

	testcp.WriteFile(t, cp.File, endpointsYAML("products", "ring_hash", "x-product-id", "", backends[:2], nil))
	after := routeAgreed(t, cp, node, "products", keys, "after the removal")
	moved := 0
	for _, key := range keys {
		if after[key] == victim {
			t.Fatalf("key %s still went to the removed endpoint %s", key, victim)
		}
		if before[key] == victim {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("the removed endpoint held none of the keys: the test proves nothing")
	}
	// Once the ring without the victim is in use, no RPC reaches it.
	settled := backends[2].Hits()
	if _, err := node.Route(keys); err != nil {
		t.Fatal(err)
	}
	if got := backends[2].Hits(); got != settled {
		t.Fatalf("the removed endpoint served %d more RPCs", got-settled)
	}
	t.Logf("the removed endpoint had %d of 1000 keys (%d RPCs); none reach it now", moved, settled-hitsBefore)
}
