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
	r := newReplay(eps, appear, fadeCurve, jumpLimit)
	if len(r.nodes) == 0 {
		return
	}
	r.layRing(hash, started)
	for _, event := range r.events(step) {
		r.clearEdges()
		r.classify(event)
		r.measureArcs()
		r.linkOrder()
		r.schedule(r.orderOpen())
	}
	stats.Gradual += len(r.gradualStarts)
}

// ringEntry is an entry of the ring once every fade is over; idx -1 marks
// entries of endpoints outside the chain, which are always in.
type ringEntry struct {
	pos uint64
	node
}

// entryState is where a chain entry stands at the event being replayed.
type entryState uint8

const (
	absent entryState = iota // its endpoint starts later
	fixed                    // outside the chain, or in by the schedule so far
	open                     // to plan now
)

// replay is what replayChain carries from one event of the chain to the
// next. The chain's entries are numbered endpoint by endpoint, entry idx of
// endpoint ep being v = base[ep]+idx, so that per-entry state is a slice.
type replay struct {
	eps       []RampEndpoint
	appear    [][]int64
	jumpLimit float64

	base  []int
	nodes []node  // by entry number
	curve []int64 // each entry's step by the curve alone
	ends  []int64 // per chain endpoint, the step its fade ends

	ring   []ringEntry // in hash order
	ringAt []int       // where chain entry v sits in ring
	// arc[v] is the share of the hash space open entry v owns once the
	// endpoints known at the start being planned are all in: the keys that
	// hop if v comes in after an entry behind it. Later starts must not
	// change it, or they would change the plan made before them.
	arc []uint64

	epStartStep []int64
	goneAt      []int64 // math.MaxInt64 while the endpoint stays

	event   int64 // the step of the event being replayed
	state   []entryState
	floor   []int64 // the earliest step an open entry may be planned at
	openIDs []int32
	// live holds the entries whose state may still change: an entry that
	// is in stays in at every later event, and one whose endpoint has
	// left stays out, so neither is looked at again.
	live []int32

	// Edges and marks exist only on the last event's open entries.
	succ, pred [][]int32
	indeg      []int32
	done       []bool
	// ahead holds, since the last entry that is in, the highest-index open
	// entry of each endpoint met; gaps are short, so a slice beats a map.
	ahead []node

	// startOf[ep] numbers the starts of the endpoints with open entries
	// (-1: no open entry at this event); slots[s] are start s's curve
	// steps, sorted, and taken[s] how many of them are handed out. have[ep]
	// counts the entries of such an endpoint in or ordered so far.
	startOf []int
	openEps []int32
	slots   [][]int64
	taken   []int
	have    []int

	// For breaking cycles: pending[u] is the arc (>>16, so sums cannot
	// overflow) of the entries still ahead of open entry u, and rank[u] its
	// place in the curve's order. The heap is lazy: stale items are skipped
	// when popped.
	pending []uint64
	rank    []int
	breaks  *breakHeap

	// gradualStarts holds the starts some of whose entries were planned
	// on their own curves: a start is counted once however many later
	// events (starts, departures) re-plan it.
	gradualStarts map[int64]bool
}

// newReplay numbers the chain's entries and keeps their curve steps, which
// the replay rewrites in appear as it goes.
func newReplay(eps []RampEndpoint, appear [][]int64, fadeCurve Curve, jumpLimit float64) replay {
	r := replay{eps: eps, appear: appear, jumpLimit: jumpLimit, base: make([]int, len(eps)+1)}
	for i := range eps {
		r.base[i+1] = r.base[i] + len(appear[i])
	}
	n := r.base[len(eps)]
	if n == 0 {
		return r
	}
	r.nodes = make([]node, n)
	for i := range eps {
		for j := range appear[i] {
			r.nodes[r.base[i]+j] = node{int32(i), int32(j)}
		}
	}
	r.ends = make([]int64, len(eps))
	members := 0
	for i, ep := range eps {
		if appear[i] != nil {
			r.ends[i] = fadeCurve.EndStep(ep.Start).UnixNano()
			members++
		}
	}
	r.curve = make([]int64, n)
	for v := range r.nodes {
		r.curve[v] = *r.at(int32(v))
	}

	r.arc = make([]uint64, n)
	r.state = make([]entryState, n)
	r.floor = make([]int64, n)
	r.succ = make([][]int32, n)
	r.pred = make([][]int32, n)
	r.indeg = make([]int32, n)
	r.done = make([]bool, n)
	r.startOf = make([]int, len(eps))
	for i := range r.startOf {
		r.startOf[i] = -1
	}
	r.have = make([]int, len(eps))
	r.pending = make([]uint64, n)
	r.rank = make([]int, n)
	r.breaks = &breakHeap{}
	r.gradualStarts = map[int64]bool{}
	r.live = make([]int32, n)
	for v := range r.live {
		r.live[v] = int32(v)
	}
	// Sized once for the largest event, so no event grows them.
	r.openIDs = make([]int32, 0, n)
	r.openEps = make([]int32, 0, members)
	r.ahead = make([]node, 0, members)
	return r
}

