package fadein

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// portCounts builds the ring of each dialect with the ringhash ports
// (hashing every entry) and returns the entry counts per dialect.
func portCounts(t testing.TB, weights []uint32, minRing, maxRing uint64) map[string][]uint64 {
	t.Helper()
	eps := make([]ringhash.Endpoint, len(weights))
	geps := make([]ringhash.Endpoint, len(weights))
	a113 := grpcA113Weights(weights)
	for i := range weights {
		key := fmt.Sprintf("10.0.%03d.%03d:8080", i>>8, i&255) // key order = EDS order
		eps[i] = ringhash.Endpoint{Key: key, Weight: weights[i]}
		geps[i] = ringhash.Endpoint{Key: key, Weight: a113[i]}
	}
	capMin, capMax := min(minRing, ringhash.GRPCRingHashCap), min(maxRing, ringhash.GRPCRingHashCap)
	out := map[string][]uint64{}
	for name, b := range map[string]struct {
		eps      []ringhash.Endpoint
		min, max uint64
		sort     bool
	}{
		"envoy":         {eps, minRing, maxRing, false},
		"grpc-go":       {geps, capMin, capMax, true},
		"grpc-js/ccore": {eps, capMin, capMax, false},
	} {
		r, err := ringhash.NewRingHash(b.eps, ringhash.RingHashOptions{MinRingSize: b.min, MaxRingSize: b.max, SortByKey: b.sort})
		if err != nil {
			t.Fatal(err)
		}
		out[name] = entryCounts(r, len(weights))
	}
	return out
}

// portExact is PairExact computed with the ports instead of walkCounts
// (without fused multiply-add, which the ports never use).
func portExact(t testing.TB, weights []uint32, counts []uint64, minRing, maxRing uint64) bool {
	for _, got := range portCounts(t, weights, minRing, maxRing) {
		if !slices.Equal(got, counts) {
			return false
		}
	}
	return true
}

// TestWalkCountsIsTheRingHashWalk pins walkCounts, which PairExact and the
// schedule rely on, to the ports.
func TestWalkCountsIsTheRingHashWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for range 300 {
		n := 1 + rng.IntN(60)
		w := make([]uint32, n)
		for i := range w {
			w[i] = 1 + uint32(rng.IntN(1<<uint(1+rng.IntN(25))))
		}
		minRing := 1 + uint64(rng.IntN(4096))
		maxRing := minRing + uint64(rng.IntN(4096))
		got := portCounts(t, w, minRing, maxRing)
		if want := walkCounts(w, minRing, maxRing, false); !slices.Equal(got["envoy"], want) {
			t.Fatalf("weights %v, ring %d..%d: walk %v, port %v", w, minRing, maxRing, want, got["envoy"])
		}
		capMin, capMax := min(minRing, 4096), min(maxRing, 4096)
		if want := walkCounts(a113Weights(w), capMin, capMax, false); !slices.Equal(got["grpc-go"], want) {
			t.Fatalf("a113: weights %v: walk %v, port %v", w, want, got["grpc-go"])
		}
	}
}

// TestMinRingWindowIsNecessary checks the lemma the schedule rests on from
// the other side: for arbitrary weights and every minimum ring size, with a
// maximum above the total, whenever the walk gives counts without a 0, the
// minimum lies in MinRingWindow(counts). No choice of weights escapes it.
func TestMinRingWindowIsNecessary(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	checked := 0
	for range 120 {
		n := 2 + rng.IntN(30)
		w := make([]uint32, n)
		for i := range w {
			w[i] = 1 + uint32(rng.IntN(1<<uint(1+rng.IntN(20))))
		}
		for m := uint64(1); m <= 4096; m += 1 + uint64(rng.IntN(15)) {
			for _, fused := range []bool{false, true} {
				// A maximum the walk never reaches: the minimum decides.
				counts := walkCounts(w, m, 1<<14, fused)
				lo, hi, ok := MinRingWindow(counts)
				if !ok || sum(counts) >= 1<<14-1 {
					continue
				}
				checked++
				if m < lo || m > hi {
					t.Fatalf("weights %v, minimum %d: counts %v, outside the window %d..%d", w, m, counts, lo, hi)
				}
			}
		}
	}
	t.Logf("%d (weights, minimum) pairs inside their window", checked)
}

