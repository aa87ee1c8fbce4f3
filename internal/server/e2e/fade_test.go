package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/testcp"
)

// clock is a settable time source: real time until frozen, so a fade can be
// held at one step while a real client is measured against it.
type clock struct {
	mu     sync.Mutex
	frozen time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen.IsZero() {
		return time.Now()
	}
	return c.frozen
}

func (c *clock) Set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = at
}

// sweep routes keys through the real grpc-go client and asks /debug/pick
// (client=grpc) for each; it returns the backend per key and the number of
// disagreements.
func sweep(t *testing.T, cp *testcp.ControlPlane, keys int, route func(string) (string, error)) (map[string]string, int) {
	t.Helper()
	got := make(map[string]string, keys)
	bad := 0
	for i := range keys {
		key := fmt.Sprintf("product-%d", i)
		be, err := route(key)
		if err != nil {
			t.Fatalf("RPC for %s: %v", key, err)
		}
		want := cp.Pick("products", key, "grpc")
		if want.ByClient["envoy"] != want.Endpoint || want.ByClient["clientlib"] != want.Endpoint {
			t.Fatalf("key %s: data planes disagree mid-fade: %v", key, want.ByClient)
		}
		if be != want.Endpoint {
			bad++
		}
		got[key] = be
	}
	return got, bad
}

// sweepAgreed sweeps until grpc-go routes every key where /debug/pick says,
// for up to 20 s (the client may still be applying a step's CDS and EDS).
func sweepAgreed(t *testing.T, cp *testcp.ControlPlane, keys int, route func(string) (string, error), when string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, bad := sweep(t, cp, keys, route)
		if bad == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d/%d keys disagree with /debug/pick", when, bad, keys)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// newOnly checks the fade-in promise between two sweeps of the same keys:
// a key on an old backend in now is where it was in before (no move
// between old backends), and a key that was on a new backend is still on
// a new one (never back to an old one). It returns the keys per new
// backend in now.
func newOnly(t *testing.T, when string, before, now map[string]string, isNew func(string) bool) map[string]int {
	t.Helper()
	onNew := map[string]int{}
	for key, be := range now {
		switch {
		case isNew(be):
			onNew[be]++
		case isNew(before[key]):
			t.Fatalf("%s: key %s went back from new backend %s to old %s", when, key, before[key], be)
		case be != before[key]:
			t.Fatalf("%s: key %s moved between old backends %s -> %s", when, key, before[key], be)
		}
	}
	return onNew
}

// TestFadeGRPCAgreesWithDebugPickMidFade holds a fade at a step partway
// through and checks that grpc-go's own xDS client and ring_hash balancer
// route 1000 keys exactly where /debug/pick says, that the new backend
// receives only keys it keeps after the fade, and that none of the old
// backends trade keys.
func TestFadeGRPCAgreesWithDebugPickMidFade(t *testing.T) {
	const fade = "    fade_in: {duration: 6s, exponent: 1}\n"
	backends := testcp.StartBackends(t, 11)
	clk := &clock{}
	cp := testcp.Start(t, testcp.TempFile(t, endpointsYAML("products", "ring_hash", "x-product-id", fade, backends[:10], nil)), testcp.WithClock(clk.Now))
	client := dialXDS(t, cp.XDSAddr, "products")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	route := func(key string) (string, error) { return testcp.Call(ctx, client, "x-product-id", key) }

	const keys = 1000
	before, bad := sweep(t, cp, keys, route)
	if bad != 0 {
		t.Fatalf("before the scale-up %d/%d keys disagree", bad, keys)
	}

	testcp.WriteFile(t, cp.File, endpointsYAML("products", "ring_hash", "x-product-id", fade, backends, nil))
	var start time.Time
	testcp.WaitFor(t, 5*time.Second, "the new endpoint to fade in", func() bool {
		if st := cp.Server.Current().Fading["products"]; len(st) == 1 {
			start = st[0].Start
			return true
		}
		return false
	})
	// Hold the fade at 2.5 s of 6 s: the step in force is at 1.5 to 2.5 s
	// (share 0.25 to 0.42). The step timer armed for the next second
	// rebuilds at the frozen instant.
	clk.Set(start.Add(2500 * time.Millisecond))
	testcp.WaitFor(t, 5*time.Second, "the held step", func() bool {
		st := cp.Server.Current().Fading["products"]
		return len(st) == 1 && st[0].Share >= 0.25 && st[0].Share < 0.5
	})

	mid := sweepAgreed(t, cp, keys, route, "mid-fade")
	newAddr := backends[10].Addr
	isNew := func(be string) bool { return be == newAddr }
	onNew := newOnly(t, "mid-fade", before, mid, isNew)[newAddr]

	// End the fade: every key the new backend took mid-fade stays there.
	clk.Set(start.Add(7 * time.Second))
	testcp.WaitFor(t, 5*time.Second, "the fade to end", func() bool { return len(cp.Server.Current().Fading["products"]) == 0 })
	after := sweepAgreed(t, cp, keys, route, "after the fade")
	newOnly(t, "after the fade", mid, after, isNew)
	final := newOnly(t, "over the fade", before, after, isNew)[newAddr]
	t.Logf("mid-fade: 1000/1000 keys agree with /debug/pick; new backend holds %d keys mid-fade, %d after", onNew, final)
	if onNew == 0 || onNew >= final {
		t.Fatalf("new backend holds %d keys mid-fade and %d after; want a partial share", onNew, final)
	}
}
