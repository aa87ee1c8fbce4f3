package fadein

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
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
	// Gone, when set, marks an endpoint that left the cluster during the
	// fade (model.Departure), and when. It holds no entry, but the replay
	// keeps it in the ring until then, so that what was planned while it
	// was there stands.
	Gone time.Time
}

// RampPlan is one fade step of a laid-out ring_hash cluster.
type RampPlan struct {
	// Counts is each endpoint's ring entry count at the step, in input
	// order; 0 for endpoints that are gone.
	Counts []uint64
	// Fading reports, per endpoint, whether it is still fading at the step.
	Fading []bool
	// Next is the first step instant after the step at which a count
	// changes or a fade ends; zero when nothing fades.
	Next time.Time
	// Gradual counts the starts whose entries could not all appear in gap
	// order without revealing most of them in one step, and follow their
	// own curves instead, at the price of some keys hopping between new
	// endpoints.
	Gradual int
}

// always is an appearance step every step is past.
const always int64 = math.MinInt64

// PlanRamp decides how many ring entries each endpoint of a laid-out
// ring_hash cluster holds at step (rounded down to the step grid). The
// endpoints in EDS must be in the order Envoy and grpc-go walk them, sorted
// by ring key; departed ones (Gone set) may be listed anywhere. maxRing is
// the cluster's maximum_ring_size.
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
// them to the last step: the fade becomes a jump. PlanRamp instead puts the
// fading entries in an order that respects the partial order, choosing
// among the entries that may come next one of the endpoint furthest behind
// its own curve, and
// hands out each start's curve steps, sorted, along that order. The
// endpoints of one start then follow the curve exactly in sum, while single
// endpoints run ahead of or behind it. A scale-up too large to keep every
// constraint without bringing most of it in at one step gives the order up:
// each endpoint follows its own curve, waiting a little for entries ahead
// of it, and some keys hop between new endpoints (RampPlan.Gradual).
//
// Endpoints start at different times (pods turn ready one by one), and an
// entry that is in must never be taken back. PlanRamp therefore replays
// the starts of the current chain of overlapping fades in order: at each
// start, the entries already in stay, and the missing ones of earlier
// endpoints are planned again together with the new endpoint's. The result
// depends only on the endpoints, their starts and the step, so replicas
// agree, and no later start changes an entry that was in. Endpoints that
// left during the chain are replayed too, in the ring until they left
// (RampEndpoint.Gone): a removal is an event like a start, and what was in
// by then stays. The walk's first endpoint that is not gone must hold an
// entry (ExactWeights), so its entry 0 is always in. An entry never appears
// after its endpoint's fade ends.
func PlanRamp(eps []RampEndpoint, curve Curve, hash ringhash.HashFunction, maxRing uint64, step time.Time) (RampPlan, error) {
	return planRamp(eps, curve, hash, maxRing, step, exactJumpLimit)
}

// orderedRingLimit is the largest maximum ring size, in entries, of a
// cluster whose fading entries PlanRamp orders; 16 times grpc-go's default
// cap.
const orderedRingLimit = 1 << 16

// gradualWait is how long, in a scale-up too large for exact gap order, an
// entry may wait beyond its own curve step for an entry ahead of it.
const gradualWait = 2 * StepInterval

// exactJumpLimit is how many times the curve's largest step a scale-up may
// bring in at one step to keep every entry in gap order.
const exactJumpLimit = 2

// PlanRampSteps is PlanRamp at each of steps, in ascending order. A run of
// steps with no start or departure between them sees the same events, so
// the chain is replayed once for the run rather than once per step: the
// way to plan every step of a fade.
func PlanRampSteps(eps []RampEndpoint, curve Curve, hash ringhash.HashFunction, maxRing uint64, steps []time.Time) ([]RampPlan, error) {
	return planRampSteps(eps, curve, hash, maxRing, steps, exactJumpLimit)
}

