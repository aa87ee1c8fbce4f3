package fadein

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// scenarioKeyedSteps is scenarioSteps with each step's ring keys, in walk
// order, beside its counts.
func scenarioKeyedSteps(t testing.TB, sc simSpec) (keys [][]string, steps [][]uint64) {
	n := sc.old + sc.add
	kOld, _ := LayoutEntriesPerWeight(uint64(sc.old), 4096, sc.capacity)
	kNew, _ := LayoutEntriesPerWeight(uint64(n), 4096, sc.capacity)
	t0 := time.Unix(1_780_000_000, 0)
	eps := make([]RampEndpoint, n)
	var oldKeys []string
	for i, ep := range simEndpoints(n, 1) {
		eps[i] = RampEndpoint{Key: ep.Key, Final: kNew}
		if i >= sc.old {
			eps[i].Start = sc.start(t0, i-sc.old)
		} else {
			oldKeys = append(oldKeys, ep.Key)
		}
	}
	slices.Sort(oldKeys)
	keys, steps = [][]string{oldKeys}, [][]uint64{slices.Repeat([]uint64{kOld}, sc.old)}
	for step := 0; step < 600; step++ {
		at := t0.Add(time.Duration(step) * time.Second)
		var cur []RampEndpoint
		for _, ep := range eps {
			if ep.Start.IsZero() || !ep.Start.After(at) {
				cur = append(cur, ep)
			}
		}
		counts := planCounts(t, cur, at) // sorts cur by key
		k := make([]string, len(cur))
		for i, ep := range cur {
			k[i] = ep.Key
		}
		keys, steps = append(keys, k), append(steps, counts)
		if len(cur) == n && !slices.ContainsFunc(cur, func(ep RampEndpoint) bool { return simCurve.Share(at.Sub(ep.Start)) < 1 }) {
			break
		}
	}
	return keys, steps
}

// mixedMoves is the share of keys, in percent, that the ring of weights
// under Cluster sizes (minRing, maxRing) gives another owner than the
// planned ring (counts) of the same endpoints: what a client holding that
// mixed pair sends astray, Envoy's walk.
func mixedMoves(t testing.TB, keys []string, weights []uint32, counts []uint64, minRing, maxRing uint64, hs []uint64) float64 {
	eps := make([]ringhash.Endpoint, len(keys))
	planned := make([]ringhash.Endpoint, len(keys))
	for i, k := range keys {
		eps[i] = ringhash.Endpoint{Key: k, Weight: weights[i]}
		planned[i] = ringhash.Endpoint{Key: k, Weight: uint32(counts[i])}
	}
	mixed, err := ringhash.NewRingHash(eps, ringhash.RingHashOptions{MinRingSize: minRing, MaxRingSize: maxRing})
	if err != nil {
		t.Fatal(err)
	}
	want, err := NewCountRing(planned, ringhash.XXHash)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, h := range hs {
		if keys[mixed.Pick(h)] != keys[want.Pick(h)] {
			moved++
		}
	}
	return 100 * float64(moved) / float64(len(hs))
}

// TestFadeSimulationRingSizes adds to the fade-in simulation what the
// published ring sizes cost (docs/fade-in.md, simulation table): per
// scale-up, the Cluster changes and endpoint pushes of the fade under
// RingSizeSchedule, and, for each mixed pair that cannot be exact, the keys
// a client holding it sends to another endpoint than the planned ring does
// (for as long as it holds the pair). The planned rings themselves are the
// ringxds-ramp ones, so precision, old-old churn and flaps are unchanged.
func TestFadeSimulationRingSizes(t *testing.T) {
	hs := make([]uint64, 20_000)
	for i := range hs {
		hs[i] = ringhash.HashKey(fmt.Sprintf("product-%d", i))
	}
	for _, sc := range simScenarios {
		keys, steps := scenarioKeyedSteps(t, sc)
		sched, err := RingSizeSchedule(steps, 4096)
		if err != nil {
			t.Fatalf("%s: %v", sc.name(), err)
		}
		f := figures(steps, sched)
		var worst, total float64
		for i := 1; i < len(sched); i++ {
			a, b := sched[i-1], sched[i]
			if a.MinRing == b.MinRing && a.MaxRing == b.MaxRing {
				continue
			}
			if !b.PrevExact { // new weights, old Cluster
				m := mixedMoves(t, keys[i], b.Weights, steps[i], a.MinRing, a.MaxRing, hs)
				worst, total = max(worst, m), total+m
			}
			if !a.NextExact { // old weights, new Cluster
				m := mixedMoves(t, keys[i-1], a.Weights, steps[i-1], b.MinRing, b.MaxRing, hs)
				worst, total = max(worst, m), total+m
			}
		}
		b := baselineFigures(t, steps)
		t.Logf("%-32s CDS changes per fade %2d (min=max=total: %2d), EDS pushes per fade %2d, inexact mixed pairs %2d/%2d (before %2d/%2d), keys moved in a mixed state: worst pair %.2f%%, summed %.2f%%",
			sc.name(), f.cds, b.cds, f.eds, f.inexact, f.pairs, b.inexact, b.pairs, worst, total)
		if sc.old == 100 && sc.add == 10 && f.inexact != 0 {
			t.Errorf("%s: %d inexact mixed pairs, want 0", sc.name(), f.inexact)
		}
	}
}