// at is where entry v's appearance step is kept.
func (r *replay) at(v int32) *int64 { e := r.nodes[v]; return &r.appear[e.ep][e.idx] }

// id is e's entry number.
func (r *replay) id(e node) int32 { return int32(r.base[e.ep]) + e.idx }

// layRing lays out the ring once every fade is over, of every endpoint that
// has started.
func (r *replay) layRing(hash ringhash.HashFunction, started func(RampEndpoint) bool) {
	var hashes []uint64
	for i, ep := range r.eps {
		if !ep.Start.IsZero() && !started(ep) {
			continue // not in the ring the replay looks at until it starts
		}
		hashes = hash.AppendEntryHashes(hashes[:0], ep.Key, ep.Final)
		for j, h := range hashes {
			e := ringEntry{pos: h, node: node{int32(i), -1}}
			if r.appear[i] != nil {
				e.idx = int32(j)
			}
			r.ring = append(r.ring, e)
		}
	}
	slices.SortFunc(r.ring, func(a, b ringEntry) int { return cmp.Compare(a.pos, b.pos) })
	r.ringAt = make([]int, len(r.nodes))
	for k, e := range r.ring {
		if e.idx >= 0 {
			r.ringAt[r.id(e.node)] = k
		}
	}
}

// events returns the steps of the chain's events, in order: the chain's
// starts, by step, and the departures during the chain. Endpoints that
// start within one step are planned together (and, with FreezeLag,
// whichever of them the control plane learns of first publishes nothing
// that a sibling's arrival takes back).
func (r *replay) events(step time.Time) []int64 {
	eps := r.eps
	r.epStartStep = make([]int64, len(eps))
	for i, ep := range eps {
		r.epStartStep[i] = StepTime(ep.Start).UnixNano()
	}
	steps := make([]int64, 0, len(eps))
	for i := range eps {
		if r.appear[i] != nil {
			steps = append(steps, r.epStartStep[i])
		}
	}
	// A departure is an event too, from the step it left (a departure
	// stamped ahead of the clock counts from now); one before the chain's
	// first start leaves the ring the chain sees.
	r.goneAt = make([]int64, len(eps))
	chainFirst := slices.Min(steps)
	for i, ep := range eps {
		r.goneAt[i] = math.MaxInt64
		if !ep.Gone.IsZero() {
			r.goneAt[i] = min(StepTime(ep.Gone).UnixNano(), step.UnixNano())
			if r.goneAt[i] > chainFirst {
				steps = append(steps, r.goneAt[i])
			}
		}
	}
	slices.Sort(steps)
	steps = slices.Compact(steps)
	return steps
}

func (r *replay) startStep(v int32) int64 { return r.epStartStep[r.nodes[v].ep] }

// here reports whether ep's entries are in the ring at this event: it has
// not left yet (endpoints not started are absent).
func (r *replay) here(ep int32) bool { return r.goneAt[ep] > r.event }

// clearEdges drops the last event's edges and marks.
func (r *replay) clearEdges() {
	for _, v := range r.openIDs {
		r.succ[v], r.pred[v], r.indeg[v], r.done[v] = r.succ[v][:0], r.pred[v][:0], 0, false
	}
	r.openIDs = r.openIDs[:0]
}