// planRamp is PlanRamp with the limit as a parameter; the fade-in
// simulation also runs it with no limit, to show what exact order costs.
func planRamp(eps []RampEndpoint, curve Curve, hash ringhash.HashFunction, maxRing uint64, step time.Time, jumpLimit float64) (RampPlan, error) {
	plans, err := planRampSteps(eps, curve, hash, maxRing, []time.Time{step}, jumpLimit)
	if err != nil {
		return RampPlan{}, err
	}
	return plans[0], nil
}

// planRampSteps plans each step, replaying the chain once per run of steps
// that sameEvents groups together.
//
// The replay breaks ties by position, so it runs on the endpoints in one
// canonical order, by key, start and departure: the walk order for the
// endpoints in EDS, with departed ones where their keys fall. A caller
// that lists a departed endpoint elsewhere (after the others, say) must
// not get another plan than while it was there, or the plan before its
// departure, already published, would change.
func planRampSteps(eps []RampEndpoint, curve Curve, hash ringhash.HashFunction, maxRing uint64, steps []time.Time, jumpLimit float64) ([]RampPlan, error) {
	canonical, perm, first := canonicalOrder(eps)
	out := make([]RampPlan, len(steps))
	var rp *chainReplay
	for n, step := range steps {
		step = StepTime(step)
		if rp == nil || !sameEvents(canonical, rp.step, step) {
			var err error
			if rp, err = replayCanonical(canonical, first, curve, hash, maxRing, step, jumpLimit); err != nil {
				return nil, err
			}
		}
		plan := rp.planAt(step)
		out[n] = RampPlan{Counts: make([]uint64, len(eps)), Fading: make([]bool, len(eps)), Next: plan.Next, Gradual: plan.Gradual}
		for k, i := range perm {
			out[n].Counts[i], out[n].Fading[i] = plan.Counts[k], plan.Fading[k]
		}
	}
	return out, nil
}

// canonicalOrder sorts eps by key, start and departure; perm[k] is the
// input index of canonical[k], and first the canonical index of the walk's
// first endpoint that is not gone (-1 for none).
func canonicalOrder(eps []RampEndpoint) (canonical []RampEndpoint, perm []int, first int) {
	walkFirst := slices.IndexFunc(eps, func(ep RampEndpoint) bool { return ep.Gone.IsZero() })
	perm = make([]int, len(eps))
	for i := range perm {
		perm[i] = i
	}
	slices.SortStableFunc(perm, func(a, b int) int {
		return cmp.Or(strings.Compare(eps[a].Key, eps[b].Key), eps[a].Start.Compare(eps[b].Start), eps[a].Gone.Compare(eps[b].Gone))
	})
	canonical = make([]RampEndpoint, len(eps))
	first = -1
	for k, i := range perm {
		canonical[k] = eps[i]
		if i == walkFirst {
			first = k
		}
	}
	return canonical, perm, first
}

// sameEvents reports whether a replay at step from serves step to (no
// earlier): no endpoint starts or leaves in between, and none is stamped
// to leave after from, since the replay counts such a departure from the
// step it runs at.
func sameEvents(eps []RampEndpoint, from, to time.Time) bool {
	if to.Before(from) {
		return false
	}
	for _, ep := range eps {
		if !ep.Start.IsZero() {
			if s := StepTime(ep.Start); s.After(from) && !s.After(to) {
				return false
			}
		}
		if !ep.Gone.IsZero() && StepTime(ep.Gone).After(from) {
			return false
		}
	}
	return true
}

// chainReplay is the schedule of the current fade chain's entries as
// replayed at step: it holds for every step up to the next start or
// departure (sameEvents).
type chainReplay struct {
	eps   []RampEndpoint
	first int
	curve Curve
	step  time.Time
	// appear[i][j] is the step (unix ns) from which entry j of endpoint i
	// is in the ring, for the endpoints of a replayed fade chain.
	appear [][]int64
	// onCurve marks the endpoints of a chain that is not replayed: each
	// follows its own curve (curveCount).
	onCurve []bool
	gradual int
}

