package fadein

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// RampEndpoint is one endpoint of a ring_hash cluster laid out as entries
// per weight (EntriesPerWeight), as PlanRamp takes it.
type RampEndpoint struct {
	// Key is the endpoint's ring key: its hash_key, else host:port.
	Key string
	// Final is the number of ring entries the endpoint holds once its fade
	// is over: k x weight.
	Final uint64
	// Start is when the endpoint started fading in; the zero time marks an
	// established endpoint.
	Start time.Time
}

// RampPlan is one fade step of a laid-out ring_hash cluster.
type RampPlan struct {
	// Counts is each endpoint's ring entry count at the step, in input order.
	Counts []uint64
	// Fading reports, per endpoint, whether it is still fading at the step.
	Fading []bool
	// Next is the first step instant after the step at which a count
	// changes or a fade ends; zero when nothing fades.
	Next time.Time
	// Gradual counts the scale-ups whose entries could not all appear in
	// gap order without revealing most of them in one step, and were
	// ordered to follow the curve instead, at the price of some keys
	// hopping between their new endpoints.
	Gradual int
}

// always is an appearance step every step is past.
const always int64 = math.MinInt64

// PlanRamp decides how many ring entries each endpoint of a laid-out
// ring_hash cluster holds at step (rounded down to the step grid). eps must
// be in the order Envoy and grpc-go walk them, sorted by ring key.
//
// An endpoint holding c entries holds its first c entry hashes, so a
// fading endpoint gains entries in index order. For one new endpoint the
// curve alone (RampEntries) is enough: a key whose final entry is missing
// falls through to the next entry, which is either the new endpoint's own
// or an old endpoint's, the one that owned the key before.
//
// Several endpoints fading together need more. Between two consecutive
// entries of established endpoints ("a gap"), the fading entries split the
// keys among themselves: the keys just before an entry e are e's for good.
// If e is still missing while a later entry f of another endpoint in the
// same gap is there, e's keys land on f, whose endpoint warms keys it hands
// over when e appears. So within a gap an entry may appear only once the
// entries of other endpoints ahead of it have: together with index order
// that is a partial order on the fading entries. Holding entries back until
// their predecessors are in (the least schedule above the curve) meets it,
// but in a large batch the order chains most entries together and holds
// them to the last step: the fade becomes a jump. PlanRamp instead lays the
// entries of one scale-up (endpoints with the same start) out in an order
// that respects the partial order, choosing among the entries that may come
// next the one the curve wants first, and hands out the curve's appearance
// steps, sorted, along that order. The batch as a whole then follows the
// curve exactly; single endpoints run a little ahead of or behind it.
//
// Entries of an endpoint that started earlier are never held for a newer
// one: taking back an entry would send its keys back to an old endpoint.
// A newer endpoint's entry waits for older entries ahead of it. The walk's
// first endpoint must hold an entry (ExactWeights), so its entry 0 is always
// in; keys ahead of it in its gap may land on it early (rare, and only when
// that endpoint fades). The result depends only on the endpoints and the
// step, so replicas agree; an entry never appears after its endpoint's fade
// ends.
func PlanRamp(eps []RampEndpoint, curve Curve, hash ringhash.HashFunction, step time.Time) (RampPlan, error) {
	return planRamp(eps, curve, hash, step, exactJumpLimit)
}

// exactJumpLimit is how many times the curve's largest step a scale-up may
// bring in at one step to keep every entry in gap order.
const exactJumpLimit = 2