// TestStableWeightsExactOverTheWindow brute-forces StableWeights: fade
// layouts and random counts, minimum ring sizes spread over the window,
// each built by every port.
func TestStableWeightsExactOverTheWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	var configs, refused int
	check := func(counts []uint64) {
		t.Helper()
		lo, hi, ok := MinRingWindow(counts)
		if !ok {
			return
		}
		if slices.Min(counts) != slices.Max(counts) {
			hi-- // the top needs a scale of exactly R (MinRingWindow)
		}
		mins := []uint64{lo, hi, lo + uint64(rng.Int64N(int64(hi-lo+1)))}
		configs++
		w, err := StableWeights(counts, mins, 4096)
		if err != nil {
			refused++
			return
		}
		for _, m := range mins {
			if !portExact(t, w, counts, m, 4096) {
				t.Fatalf("counts %v, weights %v, minimum %d: %v", counts, w, m, portCounts(t, w, m, 4096))
			}
		}
	}
	for _, n := range []int{1, 2, 3, 5, 10, 13, 31, 50, 100, 127, 200, 1000} {
		k := EntriesPerWeight(uint64(n+1), 4096)
		for j := uint64(1); j <= k; j = min(j+max(1, j/8), max(k, j+1)) {
			counts := slices.Repeat([]uint64{k}, n+1)
			counts[n] = j
			check(counts)
			counts[n], counts[0] = k, j // the fading endpoint sorts first
			check(counts)
		}
	}
	for range 500 {
		n := 2 + rng.IntN(200)
		counts := make([]uint64, n)
		for i := range counts {
			counts[i] = 1 + uint64(rng.IntN(max(1, 4096/n)))
		}
		check(counts)
	}
	t.Logf("%d configurations, %d refused (rounding defeats every candidate)", configs, refused)
	if refused*20 > configs {
		t.Fatalf("refused %d of %d", refused, configs)
	}
}

// scenarioSteps returns the planned counts, in walk order, at every step
// of a simulated scale-up: the steady ring before it, each fade step, the
// steady ring after it.
func scenarioSteps(t testing.TB, sc simSpec) [][]uint64 {
	n := sc.old + sc.add
	kOld, _ := LayoutEntriesPerWeight(uint64(sc.old), 4096, sc.capacity)
	kNew, _ := LayoutEntriesPerWeight(uint64(n), 4096, sc.capacity)
	t0 := time.Unix(1_780_000_000, 0)
	eps := make([]RampEndpoint, n)
	for i, ep := range simEndpoints(n, 1) {
		eps[i] = RampEndpoint{Key: ep.Key, Final: kNew}
		if i >= sc.old {
			eps[i].Start = sc.start(t0, i-sc.old)
		}
	}
	steps := [][]uint64{slices.Repeat([]uint64{kOld}, sc.old)}
	for step := 0; ; step++ {
		at := t0.Add(time.Duration(step) * time.Second)
		var cur []RampEndpoint
		for _, ep := range eps {
			if ep.Start.IsZero() || !ep.Start.After(at) {
				cur = append(cur, ep)
			}
		}
		steps = append(steps, planCounts(t, cur, at))
		if len(cur) == n && !slices.ContainsFunc(cur, func(ep RampEndpoint) bool { return simCurve.Share(at.Sub(ep.Start)) < 1 }) {
			return steps
		}
	}
}

// planCounts is PlanRamp's counts for the endpoints in EDS, in walk order;
// departed endpoints (Gone set) follow them in eps.
func planCounts(t testing.TB, eps []RampEndpoint, at time.Time) []uint64 {
	t.Helper()
	inEDS := slices.IndexFunc(eps, func(ep RampEndpoint) bool { return !ep.Gone.IsZero() })
	if inEDS < 0 {
		inEDS = len(eps)
	}
	slices.SortFunc(eps[:inEDS], func(a, b RampEndpoint) int { return cmpString(a.Key, b.Key) })
	plan, err := PlanRamp(eps, simCurve, ringhash.XXHash, 4096, at)
	if err != nil {
		t.Fatal(err)
	}
	return plan.Counts[:inEDS]
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// rollingRestartSteps: 100 endpoints of 32 entries replaced one every 3 s
// (20 of them), each replacement fading in over the production curve.
func rollingRestartSteps(t testing.TB) [][]uint64 {
	const n, replaced, every = 100, 20, 3 * time.Second
	t0 := time.Unix(1_780_000_000, 0)
	old := make([]RampEndpoint, n)
	for i := range old {
		old[i] = RampEndpoint{Key: fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250+1), Final: 32}
	}
	var steps [][]uint64
	end := t0.Add(replaced*every + simCurve.Duration + time.Second)
	for at := t0.Add(-time.Second); !at.After(end); at = at.Add(time.Second) {
		var eds, gone []RampEndpoint
		for i, ep := range old {
			start := t0.Add(time.Duration(i) * every)
			if i >= replaced || at.Before(start) {
				eds = append(eds, ep)
				continue
			}
			ep.Gone = start
			gone = append(gone, ep)
			eds = append(eds, RampEndpoint{Key: fmt.Sprintf("10.1.%d.%d:8080", i/250, i%250+1), Final: 32, Start: start})
		}
		steps = append(steps, planCounts(t, append(eds, gone...), at))
	}
	return steps
}