// replayCanonical replays the chain of eps, in canonical order with first
// the walk's first endpoint (-1 for none), as it stands at step.
func replayCanonical(eps []RampEndpoint, first int, curve Curve, hash ringhash.HashFunction, maxRing uint64, step time.Time, jumpLimit float64) (*chainReplay, error) {
	var total uint64
	for _, ep := range eps {
		if !ep.Gone.IsZero() {
			continue
		}
		total += ep.Final
		if total > ringhash.MaxRingSizeLimit {
			return nil, fmt.Errorf("%w: %d entries exceed the ring size limit %d", ErrLayout, total, uint64(ringhash.MaxRingSizeLimit))
		}
	}
	// An endpoint whose start is still ahead (a clock ahead of ours) holds
	// only entry 0 and joins the chain when it starts.
	started := func(ep RampEndpoint) bool { return !StepTime(ep.Start).After(step) }
	inChain := fadeChain(eps, curve, started)
	rp := &chainReplay{eps: eps, first: first, curve: curve, step: step, appear: make([][]int64, len(eps)), onCurve: inChain}
	members, fading := 0, false
	for i, ep := range eps {
		if inChain[i] {
			members++
		}
		fading = fading || ep.Gone.IsZero() && rp.fadingAt(ep, step)
	}
	var stats RampPlan
	switch {
	case !fading:
		// A chain whose fades are all over is whole, and stays so at
		// every later step: nothing to replay.
	case members == 1:
		// One endpoint alone: its curve is the plan.
	case maxRing > orderedRingLimit:
		// Ordering hashes the whole ring at every step; a cluster whose
		// rings may grow past this size is not ordered, at any size, so
		// the choice never changes mid-fade: each endpoint follows its
		// own curve.
		stats.Gradual++
	default:
		// Only a replay needs each entry's step; the curve alone gives
		// the counts, so large rings on their curves cost per endpoint,
		// not per entry.
		for i, ep := range eps {
			if inChain[i] {
				rp.appear[i] = curveSteps(ep.Final, ep.Start, curve)
			}
		}
		rp.onCurve = nil
		replayChain(eps, rp.appear, curve, hash, started, step, jumpLimit, &stats)
		if first >= 0 && rp.appear[first] != nil {
			rp.appear[first][0] = always
		}
	}
	rp.gradual = stats.Gradual
	return rp, nil
}

// fadingAt reports whether ep, in EDS, is still fading at step; one whose
// start is ahead is too.
func (rp *chainReplay) fadingAt(ep RampEndpoint, step time.Time) bool {
	return !ep.Start.IsZero() && ep.Final > 0 && rp.curve.Share(step.Sub(ep.Start)) < 1
}

// planAt counts each endpoint's entries at step, in canonical order.
func (rp *chainReplay) planAt(step time.Time) RampPlan {
	eps, curve, stepAt := rp.eps, rp.curve, step.UnixNano()
	plan := RampPlan{Counts: make([]uint64, len(eps)), Fading: make([]bool, len(eps)), Gradual: rp.gradual}
	if !slices.ContainsFunc(eps, func(ep RampEndpoint) bool { return ep.Gone.IsZero() && rp.fadingAt(ep, step) }) {
		plan.Gradual = 0 // a whole chain is not replayed, so nothing was given up
	}
	for i, ep := range eps {
		if !ep.Gone.IsZero() {
			continue
		}
		plan.Fading[i] = rp.fadingAt(ep, step)
		if !plan.Fading[i] {
			plan.Counts[i] = ep.Final
			continue
		}
		next := curve.EndStep(ep.Start)
		switch {
		case rp.appear[i] != nil:
			for _, at := range rp.appear[i] {
				if at > stepAt {
					if at < next.UnixNano() {
						next = time.Unix(0, at)
					}
					break
				}
				plan.Counts[i]++
			}
		case rp.onCurve != nil && rp.onCurve[i]:
			var gains time.Time
			plan.Counts[i], gains = curveCount(ep.Final, ep.Start, curve, step)
			if !gains.IsZero() && gains.Before(next) {
				next = gains
			}
		default:
			// Not started yet, but in EDS: it holds entry 0, as it will
			// from its start on (the walk's first endpoint has to, and
			// none may lose it when another one sorts first), and joins
			// the chain then.
			plan.Counts[i], next = 1, StepTime(ep.Start)
		}
		if plan.Next.IsZero() || next.Before(plan.Next) {
			plan.Next = next
		}
	}
	return plan
}

