package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/testcp"
)

// batchYAML lists backends with fixed hash keys, so the ring (and the
// fade-in plan) does not depend on the ports the backends got.
func batchYAML(backends []*testcp.Backend) string { return batchYAMLKeys(backends, backends) }

// batchYAMLKeys lists the backends of serve, each with the hash key of its
// place in all, so that removing one leaves the others' keys alone.
func batchYAMLKeys(all, serve []*testcp.Backend) string {
	var b strings.Builder
	b.WriteString("clusters:\n  - name: products\n    lb_policy: ring_hash\n    hash_header: x-product-id\n    fade_in: {duration: 6s, exponent: 0.5, capacity: 16}\n    endpoints:\n")
	for i, be := range all {
		if !slices.Contains(serve, be) {
			continue
		}
		host, port, _ := strings.Cut(be.Addr, ":")
		fmt.Fprintf(&b, "      - {address: %s, port: %s, hash_key: backend-%02d}\n", host, port, i)
	}
	return b.String()
}

// startBatch starts 12 backends and a control plane serving the first 8
// on a settable clock, and routes keys through grpc-go's own xDS client.
// timeout bounds every RPC of the test together: generous, since each
// test sweeps thousands of keys and a loaded race-detector run is slow.
func startBatch(t *testing.T, timeout time.Duration) ([]*testcp.Backend, *clock, *testcp.ControlPlane, func(string) (string, error)) {
	t.Helper()
	backends := testcp.StartBackends(t, 12)
	clk := &clock{}
	cp := testcp.Start(t, testcp.TempFile(t, batchYAML(backends[:8])), testcp.WithClock(clk.Now))
	client := dialXDS(t, cp.XDSAddr, "products")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return backends, clk, cp, func(key string) (string, error) { return testcp.Call(ctx, client, "x-product-id", key) }
}

// scaleUpBatch serves all 12 backends and returns the new ones' fade start.
func scaleUpBatch(t *testing.T, cp *testcp.ControlPlane, backends []*testcp.Backend) time.Time {
	t.Helper()
	testcp.WriteFile(t, cp.File, batchYAML(backends))
	var start time.Time
	testcp.WaitFor(t, 5*time.Second, "the new endpoints to fade in", func() bool {
		if st := cp.Server.Current().Fading["products"]; len(st) == 4 {
			start = st[0].Start
			return true
		}
		return false
	})
	return start
}

// TestFadeBatchWithHeldEntryGRPCAgrees scales 8 backends to 12 at once
// (fade_in.capacity 16 keeps the layout: 256 entries each before and after)
// and holds the fade at a step where the plan keeps a new backend below its
// own curve: the entry its curve would add next is held back for ring
// order. grpc-go's own xDS client must route 1000 keys, and keys chosen to
// sit just before that held entry, exactly where /debug/pick says, move no
// key between old backends, and, after the fade, move no key back to an old
// one.
func TestFadeBatchWithHeldEntryGRPCAgrees(t *testing.T) {
	backends, clk, cp, route := startBatch(t, 240*time.Second)

	const keys = 1000
	before, bad := sweep(t, cp, keys, route)
	if bad != 0 {
		t.Fatalf("before the scale-up %d/%d keys disagree", bad, keys)
	}
	start := scaleUpBatch(t, cp, backends)

	// Find, with the server's own planner and inputs, a step at which a
	// new backend holds fewer entries than its own curve gives it.
	curve := fadein.Curve{Duration: 6 * time.Second, Exponent: 0.5}
	k, _ := fadein.LayoutEntriesPerWeight(12, 4096, 16)
	eps := make([]fadein.RampEndpoint, 12)
	for i := range eps {
		eps[i] = fadein.RampEndpoint{Key: fmt.Sprintf("backend-%02d", i), Final: k}
		if i >= 8 {
			eps[i].Start = start
		}
	}
	var hold time.Time
	held, heldEntry := -1, uint64(0)
	for m := 0; m <= 6 && held < 0; m++ {
		at := fadein.StepTime(start).Add(time.Duration(m)*time.Second + 500*time.Millisecond)
		plan, err := fadein.PlanRamp(eps, curve, ringhash.XXHash, 4096, at)
		if err != nil {
			t.Fatal(err)
		}
		for i := 8; i < 12; i++ {
			own := fadein.RampEntries(k, curve.Share(fadein.StepTime(at).Sub(start)))
			if plan.Fading[i] && plan.Counts[i] < own {
				hold, held, heldEntry = at, i, plan.Counts[i]
				break
			}
		}
	}
	if held < 0 {
		t.Fatal("no step of this fade holds a new backend below its curve; the test needs another layout")
	}
	clk.Set(hold)
	testcp.WaitFor(t, 5*time.Second, "the held step", func() bool {
		st := cp.Server.Current().Fading["products"]
		return len(st) == 4 && st[0].Share == curve.Share(fadein.StepTime(hold).Sub(start))
	})

	// Keys whose hash lies just before the held entry: they would be the
	// held backend's if grpc-go gave it that entry.
	first := ringhash.XXHash.AppendEntryHashes(nil, fmt.Sprintf("backend-%02d", held), heldEntry+1)[heldEntry]
	var probes []string
	for i := 0; len(probes) < 8; i++ {
		key := fmt.Sprintf("probe-%d", i)
		if first-ringhash.HashKey(key) < 1<<44 {
			probes = append(probes, key)
		}
	}
	testcp.WaitFor(t, 20*time.Second, "grpc-go to route the probe keys as /debug/pick says", func() bool {
		for _, key := range probes {
			be, err := route(key)
			if err != nil {
				t.Fatalf("RPC for %s: %v", key, err)
			}
			if want := cp.Pick("products", key, "grpc"); be != want.Endpoint {
				return false
			}
		}
		return true
	})

	mid := sweepAgreed(t, cp, keys, route, "mid-fade")
	newSet := map[string]bool{}
	for _, be := range backends[8:] {
		newSet[be.Addr] = true
	}
	isNew := func(be string) bool { return newSet[be] }
	onNew := newOnly(t, "mid-fade", before, mid, isNew)

	clk.Set(start.Add(7 * time.Second))
	testcp.WaitFor(t, 5*time.Second, "the fade to end", func() bool { return len(cp.Server.Current().Fading["products"]) == 0 })
	after := sweepAgreed(t, cp, keys, route, "after the fade")
	newOnly(t, "after the fade", mid, after, isNew)
	newOnly(t, "over the fade", before, after, isNew)
	hops := 0
	for key, be := range after {
		if isNew(mid[key]) && be != mid[key] {
			hops++
		}
	}
	t.Logf("held %s at %d entries, below its curve; mid-fade keys on new backends %v; %d keys passed between new backends", backends[held].Addr, heldEntry, onNew, hops)
}