// classify decides, at the event of step event, which live entries stay as
// planned (fixed), which are planned again (open) and which are out of the
// ring (absent).
func (r *replay) classify(event int64) {
	r.event = event
	frozenBy := event + int64(FreezeLag)
	kept := r.live[:0]
	for _, v := range r.live {
		st := r.startStep(v)
		if st == event {
			*r.at(v) = r.curve[v]
		}
		if !r.here(r.nodes[v].ep) {
			r.state[v] = absent
			continue
		}
		// Entries due within FreezeLag of the start may be out before
		// the control plane knows of every endpoint that started
		// earlier; they are never planned again, the new endpoint's at
		// their curve steps (its entry 0 at its first step).
		switch {
		case st > event:
			r.state[v] = absent
		case *r.at(v) <= frozenBy:
			r.state[v] = fixed
		default:
			r.state[v], r.floor[v] = open, frozenBy+int64(StepInterval)
		}
		if r.state[v] == open {
			r.openIDs = append(r.openIDs, v)
			*r.at(v) = max(r.curve[v], r.floor[v])
		}
		if r.state[v] != fixed {
			kept = append(kept, v)
		}
	}
	r.live = kept
}

// outOfRing reports whether e is missing from the ring at this event: its
// endpoint has left or not started yet.
func (r *replay) outOfRing(e ringEntry) bool {
	return !r.here(e.ep) || e.idx >= 0 && r.state[r.id(e.node)] == absent
}

// isIn reports whether e is in the ring at this event for good: outside
// the chain, or in by the schedule so far.
func (r *replay) isIn(e ringEntry) bool {
	return r.here(e.ep) && (e.idx < 0 || r.state[r.id(e.node)] == fixed)
}

// back is the ring entry dist before the one at k, wrapping around.
func (r *replay) back(k, dist int) ringEntry {
	return r.ring[((k-dist)%len(r.ring)+len(r.ring))%len(r.ring)]
}

// measureArcs sets the open entries' arcs.
//
// Only the open entries' neighbourhoods matter: each looks back to the
// entry before it (its arc) and to the last entry that is in (its gap).
// Walking back from each keeps an event's cost to the open entries and
// their gaps, not the whole ring, which a long chain of starts and
// departures would visit at every event.
func (r *replay) measureArcs() {
	for _, v := range r.openIDs {
		k := r.ringAt[v]
		prev := r.ring[k]
		for dist := 1; dist <= len(r.ring); dist++ {
			if e := r.back(k, dist); !r.outOfRing(e) {
				prev = e
				break
			}
		}
		r.arc[v] = r.ring[k].pos - prev.pos // wraps for the first
	}
}

// linkOrder links each open entry to the open entries that must come in
// before it: those ahead of it in its gap, and its endpoint's entry before
// it.
func (r *replay) linkOrder() {
	r.linkGapOrder()
	for _, v := range r.openIDs {
		if r.nodes[v].idx > 0 && r.state[v-1] == open {
			r.succ[v-1] = append(r.succ[v-1], v)
		}
	}
	for _, v := range r.openIDs {
		for _, w := range r.succ[v] {
			r.indeg[w]++
			r.pred[w] = append(r.pred[w], v)
		}
	}
}

// linkGapOrder adds the edges of gap order among the open entries: between
// two entries that are in, an open entry waits for the open entries of
// other endpoints ahead of it (the highest index of each suffices; index
// order brings the lower ones in first). Edges are added in ring order
// from the first entry that is in, which fixes the order of each entry's
// successors.
func (r *replay) linkGapOrder() {
	firstIn := slices.IndexFunc(r.ring, r.isIn)
	if firstIn < 0 {
		return
	}
	byRing := slices.Clone(r.openIDs)
	fromFirst := func(v int32) int { return (r.ringAt[v] - firstIn + len(r.ring)) % len(r.ring) }
	slices.SortFunc(byRing, func(a, b int32) int { return cmp.Compare(fromFirst(a), fromFirst(b)) })
	for _, v := range byRing {
		r.findAhead(v)
		for _, a := range r.ahead {
			r.succ[r.id(a)] = append(r.succ[r.id(a)], v)
		}
	}
}