// fadeChain marks the endpoints whose fades the current one depends on:
// from the latest start back, every endpoint whose fade had not ended by
// the first step of a later one in the chain. Earlier endpoints were fully
// in the ring whenever a chain member started, so for the chain they are as
// good as established. Only endpoints that have started count (started);
// otherwise membership depends on the starts alone, not on the time, and a
// new start only joins a chain or begins a new one.
func fadeChain(eps []RampEndpoint, curve Curve, started func(RampEndpoint) bool) []bool {
	in := make([]bool, len(eps))
	var order []int
	for i, ep := range eps {
		if !ep.Start.IsZero() && ep.Final > 0 && started(ep) {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return eps[b].Start.Compare(eps[a].Start) })
	var chainFirst time.Time
	for n, i := range order {
		if n > 0 && !curve.EndStep(eps[i].Start).After(StepTime(chainFirst)) {
			break
		}
		in[i], chainFirst = true, eps[i].Start
	}
	return in
}

// curveSteps returns, for an endpoint with final entries that started
// fading at start, the step from which each entry is in by the curve alone:
// entry j at the first step where RampEntries exceeds j.
func curveSteps(final uint64, start time.Time, curve Curve) []int64 {
	first, end := StepTime(start), curve.EndStep(start)
	steps := int64(end.Sub(first) / StepInterval)
	countAt := func(m int64) uint64 {
		if m >= steps {
			return final
		}
		return RampEntries(final, curve.Share(first.Add(time.Duration(m)*StepInterval).Sub(start)))
	}
	out := make([]int64, final)
	// The count never falls, so either walk the steps once, handing each
	// entry the step at which the count first passes it, or search for
	// each entry's step: whichever evaluates the curve fewer times (a
	// large ring on a short fade, or a small one on a day-long fade).
	if uint64(steps) <= final*uint64(bits.Len64(uint64(steps))) {
		var have uint64
		for m := int64(0); m <= steps && have < final; m++ {
			for n := countAt(m); have < n; have++ {
				out[have] = first.Add(time.Duration(m) * StepInterval).UnixNano()
			}
		}
		return out
	}
	out[0] = first.UnixNano()
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
	return out
}

// curveCount is curveSteps' count at step (at or after the endpoint's
// first step) without listing the entries, and the next step at which the
// count grows (zero once it is final).
func curveCount(final uint64, start time.Time, curve Curve, step time.Time) (uint64, time.Time) {
	first, end := StepTime(start), curve.EndStep(start)
	countAt := func(m int64) uint64 {
		at := first.Add(time.Duration(m) * StepInterval)
		if !at.Before(end) {
			return final
		}
		return RampEntries(final, curve.Share(at.Sub(start)))
	}
	m := int64(step.Sub(first) / StepInterval)
	n := countAt(m)
	if n >= final {
		return final, time.Time{}
	}
	// The first later step with more entries, by binary search: the count
	// never falls and is final by the curve's end.
	lo, hi := m+1, int64(end.Sub(first)/StepInterval)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if countAt(mid) > n {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return n, first.Add(time.Duration(lo) * StepInterval)
}
