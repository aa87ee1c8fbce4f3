package fadein

import "fmt"

// RingStep is what one fade step publishes under RingSizeSchedule, and
// which of the pairs a client can hold around it build the planned ring.
type RingStep struct {
	// MinRing and MaxRing are the Cluster's ring sizes at the step.
	MinRing, MaxRing uint64
	// Weights are the EDS weights, in walk order.
	Weights []uint32
	// Exact: this step's Cluster with its weights builds the counts.
	// PrevExact: the previous step's Cluster with these weights does (the
	// weights arrived first); NextExact: the next step's Cluster with
	// these weights does (the next Cluster arrived first). At the ends of
	// the schedule the missing neighbour counts as exact.
	Exact, PrevExact, NextExact bool
}

// window is the range of minimum ring sizes a step's weights can serve,
// empty (lo > hi) when only maximum = total works (ExactWeights).
type window struct{ lo, hi uint64 }

func (w window) meet(o window) window { return window{max(w.lo, o.lo), min(w.hi, o.hi)} }
func (w window) empty() bool          { return w.lo > w.hi }

// RingSizeSchedule chooses the ring sizes and weights of a sequence of
// steps (the planned entry counts per step, in walk order; endpoints may
// come and go between steps) so that the Cluster changes as rarely as the
// arithmetic allows and mixed pairs stay exact wherever that is possible.
//
// The first and last steps are steady states (no fade before, none after):
// they publish SteadyMinRing, the minimum the cluster would publish with no
// memory of the fade, so that a replica that just started agrees. Between
// them the steps are cut into runs of one minimum ring size. A run [a, b]
// needs a minimum inside the window (MinRingWindow) of each of its steps
// and, for the mixed pairs at its ends, of steps a-1 and b+1; a dynamic
// program takes the cut with the fewest inexact mixed pairs and then the
// fewest Cluster changes. Windows only grow wider while some endpoint holds
// few entries, so a run ends when the fading endpoints near their final
// counts: about once each time the smallest count c grows by R/c, and never
// while c is small. The maximum stays at maxRing throughout (it must cover
// every total), except on a step that holds an endpoint at 0 entries, which
// only maximum = total can express.
func RingSizeSchedule(steps [][]uint64, maxRing uint64) ([]RingStep, error) {
	n := len(steps)
	if n == 0 {
		return nil, nil
	}
	win := make([]window, n)
	for t, counts := range steps {
		if sum(counts) > maxRing {
			return nil, fmt.Errorf("%w: step %d has %d entries, more than the maximum ring size %d", ErrLayout, t, sum(counts), maxRing)
		}
		win[t] = stepWindow(counts, maxRing)
	}
	// Anchor the steady ends to their canonical minimum.
	for _, t := range []int{0, n - 1} {
		if !win[t].empty() {
			win[t] = window{win[t].lo, win[t].lo}
		}
	}
	mins := cutRuns(win)
	out := make([]RingStep, n)
	for t, counts := range steps {
		out[t].MinRing, out[t].MaxRing = mins[t], maxRing
		if win[t].empty() {
			// Past ExactWeights' limit the step is near exact (RingStep.Exact
			// says which): a ring that large has nothing better.
			w, size, err := NearExactWeights(counts)
			if err != nil {
				return nil, fmt.Errorf("step %d: %w", t, err)
			}
			out[t] = RingStep{MinRing: size, MaxRing: size, Weights: w}
			continue
		}
		w, err := stepWeights(counts, mins, t, maxRing)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", t, err)
		}
		out[t].Weights = w
	}
	for t := range out {
		s := &out[t]
		s.Exact = PairExact(s.Weights, steps[t], s.MinRing, s.MaxRing)
		s.PrevExact = t == 0 || PairExact(s.Weights, steps[t], out[t-1].MinRing, out[t-1].MaxRing)
		s.NextExact = t == n-1 || PairExact(s.Weights, steps[t], out[t+1].MinRing, out[t+1].MaxRing)
	}
	return out, nil
}

// SteadyMinRing is the minimum ring size a cluster with no fade publishes
// for its counts: the lowest of its window, which is the most likely to
// serve the step before it too (a fade's last step holds fewer entries), and
// the total when only maximum = total works.
func SteadyMinRing(counts []uint64, maxRing uint64) uint64 {
	if w := stepWindow(counts, maxRing); !w.empty() {
		return w.lo
	}
	return sum(counts)
}

