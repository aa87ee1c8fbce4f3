package fadein

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
	"time"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// node is one entry of a chain endpoint in replayChain.
type node struct {
	ep, idx int32
}

// FreezeLag is how long after a start PlanRamp assumes the control plane
// takes at most to learn of it (a source that learns later should report a
// start no earlier than FreezeLag before it learned): entries of earlier endpoints that are in by then are
// never planned again, so nothing published before the new endpoint was
// known is taken back.
const FreezeLag = 2 * StepInterval

// replayChain rewrites appear, the curve steps of the chain's entries, into
// their schedule. It replays the chain's starts in order: at each start,
// the entries already in (by the schedule so far, allowing FreezeLag) stay,
// and the rest, the new endpoints' and the earlier ones' still missing, are
// planned together as PlanRamp describes, between the entries that are in.
// Replaying from the starts rather than remembering makes the schedule a
// function of the endpoints alone, and one that a later start never changes
// for entries already in.
func replayChain(eps []RampEndpoint, appear [][]int64, fadeCurve Curve, hash ringhash.HashFunction, started func(RampEndpoint) bool, step time.Time, jumpLimit float64, stats *RampPlan) {
	base := make([]int, len(eps)+1)
	for i := range eps {
		base[i+1] = base[i] + len(appear[i])
	}
	n := base[len(eps)]
	if n == 0 {
		return
	}
	id := func(e node) int32 { return int32(base[e.ep]) + e.idx }
	nodes := make([]node, n)
	for i := range eps {
		for j := range appear[i] {
			nodes[base[i]+j] = node{int32(i), int32(j)}
		}
	}
	at := func(v int32) *int64 { e := nodes[v]; return &appear[e.ep][e.idx] }
	ends := make([]int64, len(eps))
	for i, ep := range eps {
		if appear[i] != nil {
			ends[i] = fadeCurve.EndStep(ep.Start).UnixNano()
		}
	}
	curve := make([]int64, n) // by the curve alone
	for v := range nodes {
		curve[v] = *at(int32(v))
	}

	// The ring once every fade is over, in hash order; idx -1 marks entries
	// of endpoints outside the chain, which are always in.
	type entry struct {
		pos uint64
		node
	}
	var ring []entry
	var hashes []uint64
	for i, ep := range eps {
		if !ep.Start.IsZero() && !started(ep) {
			continue // not in the ring the replay looks at until it starts
		}
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
	// ringAt[v] is where chain entry v sits in the ring.
	ringAt := make([]int, n)
	for k, e := range ring {
		if e.idx >= 0 {
			ringAt[id(e.node)] = k
		}
	}
	// arc[v] is the share of the hash space open entry v owns once the
	// endpoints known at the start being planned are all in: the keys that
	// hop if v comes in after an entry behind it. Later starts must not
	// change it, or they would change the plan made before them.
	arc := make([]uint64, n)

	// The chain's starts, in order, by step: endpoints that start within
	// one step are planned together (and, with FreezeLag, whichever of
	// them the control plane learns of first publishes nothing that a
	// sibling's arrival takes back).
	epStartStep := make([]int64, len(eps))
	for i, ep := range eps {
		epStartStep[i] = StepTime(ep.Start).UnixNano()
	}
	startStep := func(v int) int64 { return epStartStep[nodes[v].ep] }
	var steps []int64
	for i := range eps {
		if appear[i] != nil {
			steps = append(steps, epStartStep[i])
		}
	}
	// A departure is an event too, from the step it left (a departure
	// stamped ahead of the clock counts from now); one before the chain's
	// first start leaves the ring the chain sees.
	goneAt := make([]int64, len(eps))
	chainFirst := slices.Min(steps)
	for i, ep := range eps {
		goneAt[i] = math.MaxInt64
		if !ep.Gone.IsZero() {
			goneAt[i] = min(StepTime(ep.Gone).UnixNano(), step.UnixNano())
			if goneAt[i] > chainFirst {
				steps = append(steps, goneAt[i])
			}
		}
	}
	slices.Sort(steps)
	steps = slices.Compact(steps)

	const (
		absent = iota // its endpoint starts later
		fixed         // outside the chain, or in by the schedule so far
		open          // to plan now
	)
	state := make([]uint8, n)
	floor := make([]int64, n)
	succ := make([][]int32, n)
	pred := make([][]int32, n)
	indeg := make([]int32, n)
	done := make([]bool, n)
	// ahead holds, since the last entry that is in, the highest-index open
	// entry of each endpoint met; gaps are short, so a slice beats a map.
	var ahead []node
	startOf := make([]int, len(eps)) // -1: no open entry at this event
	for i := range startOf {
		startOf[i] = -1
	}
	have := make([]int, len(eps))
	var slots [][]int64
	var openEps []int32
	// gradualStarts holds the starts some of whose entries were planned
	// on their own curves: a start is counted once however many later
	// events (starts, departures) re-plan it.
	gradualStarts := map[int64]bool{}
	defer func() { stats.Gradual += len(gradualStarts) }()
	// live holds the entries whose state may still change: an entry that
	// is in stays in at every later event, and one whose endpoint has
	// left stays out, so neither is looked at again.
	live := make([]int32, n)
	for v := range live {
		live[v] = int32(v)
	}
	var openIDs []int32
	for _, first := range steps {
		frozenBy := first + int64(FreezeLag)
		// here reports whether ep's entries are in the ring at this event:
		// it has not left yet (endpoints not started are absent below).
		here := func(ep int32) bool { return goneAt[ep] > first }
		// Edges and marks exist only on the last event's open entries.
		for _, v := range openIDs {
			succ[v], pred[v], indeg[v], done[v] = succ[v][:0], pred[v][:0], 0, false
		}
		openIDs = openIDs[:0]
		kept := live[:0]
		for _, v := range live {
			st := startStep(int(v))
			if st == first {
				*at(v) = curve[v]
			}
			if !here(nodes[v].ep) {
				state[v] = absent
				continue
			}
			// Entries due within FreezeLag of the start may be out before
			// the control plane knows of every endpoint that started
			// earlier; they are never planned again, the new endpoint's at
			// their curve steps (its entry 0 at its first step).
			switch {
			case st > first:
				state[v] = absent
			case *at(v) <= frozenBy:
				state[v] = fixed
			default:
				state[v], floor[v] = open, frozenBy+int64(StepInterval)
			}
			if state[v] == open {
				openIDs = append(openIDs, v)
				*at(v) = max(curve[v], floor[v])
			}
			if state[v] != fixed {
				kept = append(kept, v)
			}
		}
		live = kept

		// Only the open entries' neighbourhoods matter: each looks back to
		// the entry before it (its arc) and to the last entry that is in
		// (its gap). Walking back from each keeps an event's cost to the
		// open entries and their gaps, not the whole ring, which a long
		// chain of starts and departures would visit at every event.
		outOfRing := func(e entry) bool { return !here(e.ep) || e.idx >= 0 && state[id(e.node)] == absent }
		isIn := func(e entry) bool { return here(e.ep) && (e.idx < 0 || state[id(e.node)] == fixed) }
		back := func(k, dist int) entry { return ring[((k-dist)%len(ring)+len(ring))%len(ring)] }
		for _, v := range openIDs {
			k := ringAt[v]
			prev := ring[k]
			for dist := 1; dist <= len(ring); dist++ {
				if e := back(k, dist); !outOfRing(e) {
					prev = e
					break
				}
			}
			arc[v] = ring[k].pos - prev.pos // wraps for the first
		}

		// Gap order among the open entries: between two entries that are
		// in, an open entry waits for the open entries of other endpoints
		// ahead of it (the highest index of each suffices; index order
		// brings the lower ones in first). Edges are added in ring order
		// from the first entry that is in, which fixes the order of each
		// entry's successors.
		if firstIn := slices.IndexFunc(ring, isIn); firstIn >= 0 {
			byRing := slices.Clone(openIDs)
			fromFirst := func(v int32) int { return (ringAt[v] - firstIn + len(ring)) % len(ring) }
			slices.SortFunc(byRing, func(a, b int32) int { return cmp.Compare(fromFirst(a), fromFirst(b)) })
			for _, v := range byRing {
				mine := nodes[v]
				ahead = ahead[:0]
				for dist := 1; dist < len(ring); dist++ {
					e := back(ringAt[v], dist)
					if isIn(e) {
						break
					}
					if e.idx < 0 || e.ep == mine.ep || state[id(e.node)] != open {
						continue
					}
					i := slices.IndexFunc(ahead, func(a node) bool { return a.ep == e.ep })
					switch {
					case i < 0:
						ahead = append(ahead, e.node)
					case e.idx > ahead[i].idx:
						ahead[i] = e.node
					}
				}
				for _, a := range ahead {
					succ[id(a)] = append(succ[id(a)], v)
				}
			}
		}
		for _, v := range openIDs {
			if nodes[v].idx > 0 && state[v-1] == open {
				succ[v-1] = append(succ[v-1], v)
			}
		}
		for _, v := range openIDs {
			for _, w := range succ[v] {
				indeg[w]++
				pred[w] = append(pred[w], v)
			}
		}

		// An order that meets the constraints, taking among the entries
		// that may come next one of the endpoint furthest behind its own
		// curve; each start's sorted curve steps are handed out along it to
		// its own entries, so the endpoints of a start keep to that start's
		// curve in sum.
		less := func(a, b int32) bool { return *at(a) < *at(b) || (*at(a) == *at(b) && a < b) }
		// startOf[ep] numbers the starts of the endpoints with open
		// entries; slots[s] are start s's curve steps, sorted, and taken[s]
		// how many of them are handed out. have[ep] counts the entries of
		// such an endpoint in or ordered so far.
		for _, ep := range openEps {
			startOf[ep] = -1
		}
		openEps = openEps[:0]
		var starts []int64
		slots = slots[:0]
		for _, v := range openIDs {
			ep := nodes[v].ep
			si := startOf[ep]
			if si < 0 {
				openEps = append(openEps, ep)
				st := eps[ep].Start.UnixNano()
				si = slices.Index(starts, st)
				if si < 0 {
					si = len(starts)
					starts = append(starts, st)
					slots = append(slots, nil)
				}
				startOf[ep] = si
				fixedIn := 0
				for w := base[ep]; w < base[ep+1]; w++ {
					if state[w] == fixed {
						fixedIn++
					}
				}
				have[ep] = fixedIn
			}
			slots[si] = append(slots[si], *at(v))
		}
		for _, sl := range slots {
			slices.Sort(sl)
		}
		taken := make([]int, len(starts))
		byCurve := slices.Clone(openIDs)
		slices.SortFunc(byCurve, func(a, b int32) int {
			if less(a, b) {
				return -1
			}
			if less(b, a) {
				return 1
			}
			return 0
		})
		// behind is how many entries ep's own curve has in by step at,
		// less what ep has: the endpoint the next slot serves best.
		behind := func(ep int32, at int64) int {
			own := curve[base[ep]:base[ep+1]]
			n, _ := slices.BinarySearch(own, at+1)
			return n - have[ep]
		}
		var ready []int32
		for _, v := range openIDs {
			if indeg[v] == 0 {
				ready = append(ready, v)
			}
		}
		// For breaking cycles: pending[u] is the arc (>>16, so sums cannot
		// overflow) of the entries still ahead of u; a candidate is an open
		// entry whose lower index is in. The heap is lazy: stale items are
		// skipped when popped.
		rank := make(map[int32]int, len(byCurve))
		for i, u := range byCurve {
			rank[u] = i
		}
		pending := make(map[int32]uint64, len(openIDs))
		for _, u := range openIDs {
			for _, a := range pred[u] {
				pending[u] += arc[a] >> 16
			}
		}
		candidate := func(u int32) bool {
			return !done[u] && (nodes[u].idx == 0 || state[u-1] != open || done[u-1])
		}
		breaks := &breakHeap{}
		for _, u := range openIDs {
			if candidate(u) {
				heap.Push(breaks, breakItem{pending[u], rank[u], u})
			}
		}
		order := make([]int32, 0, len(openIDs))
		for range openIDs {
			var v int32 = -1
			if len(ready) > 0 {
				// Among the entries that may come next, the one whose
				// endpoint is furthest behind its own curve at the slot it
				// would get; then the one the curve wants first.
				pick, best := -1, 0
				for i, u := range ready {
					si := startOf[nodes[u].ep]
					b := behind(nodes[u].ep, slots[si][taken[si]])
					if pick < 0 || b > best || (b == best && less(u, ready[pick])) {
						pick, best = i, b
					}
				}
				v = ready[pick]
				ready[pick] = ready[len(ready)-1]
				ready = ready[:len(ready)-1]
			} else {
				// Only cycles are left (index order and gap order can
				// loop). Take, among the entries whose lower index is in
				// (index order must hold), the one whose early arrival
				// costs the fewest keys: the smallest arcs of the entries
				// still ahead of it.
				for v < 0 {
					it := heap.Pop(breaks).(breakItem)
					if candidate(it.id) && it.pending == pending[it.id] {
						v = it.id
					}
				}
			}
			done[v] = true
			order = append(order, v)
			have[nodes[v].ep]++
			taken[startOf[nodes[v].ep]]++
			for _, w := range succ[v] {
				if indeg[w]--; indeg[w] == 0 && !done[w] {
					ready = append(ready, w)
				}
				pending[w] -= arc[v] >> 16
				if candidate(w) {
					heap.Push(breaks, breakItem{pending[w], rank[w], w})
				}
			}
		}
		curveLargest := largestStep(openIDs, at)
		assign := func() {
			clear(taken)
			for _, v := range order {
				si := startOf[nodes[v].ep]
				*at(v) = max(slots[si][taken[si]], floor[v])
				taken[si]++
			}
		}
		assign()
		// Meeting every edge makes each cycle appear at once. Keep that
		// unless it makes one step reveal more than jumpLimit times the
		// curve's largest step. Then the scale-up is too large to keep gap
		// order and still ramp: every endpoint follows its own curve
		// instead, waiting up to gradualWait for the entries ahead of it in
		// its gap, and keys whose entry comes later hop between new
		// endpoints. (Handing the steps out along the order above would
		// keep the sum on the curve but let single endpoints wait to the
		// last step and take all their keys at once.)
		raiseAlong(openIDs, func(v int32) []int32 { return succ[v] }, at, nil)
		if float64(largestStep(openIDs, at)) > jumpLimit*float64(curveLargest) {
			for _, v := range openIDs {
				*at(v) = max(curve[v], floor[v])
			}
			wait := int64(gradualWait)
			raiseAlong(openIDs, func(v int32) []int32 { return succ[v] }, at, func(u, w int32) bool {
				// Index order always holds; gap order while it keeps w
				// within wait of its own curve.
				return nodes[u].ep == nodes[w].ep || *at(u) <= max(curve[w], floor[w])+wait
			})
			for _, v := range openIDs {
				gradualStarts[eps[nodes[v].ep].Start.UnixNano()] = true
			}
		}
		// An endpoint is whole when its fade ends, whatever it waited for.
		for _, v := range openIDs {
			*at(v) = min(*at(v), ends[nodes[v].ep])
		}
	}
}

// raiseAlong raises each entry to the entries it must follow (next, the
// edges keep accepts at the time; all if keep is nil), until stable. Every change raises a step to another entry's step, so it
// ends.
func raiseAlong(ids []int32, next func(int32) []int32, at func(int32) *int64, keep func(u, w int32) bool) {
	for changed := true; changed; {
		changed = false
		for _, v := range ids {
			for _, w := range next(v) {
				if *at(v) > *at(w) && (keep == nil || keep(v, w)) {
					*at(w), changed = *at(v), true
				}
			}
		}
	}
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

// breakItem is a candidate for breaking a cycle in replayChain: fewest
// pending keys first, then the curve's order.
type breakItem struct {
	pending uint64
	rank    int
	id      int32
}

// breakHeap is a min-heap of breakItems.
type breakHeap []breakItem

func (h breakHeap) Len() int { return len(h) }
func (h breakHeap) Less(i, j int) bool {
	return h[i].pending < h[j].pending || (h[i].pending == h[j].pending && h[i].rank < h[j].rank)
}
func (h breakHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *breakHeap) Push(x any)   { *h = append(*h, x.(breakItem)) }
func (h *breakHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