// planRamp is PlanRamp with the limit as a parameter; the fade-in
// simulation also runs it with no limit, to show what exact order costs.
func planRamp(eps []RampEndpoint, curve Curve, hash ringhash.HashFunction, step time.Time, jumpLimit float64) (RampPlan, error) {
	step = StepTime(step)
	stepAt := step.UnixNano()
	plan := RampPlan{Counts: make([]uint64, len(eps)), Fading: make([]bool, len(eps))}

	// appear[i][j] is the step (unix ns) from which entry j of fading
	// endpoint i is in the ring.
	appear := make([][]int64, len(eps))
	ends := make([]int64, len(eps))
	var total uint64
	for i, ep := range eps {
		total += ep.Final
		if total > ringhash.MaxRingSizeLimit {
			return RampPlan{}, fmt.Errorf("%w: %d entries exceed the ring size limit %d", ErrLayout, total, uint64(ringhash.MaxRingSizeLimit))
		}
		if ep.Start.IsZero() || ep.Final == 0 || curve.Share(step.Sub(ep.Start)) >= 1 {
			plan.Counts[i] = ep.Final
			continue
		}
		plan.Fading[i] = true
		appear[i], ends[i] = curveSteps(ep.Final, ep.Start, curve)
	}

	scheduleEntries(eps, appear, hash, jumpLimit, &plan)
	if appear[0] != nil {
		appear[0][0] = always
	}
	for i := range eps {
		if !plan.Fading[i] {
			continue
		}
		for _, at := range appear[i] {
			if at > stepAt {
				if plan.Next.IsZero() || at < plan.Next.UnixNano() {
					plan.Next = time.Unix(0, at)
				}
				break
			}
			plan.Counts[i]++
		}
		if plan.Next.IsZero() || ends[i] < plan.Next.UnixNano() {
			plan.Next = time.Unix(0, ends[i])
		}
	}
	return plan, nil
}

// curveSteps returns, for an endpoint with final entries that started
// fading at start, the step from which each entry is in by the curve alone
// (entry j at the first step where RampEntries exceeds j), and the step at
// which its fade ends: the first step at or after start + duration.
func curveSteps(final uint64, start time.Time, curve Curve) ([]int64, int64) {
	first, end := StepTime(start), curve.EndStep(start)
	steps := int64(end.Sub(first) / StepInterval)
	countAt := func(m int64) uint64 {
		return RampEntries(final, curve.Share(first.Add(time.Duration(m)*StepInterval).Sub(start)))
	}
	out := make([]int64, final)
	out[0] = first.UnixNano()
	// countAt is non-decreasing and countAt(steps) = final, so a binary
	// search per entry, from the previous entry's step, finds it.
	lo := int64(0)
	for j := uint64(1); j < final; j++ {
		hi := steps
		for lo < hi {
			m := lo + (hi-lo)/2
			if countAt(m) > j {
				hi = m
			} else {
				lo = m + 1
			}
		}
		out[j] = first.Add(time.Duration(lo) * StepInterval).UnixNano()
	}
	return out, end.UnixNano()
}

// node is one fading ring entry in scheduleEntries.
type node struct {
	ep, idx int32
}