// findAhead fills ahead with the open entries of other endpoints that v's
// gap holds ahead of it, the highest index of each endpoint.
func (r *replay) findAhead(v int32) {
	mine := r.nodes[v]
	r.ahead = r.ahead[:0]
	for dist := 1; dist < len(r.ring); dist++ {
		e := r.back(r.ringAt[v], dist)
		if r.isIn(e) {
			break
		}
		if e.idx < 0 || e.ep == mine.ep || r.state[r.id(e.node)] != open {
			continue
		}
		i := slices.IndexFunc(r.ahead, func(a node) bool { return a.ep == e.ep })
		switch {
		case i < 0:
			r.ahead = append(r.ahead, e.node)
		case e.idx > r.ahead[i].idx:
			r.ahead[i] = e.node
		}
	}
}

// orderOpen returns an order of the open entries that meets the
// constraints, taking among the entries that may come next one of the
// endpoint furthest behind its own curve; schedule hands each start's
// sorted curve steps out along it to its own entries, so the endpoints of
// a start keep to that start's curve in sum.
func (r *replay) orderOpen() []int32 {
	r.gatherSlots()
	var ready []int32
	for _, v := range r.openIDs {
		if r.indeg[v] == 0 {
			ready = append(ready, v)
		}
	}
	r.prepareBreaks()
	order := make([]int32, 0, len(r.openIDs))
	for range r.openIDs {
		var v int32
		if len(ready) > 0 {
			v, ready = r.takeReady(ready)
		} else {
			v = r.breakCycle()
		}
		r.done[v] = true
		order = append(order, v)
		r.have[r.nodes[v].ep]++
		r.taken[r.startOf[r.nodes[v].ep]]++
		for _, w := range r.succ[v] {
			if r.indeg[w]--; r.indeg[w] == 0 && !r.done[w] {
				ready = append(ready, w)
			}
			r.passed(v, w)
		}
	}
	return order
}

// gatherSlots numbers the starts of the endpoints with open entries and
// collects each start's curve steps, sorted, for the order to hand out.
func (r *replay) gatherSlots() {
	for _, ep := range r.openEps {
		r.startOf[ep] = -1
	}
	r.openEps = r.openEps[:0]
	var starts []int64
	r.slots = r.slots[:0]
	for _, v := range r.openIDs {
		ep := r.nodes[v].ep
		si := r.startOf[ep]
		if si < 0 {
			r.openEps = append(r.openEps, ep)
			st := r.eps[ep].Start.UnixNano()
			si = slices.Index(starts, st)
			if si < 0 {
				si = len(starts)
				starts = append(starts, st)
				r.slots = append(r.slots, nil)
			}
			r.startOf[ep] = si
			fixedIn := 0
			for w := r.base[ep]; w < r.base[ep+1]; w++ {
				if r.state[w] == fixed {
					fixedIn++
				}
			}
			r.have[ep] = fixedIn
		}
		r.slots[si] = append(r.slots[si], *r.at(v))
	}
	for _, sl := range r.slots {
		slices.Sort(sl)
	}
	r.taken = make([]int, len(starts))
}

// curveFirst reports whether the curve wants open entry a in before b.
func (r *replay) curveFirst(a, b int32) bool {
	return *r.at(a) < *r.at(b) || (*r.at(a) == *r.at(b) && a < b)
}

// behind is how many entries ep's own curve has in by step at, less what
// ep has: the endpoint the next slot serves best.
func (r *replay) behind(ep int32, at int64) int {
	own := r.curve[r.base[ep]:r.base[ep+1]]
	n, _ := slices.BinarySearch(own, at+1)
	return n - r.have[ep]
}

// takeReady takes, among the entries that may come next, the one whose
// endpoint is furthest behind its own curve at the slot it would get; then
// the one the curve wants first.
func (r *replay) takeReady(ready []int32) (int32, []int32) {
	pick, best := -1, 0
	for i, u := range ready {
		si := r.startOf[r.nodes[u].ep]
		b := r.behind(r.nodes[u].ep, r.slots[si][r.taken[si]])
		if pick < 0 || b > best || (b == best && r.curveFirst(u, ready[pick])) {
			pick, best = i, b
		}
	}
	v := ready[pick]
	ready[pick] = ready[len(ready)-1]
	return v, ready[:len(ready)-1]
}