// stepWindow is MinRingWindow narrowed to the minimums the walks accept:
// the scale is the same for every minimum inside the window, so only its
// ends can differ, by rounding, and the equal-count case can fail whole.
func stepWindow(counts []uint64, maxRing uint64) window {
	lo, hi, ok := MinRingWindow(counts)
	if !ok {
		return window{1, 0}
	}
	good := func(m uint64) bool {
		_, err := StableWeights(counts, []uint64{m}, maxRing)
		return err == nil
	}
	mid := lo + (hi-lo)/2
	if !good(mid) {
		return window{1, 0}
	}
	for lo < mid && !good(lo) {
		lo++
	}
	for hi > mid && !good(hi) {
		hi--
	}
	return window{lo, hi}
}

// stepWeights are the weights of step t, exact under its own minimum and,
// where its window holds them, its neighbours' (the previous step's first:
// the server sends a step's Cluster before its endpoints, so a client is
// likelier to hold the new Cluster with the old weights).
func stepWeights(counts []uint64, mins []uint64, t int, maxRing uint64) ([]uint32, error) {
	lo, hi, _ := MinRingWindow(counts)
	in := func(t int) bool { return t >= 0 && t < len(mins) && mins[t] >= lo && mins[t] <= hi }
	var sets [][]uint64
	if in(t-1) && in(t+1) {
		sets = append(sets, []uint64{mins[t-1], mins[t], mins[t+1]})
	}
	if in(t - 1) {
		sets = append(sets, []uint64{mins[t-1], mins[t]})
	}
	if in(t + 1) {
		sets = append(sets, []uint64{mins[t], mins[t+1]})
	}
	sets = append(sets, []uint64{mins[t]})
	var err error
	for _, ms := range sets {
		var w []uint32
		if w, err = StableWeights(counts, ms, maxRing); err == nil {
			return w, nil
		}
	}
	return nil, err
}

// cutRuns chooses each step's minimum ring size: runs of one minimum, with
// the fewest inexact mixed pairs, then the fewest changes (see
// RingSizeSchedule). Steps with an empty window stand alone; their value is
// unused.
func cutRuns(win []window) []uint64 {
	n := len(win)
	type cost struct{ broken, runs int }
	less := func(a, b cost) bool { return a.broken < b.broken || a.broken == b.broken && a.runs < b.runs }
	best := make([]cost, n+1) // best[b]: steps 0..b-1 cut
	from := make([]int, n+1)
	pick := make([]uint64, n+1)
	for b := 1; b <= n; b++ {
		best[b] = cost{1 << 30, 0}
		inner := window{0, ^uint64(0)}
		for a := b - 1; a >= 0; a-- { // run [a, b-1]
			if win[a].empty() && a < b-1 {
				break // a step with an empty window stands alone
			}
			inner = inner.meet(win[a])
			if inner.empty() && a < b-1 {
				break
			}
			m, broken := runMin(win, inner, a, b-1)
			c := cost{best[a].broken + broken, best[a].runs + 1}
			if less(c, best[b]) {
				best[b], from[b], pick[b] = c, a, m
			}
		}
	}
	mins := make([]uint64, n)
	for b := n; b > 0; b = from[b] {
		for t := from[b]; t < b; t++ {
			mins[t] = pick[b]
		}
	}
	return mins
}

// runMin picks the minimum of run [a, b] inside inner, serving the steps
// next to it where it can (the one before first), and counts the mixed
// pairs it leaves inexact. It takes the largest such minimum: totals grow
// during a scale-up, and the windows' lower ends with them.
func runMin(win []window, inner window, a, b int) (uint64, int) {
	if inner.empty() {
		return 0, 2 // a step only maximum = total serves
	}
	prev, next := window{0, ^uint64(0)}, window{0, ^uint64(0)}
	if a > 0 {
		prev = win[a-1]
	}
	if b < len(win)-1 {
		next = win[b+1]
	}
	for _, o := range []struct {
		w      window
		broken int
	}{{inner.meet(prev).meet(next), 0}, {inner.meet(prev), 1}, {inner.meet(next), 1}} {
		if !o.w.empty() {
			return o.w.hi, o.broken
		}
	}
	return inner.hi, 2
}