// scheduleScenarios are the scale-ups of the fade-in simulation and a
// rolling restart.
func scheduleScenarios(t testing.TB) map[string][][]uint64 {
	out := map[string][][]uint64{"rolling-restart-100x20": rollingRestartSteps(t)}
	for _, sc := range simScenarios {
		out[sc.name()] = scenarioSteps(t, sc)
	}
	return out
}

// scheduleFigures counts a schedule's Cluster changes, endpoint pushes and
// mixed pairs that do not build the planned ring.
type scheduleFigures struct{ cds, eds, inexact, pairs int }

func figures(steps [][]uint64, sched []RingStep) scheduleFigures {
	var f scheduleFigures
	for t := 1; t < len(sched); t++ {
		if sched[t].MinRing != sched[t-1].MinRing || sched[t].MaxRing != sched[t-1].MaxRing {
			f.cds++
			f.pairs += 2
			if !sched[t].PrevExact {
				f.inexact++ // new Cluster, old weights
			}
			if !sched[t-1].NextExact {
				f.inexact++ // old Cluster, new weights
			}
		}
		if !slices.Equal(sched[t].Weights, sched[t-1].Weights) || !slices.Equal(steps[t], steps[t-1]) {
			f.eds++
		}
	}
	return f
}

// baselineFigures is the same for ExactWeights with minimum = maximum =
// total at every step (what ringxds published before).
func baselineFigures(t testing.TB, steps [][]uint64) scheduleFigures {
	sched := make([]RingStep, len(steps))
	for i, counts := range steps {
		w, size, err := ExactWeights(counts)
		if err != nil {
			t.Fatal(err)
		}
		sched[i] = RingStep{MinRing: size, MaxRing: size, Weights: w}
	}
	for i := range sched {
		s := &sched[i]
		s.PrevExact = i == 0 || PairExact(s.Weights, steps[i], sched[i-1].MinRing, sched[i-1].MaxRing)
		s.NextExact = i == len(sched)-1 || PairExact(s.Weights, steps[i], sched[i+1].MinRing, sched[i+1].MaxRing)
	}
	return figures(steps, sched)
}

// TestRingSizeScheduleEveryPairPerDialect brute-forces the schedule of
// each scenario: every step's endpoints with its own Cluster and with its
// neighbours' are built by every port; the own pair must be exact, and each
// mixed pair exactly as exact as the schedule reports (so /debug/snapshot
// can say so). It logs the figures the issue asks for.
func TestRingSizeScheduleEveryPairPerDialect(t *testing.T) {
	for name, steps := range scheduleScenarios(t) {
		sched, err := RingSizeSchedule(steps, 4096)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, s := range sched {
			if !s.Exact || !portExact(t, s.Weights, steps[i], s.MinRing, s.MaxRing) {
				t.Fatalf("%s step %d: own pair inexact", name, i)
			}
			for _, nb := range []struct {
				j    int
				flag bool
			}{{i - 1, s.PrevExact}, {i + 1, s.NextExact}} {
				if nb.j < 0 || nb.j >= len(sched) {
					continue
				}
				o := sched[nb.j]
				if got := portExact(t, s.Weights, steps[i], o.MinRing, o.MaxRing); got != nb.flag && nb.flag {
					t.Fatalf("%s step %d with Cluster of step %d: reported exact, ports disagree", name, i, nb.j)
				}
			}
		}
		f, b := figures(steps, sched), baselineFigures(t, steps)
		t.Logf("%-36s steps %3d  schedule: CDS changes %2d, EDS pushes %2d, inexact mixed pairs %d/%d   min=max=total: CDS changes %2d, inexact %d/%d",
			name, len(steps), f.cds, f.eds, f.inexact, f.pairs, b.cds, b.inexact, b.pairs)
	}
}

// TestTenToElevenCannotStayExact shows where the premise of "no mixed ring,
// ever" fails: in 10 -> 11 (256 entries each) the last fade steps add more
// entries than the window of their smallest count is wide, so two
// consecutive steps share no minimum ring size; by the lemma
// (TestMinRingWindowIsNecessary) no weights make both mixed pairs of that
// change exact, and maximum = total cannot serve two totals at all.
func TestTenToElevenCannotStayExact(t *testing.T) {
	steps := scenarioSteps(t, simSpec{old: 10, add: 1})
	disjoint := 0
	for i := 1; i < len(steps); i++ {
		lo0, hi0, _ := MinRingWindow(steps[i-1])
		lo1, hi1, _ := MinRingWindow(steps[i])
		if max(lo0, lo1) > min(hi0, hi1) {
			disjoint++
			t.Logf("step %d -> %d: totals %d -> %d, windows %d..%d and %d..%d", i-1, i, sum(steps[i-1]), sum(steps[i]), lo0, hi0, lo1, hi1)
		}
	}
	if disjoint == 0 {
		t.Fatal("every change shares a minimum: the premise would hold")
	}
}