// prepareBreaks readies breakCycle for the event: each open entry's
// pending keys and place in the curve's order, and the first candidates.
func (r *replay) prepareBreaks() {
	byCurve := slices.Clone(r.openIDs)
	slices.SortFunc(byCurve, func(a, b int32) int {
		if r.curveFirst(a, b) {
			return -1
		}
		if r.curveFirst(b, a) {
			return 1
		}
		return 0
	})
	for i, u := range byCurve {
		r.rank[u] = i
	}
	for _, u := range r.openIDs {
		r.pending[u] = 0
		for _, a := range r.pred[u] {
			r.pending[u] += r.arc[a] >> 16
		}
	}
	*r.breaks = (*r.breaks)[:0]
	for _, u := range r.openIDs {
		r.offerBreak(u)
	}
}

// mayBreak reports whether u may break a cycle: it is not in yet, and its
// lower index is.
func (r *replay) mayBreak(u int32) bool {
	return !r.done[u] && (r.nodes[u].idx == 0 || r.state[u-1] != open || r.done[u-1])
}

func (r *replay) offerBreak(u int32) {
	if r.mayBreak(u) {
		heap.Push(r.breaks, breakItem{r.pending[u], r.rank[u], u})
	}
}

// breakCycle takes the next entry when only cycles are left (index order
// and gap order can loop): among the entries whose lower index is in (index
// order must hold), the one whose early arrival costs the fewest keys, the
// smallest arcs of the entries still ahead of it.
func (r *replay) breakCycle() int32 {
	for {
		it := heap.Pop(r.breaks).(breakItem)
		if r.mayBreak(it.id) && it.pending == r.pending[it.id] {
			return it.id
		}
	}
}

// passed notes that v, one of the entries ahead of w, is in.
func (r *replay) passed(v, w int32) {
	r.pending[w] -= r.arc[v] >> 16
	r.offerBreak(w)
}

func (r *replay) successors(v int32) []int32 { return r.succ[v] }

// schedule gives the open entries their steps: each start's curve steps
// handed out along order, then raised to keep the order's constraints.
func (r *replay) schedule(order []int32) {
	curveLargest := largestStep(r.openIDs, r.at)
	clear(r.taken)
	for _, v := range order {
		si := r.startOf[r.nodes[v].ep]
		*r.at(v) = max(r.slots[si][r.taken[si]], r.floor[v])
		r.taken[si]++
	}
	// Meeting every edge makes each cycle appear at once. Keep that
	// unless it makes one step reveal more than jumpLimit times the
	// curve's largest step. Then the scale-up is too large to keep gap
	// order and still ramp: every endpoint follows its own curve
	// instead, waiting up to gradualWait for the entries ahead of it in
	// its gap, and keys whose entry comes later hop between new
	// endpoints. (Handing the steps out along the order above would
	// keep the sum on the curve but let single endpoints wait to the
	// last step and take all their keys at once.)
	raiseAlong(r.openIDs, r.successors, r.at, nil)
	if float64(largestStep(r.openIDs, r.at)) > r.jumpLimit*float64(curveLargest) {
		r.followOwnCurves()
	}
	// An endpoint is whole when its fade ends, whatever it waited for.
	for _, v := range r.openIDs {
		*r.at(v) = min(*r.at(v), r.ends[r.nodes[v].ep])
	}
}

// followOwnCurves plans every open entry on its own endpoint's curve,
// waiting at most gradualWait for the entries ahead of it.
func (r *replay) followOwnCurves() {
	for _, v := range r.openIDs {
		*r.at(v) = max(r.curve[v], r.floor[v])
	}
	wait := int64(gradualWait)
	raiseAlong(r.openIDs, r.successors, r.at, func(u, w int32) bool {
		// Index order always holds; gap order while it keeps w
		// within wait of its own curve.
		return r.nodes[u].ep == r.nodes[w].ep || *r.at(u) <= max(r.curve[w], r.floor[w])+wait
	})
	for _, v := range r.openIDs {
		r.gradualStarts[r.eps[r.nodes[v].ep].Start.UnixNano()] = true
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