// scheduleEntries rewrites appear, the curve steps of the fading entries,
// into the schedule PlanRamp describes.
func scheduleEntries(eps []RampEndpoint, appear [][]int64, hash ringhash.HashFunction, jumpLimit float64, stats *RampPlan) {
	// Number the fading entries.
	base := make([]int, len(eps)+1)
	for i := range eps {
		base[i+1] = base[i] + len(appear[i])
	}
	n := base[len(eps)]
	if n == 0 {
		return
	}
	id := func(e node) int { return base[e.ep] + int(e.idx) }
	nodes := make([]node, n)
	for i := range eps {
		for j := range appear[i] {
			nodes[base[i]+j] = node{int32(i), int32(j)}
		}
	}

	// The ring: every entry once all fades are over, in hash order.
	type entry struct {
		pos uint64
		node
	}
	var ring []entry
	var hashes []uint64
	for i, ep := range eps {
		hashes = hash.AppendEntryHashes(hashes[:0], ep.Key, ep.Final)
		for j, h := range hashes {
			e := entry{pos: h, node: node{int32(i), -1}}
			if appear[i] != nil {
				e.idx = int32(j)
			}
			ring = append(ring, e)
		}
	}
	slices.SortFunc(ring, func(a, b entry) int { return cmp.Compare(a.pos, b.pos) })
	// arc[v] is the share of the hash space fading entry v owns once
	// every fade is over: the keys that hop if v comes in late.
	arc := make([]uint64, n)
	for k, e := range ring {
		if e.idx >= 0 {
			prev := ring[(k+len(ring)-1)%len(ring)].pos
			arc[id(e.node)] = e.pos - prev // wraps correctly for the first entry
		}
	}

	// "ahead before later" edges, per gap. For each later entry only the
	// highest-index ahead entry of each other endpoint is needed: index
	// order brings the lower ones in first.
	startOf := func(e node) int64 { return eps[e.ep].Start.UnixNano() }
	succ := make([][]int32, n) // within one scale-up
	var cross [][2]int32       // older endpoint ahead of a newer one
	aheadMax := map[int32]int32{}
	// walk visits the ring from just after an anchor, calling fn for each
	// fading entry with the highest-index entries of the endpoints ahead of
	// it since the last anchor; it does nothing without an anchor.
	walk := func(anchor func(entry) bool, fn func(e entry, aheadMax map[int32]int32)) {
		first := slices.IndexFunc(ring, anchor)
		if first < 0 {
			return
		}
		clear(aheadMax)
		for k := 1; k <= len(ring); k++ {
			e := ring[(first+k)%len(ring)]
			if anchor(e) {
				clear(aheadMax)
				continue
			}
			if fn(e, aheadMax); e.idx >= 0 {
				if cur, ok := aheadMax[e.ep]; !ok || e.idx > cur {
					aheadMax[e.ep] = e.idx
				}
			}
		}
	}
	// Across scale-ups the gaps are those between established entries
	// now: when an older fade ends its entries split gaps, which only
	// lets newer entries in sooner.
	walk(func(e entry) bool { return e.idx < 0 }, func(e entry, ahead map[int32]int32) {
		for ep, idx := range ahead {
			if a := (node{ep, idx}); startOf(a) < startOf(e.node) {
				cross = append(cross, [2]int32{int32(id(a)), int32(id(e.node))})
			}
		}
	})
	// Within a scale-up the gaps are those between entries of endpoints
	// that started earlier, whether their fade is over or not, and entries
	// of newer endpoints are passed over: then the order of a scale-up
	// changes only when an older endpoint or one of its own leaves, not
	// as other fades end or begin.
	starts := map[int64]bool{}
	for _, e := range nodes {
		starts[startOf(e)] = true
	}
	for start := range starts {
		walk(func(e entry) bool { return e.idx < 0 || startOf(e.node) < start }, func(e entry, ahead map[int32]int32) {
			if startOf(e.node) != start {
				return
			}
			for ep, idx := range ahead {
				if a := (node{ep, idx}); ep != e.ep && startOf(a) == start {
					succ[id(a)] = append(succ[id(a)], int32(id(e.node)))
				}
			}
		})
	}
	for v := range nodes {
		if nodes[v].idx+1 < int32(len(appear[nodes[v].ep])) {
			succ[v] = append(succ[v], int32(v+1))
		}
	}

	// One scale-up at a time: its entries in a topological order that
	// prefers the curve's earliest, given the sorted curve steps.
	curve := make([]int64, n)
	for v, e := range nodes {
		curve[v] = appear[e.ep][e.idx]
	}
	less := func(a, b int32) bool {
		return curve[a] < curve[b] || (curve[a] == curve[b] && a < b)
	}
	indeg := make([]int32, n)
	pred := make([][]int32, n)
	for v := range succ {
		for _, w := range succ[v] {
			indeg[w]++
			pred[w] = append(pred[w], int32(v))
		}
	}
	var events [][]int32
	byStart := map[int64]int{}
	for v, e := range nodes {
		s := startOf(e)
		k, ok := byStart[s]
		if !ok {
			k = len(events)
			byStart[s] = k
			events = append(events, nil)
		}
		events[k] = append(events[k], int32(v))
	}
	at := func(v int32) *int64 { e := nodes[v]; return &appear[e.ep][e.idx] }
	// raiseUntilStable raises each entry to the entries it must follow
	// along edges, until stable. Every change raises a step to another
	// entry's step, so it ends.
	raiseUntilStable := func(edges func(yield func(a, b int32))) {
		for changed := true; changed; {
			changed = false
			edges(func(a, b int32) {
				if b == 0 && nodes[b].ep == 0 {
					return // the walk's first endpoint keeps entry 0
				}
				if *at(a) > *at(b) {
					*at(b), changed = *at(a), true
				}
			})
		}
	}
	done := make([]bool, n)
	for _, ev := range events {
		steps := make([]int64, len(ev))
		for i, v := range ev {
			steps[i] = curve[v]
		}
		slices.Sort(steps)
		byCurve := slices.Clone(ev)
		slices.SortFunc(byCurve, func(a, b int32) int {
			if less(a, b) {
				return -1
			}
			if less(b, a) {
				return 1
			}
			return 0
		})
		ready := &nodeHeap{less: less}
		for _, v := range ev {
			if indeg[v] == 0 {
				heap.Push(ready, v)
			}
		}
		for rank := range ev {
			var v int32
			if ready.Len() > 0 {
				v = heap.Pop(ready).(int32)
			} else {
				// Only cycles are left (index order and gap order can
				// loop). Take, among the entries whose lower index is in
				// (index order must hold), the one whose early arrival
				// costs the fewest keys: the smallest arcs of the entries
				// still ahead of it.
				v = -1
				var best uint64
				for _, u := range byCurve {
					if done[u] || (nodes[u].idx > 0 && !done[u-1]) {
						continue
					}
					var cost uint64
					for _, a := range pred[u] {
						if !done[a] {
							cost += arc[a] >> 8 // no overflow across 2^8 entries
						}
					}
					if v < 0 || cost < best {
						v, best = u, cost
					}
				}
			}
			done[v] = true
			*at(v) = steps[rank]
			for _, w := range succ[v] {
				if indeg[w]--; indeg[w] == 0 && !done[w] {
					heap.Push(ready, w)
				}
			}
		}

		// Meeting every edge makes each cycle appear at once. Keep that
		// unless it makes one step reveal more than twice the curve's
		// largest step: then the order above, which breaks the fewest
		// edges it can, keeps the fade gradual.
		ordered := make([]int64, len(ev))
		for i, v := range ev {
			ordered[i] = *at(v)
		}
		raiseUntilStable(func(yield func(a, b int32)) {
			for _, v := range ev {
				for _, w := range succ[v] {
					yield(v, w)
				}
			}
		})
		if float64(largestStep(ev, at)) > jumpLimit*float64(largestStep(ev, func(v int32) *int64 { return &curve[v] })) {
			for i, v := range ev {
				*at(v) = ordered[i]
			}
			if stats != nil {
				stats.Gradual++
			}
		}
	}

	// An entry of a newer scale-up waits for older entries ahead of it, and
	// index order holds throughout.
	raiseUntilStable(func(yield func(a, b int32)) {
		for _, c := range cross {
			yield(c[0], c[1])
		}
		for v := range nodes {
			if nodes[v].idx > 0 {
				yield(int32(v-1), int32(v))
			}
		}
	})
}

// largestStep is the most entries of ev that appear at one step, leaving
// out those in from the start.
func largestStep(ev []int32, at func(int32) *int64) int {
	counts := map[int64]int{}
	most := 0
	for _, v := range ev {
		if a := *at(v); a != always {
			counts[a]++
			most = max(most, counts[a])
		}
	}
	return most
}

// nodeHeap is a min-heap of entry ids.
type nodeHeap struct {
	ids  []int32
	less func(a, b int32) bool
}

func (h *nodeHeap) Len() int           { return len(h.ids) }
func (h *nodeHeap) Less(i, j int) bool { return h.less(h.ids[i], h.ids[j]) }
func (h *nodeHeap) Swap(i, j int)      { h.ids[i], h.ids[j] = h.ids[j], h.ids[i] }
func (h *nodeHeap) Push(x any)         { h.ids = append(h.ids, x.(int32)) }
func (h *nodeHeap) Pop() any {
	x := h.ids[len(h.ids)-1]
	h.ids = h.ids[:len(h.ids)-1]
	return x
}
