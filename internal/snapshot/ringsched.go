package snapshot

import (
	"fmt"
	"slices"
	"time"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/model"
)

// maxScheduleSteps bounds the steps of a fade that fadein.RingSizeSchedule
// sees: a long fade, or a chain of fades that never ends (constant churn),
// is scheduled in tiles of maxScheduleSteps steps (scheduleWindow).
const maxScheduleSteps = 256

// scheduleWindow is the part of the fade chain from..to that is scheduled
// together with step: the whole chain when it is short enough, else the
// tile of maxScheduleSteps steps, counted from the chain's start, that
// holds step. Tiles depend on the chain alone, so every replica and every
// step of a tile schedules the same window; the minimum may move once more
// at a tile's edge.
func scheduleWindow(from, to, step time.Time) (time.Time, time.Time) {
	span := maxScheduleSteps * fadein.StepInterval
	if to.Sub(from) <= span {
		return from, to
	}
	start := from.Add(step.Sub(from) / span * span)
	if end := start.Add(span); end.Before(to) {
		return start, end
	}
	return start, to
}

// stepRingSizes is what a laid-out cluster publishes for its ring at one
// step: the Cluster's ring sizes and the EDS weights, in walk order.
type stepRingSizes struct {
	minRing, maxRing uint64
	// total is the step's entry count, the ring every data plane builds.
	total   uint64
	weights []uint32
	// pairs are the (minimum, maximum) ring sizes under which the weights
	// build the step's counts in every data plane: the step's own first,
	// then the previous and next step's where that holds
	// (MetadataRingSizes, PairConsistent).
	pairs [][2]uint64
	notes []string
}

// ringMemo carries what planning a fading cluster's ring sizes costs from
// one build to the next: the planned counts of every step of the fade,
// each a fadein.PlanRamp, and the schedule over them. Without it every
// step would replay the whole fade once per step of it.
type ringMemo struct {
	model  model.Cluster
	counts map[int64][]uint64 // by step, unix ns, for model
	// from and sched are the schedule over the steps from from, for model.
	from  time.Time
	sched []fadein.RingStep
}

// stepRing chooses the ring sizes and weights of a laid-out cluster at
// step, counts being the step's planned entries in walk order.
//
// With no fade running the cluster publishes fadein.SteadyMinRing as
// minimum and its maximum_ring_size, so every replica agrees without
// memory of past fades. During a fade the counts of every step of the
// fade chain, from the steady step before its first start to the step
// its last fade ends, go through fadein.RingSizeSchedule: the minimum
// moves only where the arithmetic forces it, so most steps change EDS
// alone, and a Cluster paired with a neighbouring step's weights still
// builds the planned ring wherever that is possible. The plan of a past
// step is the cluster's endpoints that had started by then; a future
// step's assumes no new event. memo, when not nil, keeps those plans.
func stepRing(c *model.Cluster, curve fadein.Curve, counts []uint64, fading bool, step time.Time, memo *ringMemo) (*stepRingSizes, error) {
	from, to := fadeSpan(c, curve)
	if !fading || !step.After(from) || !step.Before(to) {
		return steadyRing(counts, c.MaxRingSize)
	}
	from, to = scheduleWindow(from, to, step)
	if memo == nil {
		memo = &ringMemo{}
	}
	sched, err := memo.schedule(c, curve, counts, from, to, step)
	if err != nil {
		rs, exactErr := exactRing(counts)
		if exactErr != nil {
			return nil, exactErr
		}
		rs.notes = append(rs.notes, fmt.Sprintf("fade-in: no ring size schedule (%v): this step publishes minimum = maximum = %d, which pairs with no other step's weights", err, rs.total))
		return rs, nil
	}
	i := int(step.Sub(from) / fadein.StepInterval)
	s := sched[i]
	rs := &stepRingSizes{minRing: s.MinRing, maxRing: s.MaxRing, total: sum64(counts), weights: s.Weights}
	if !fadein.PairExact(s.Weights, counts, s.MinRing, s.MaxRing) {
		// Only a ring past fadein.ExactWeights' limit gets here: its step
		// is near exact (fadein.NearExactWeights).
		rs.notes = append(rs.notes, fmt.Sprintf("fade-in: at %d entries a double's rounding may give an endpoint one entry more or less than planned (fadein.NearExactWeights)", rs.total))
	}
	rs.pairs = [][2]uint64{{s.MinRing, s.MaxRing}}
	for _, nb := range []struct {
		j    int
		what string
	}{{i - 1, "previous"}, {i + 1, "next"}} {
		if nb.j < 0 || nb.j >= len(sched) {
			continue
		}
		o := sched[nb.j]
		p := [2]uint64{o.MinRing, o.MaxRing}
		switch {
		case slices.Contains(rs.pairs, p):
		case fadein.PairExact(s.Weights, counts, o.MinRing, o.MaxRing):
			rs.pairs = append(rs.pairs, p)
		default:
			rs.notes = append(rs.notes, fmt.Sprintf("fade-in: the %s step's Cluster (ring size %d..%d) with this step's weights does not build the planned ring: no minimum ring size serves both steps (docs/fade-in.md), so a client holding that pair moves some keys between old endpoints until the other half arrives", nb.what, o.MinRing, o.MaxRing))
		}
	}
	return rs, nil
}

// schedule returns the ring size schedule of the steps from..to, the one
// kept for m's model when the step's counts are the ones it planned.
func (m *ringMemo) schedule(c *model.Cluster, curve fadein.Curve, counts []uint64, from, to, step time.Time) ([]fadein.RingStep, error) {
	_, hasFrom := m.counts[from.UnixNano()]
	_, hasTo := m.counts[to.UnixNano()]
	if !hasFrom || !hasTo || !m.model.Equal(c) {
		if err := m.replan(c, curve, from, to); err != nil {
			return nil, err
		}
	}
	n := int(to.Sub(from)/fadein.StepInterval) + 1
	if m.sched != nil && m.from.Equal(from) && len(m.sched) == n && slices.Equal(m.counts[step.UnixNano()], counts) {
		return m.sched, nil
	}
	steps := make([][]uint64, n)
	for i := range steps {
		steps[i] = m.counts[from.Add(time.Duration(i)*fadein.StepInterval).UnixNano()]
	}
	planned := slices.Equal(steps[int(step.Sub(from)/fadein.StepInterval)], counts)
	steps[int(step.Sub(from)/fadein.StepInterval)] = counts
	sched, err := fadein.RingSizeSchedule(steps, c.MaxRingSize)
	if err != nil {
		return nil, err
	}
	if planned {
		m.from, m.sched = from, sched
	}
	return sched, nil
}

// replan plans the counts of every step from..to for c, keeping those of
// the memo's previous model where the cluster as it was at that step has
// not changed (a new start leaves the steps before it alone). Steps at
// which the cluster stood the same are planned together, one replay for
// the run (fadein.PlanRampSteps), so a batch fade costs a plan or two, not
// one per step.
func (m *ringMemo) replan(c *model.Cluster, curve fadein.Curve, from, to time.Time) error {
	counts := make(map[int64][]uint64, int(to.Sub(from)/fadein.StepInterval)+1)
	var run []time.Time
	var runAt model.Cluster
	for t := from; !t.After(to); t = t.Add(fadein.StepInterval) {
		at := clusterAt(c, t)
		old, reuse := m.counts[t.UnixNano()]
		if reuse {
			was := clusterAt(&m.model, t)
			reuse = was.Equal(&at)
		}
		if len(run) > 0 && (reuse || !runAt.Equal(&at)) {
			if err := planRun(&runAt, curve, run, counts); err != nil {
				return err
			}
			run = run[:0]
		}
		if reuse {
			counts[t.UnixNano()] = old
			continue
		}
		runAt, run = at, append(run, t)
	}
	if len(run) > 0 {
		if err := planRun(&runAt, curve, run, counts); err != nil {
			return err
		}
	}
	m.model, m.counts, m.sched = c.Clone(), counts, nil
	return nil
}

// planRun plans at, the cluster as it stood at each of steps, into counts.
func planRun(at *model.Cluster, curve fadein.Curve, steps []time.Time, counts map[int64][]uint64) error {
	eps, weightSum := walkOrder(at)
	k, _ := fadein.LayoutEntriesPerWeight(weightSum, at.MaxRingSize, at.FadeIn.Capacity)
	if k == 0 {
		return fmt.Errorf("step %s: the cluster as it was is not laid out", steps[0].Format(time.RFC3339))
	}
	plans, err := layoutPlanSteps(at, eps, k, curve, steps)
	if err != nil {
		return fmt.Errorf("steps from %s: %w", steps[0].Format(time.RFC3339), err)
	}
	for i, t := range steps {
		counts[t.UnixNano()] = plans[i].Counts
	}
	return nil
}

// clusterAt is c as it was at step t, as far as its fade-in record tells:
// without the endpoints that had not started by then, and with those that
// left later still in EDS.
func clusterAt(c *model.Cluster, t time.Time) model.Cluster {
	started := func(ep *model.Endpoint) bool {
		return ep.FirstSeen.IsZero() || !fadein.StepTime(ep.FirstSeen).After(t)
	}
	out := *c
	out.Endpoints = make([]model.Endpoint, 0, len(c.Endpoints)+len(c.Departed))
	out.Departed = nil
	for i := range c.Endpoints {
		if started(&c.Endpoints[i]) {
			out.Endpoints = append(out.Endpoints, c.Endpoints[i])
		}
	}
	for i := range c.Departed {
		d := &c.Departed[i]
		switch {
		case !started(&d.Endpoint):
		case fadein.StepTime(d.Gone).After(t):
			out.Endpoints = append(out.Endpoints, d.Endpoint)
		default:
			out.Departed = append(out.Departed, *d)
		}
	}
	return out
}

// fadeSpan is the chain of fades the latest start belongs to, as
// fadein.PlanRamp replays it: from the steady step before its first start
// to the step its last fade ends. Zero times when nothing ever started.
func fadeSpan(c *model.Cluster, curve fadein.Curve) (from, to time.Time) {
	var starts []time.Time
	for i := range c.Endpoints {
		if s := c.Endpoints[i].FirstSeen; !s.IsZero() && c.Endpoints[i].Weight > 0 {
			starts = append(starts, s)
		}
	}
	for i := range c.Departed {
		if s := c.Departed[i].Endpoint.FirstSeen; !s.IsZero() {
			starts = append(starts, s)
		}
	}
	if len(starts) == 0 {
		return time.Time{}, time.Time{}
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return b.Compare(a) })
	first, end := starts[0], curve.EndStep(starts[0])
	for _, s := range starts[1:] {
		if !curve.EndStep(s).After(fadein.StepTime(first)) {
			break
		}
		first = s
		if e := curve.EndStep(s); e.After(end) {
			end = e
		}
	}
	return fadein.StepTime(first).Add(-fadein.StepInterval), end
}

// steadyRing is what a laid-out cluster with no fade running publishes: a
// function of its counts alone, so that replicas agree.
func steadyRing(counts []uint64, maxRing uint64) (*stepRingSizes, error) {
	m := fadein.SteadyMinRing(counts, maxRing)
	if w, err := fadein.StableWeights(counts, []uint64{m}, maxRing); err == nil {
		return &stepRingSizes{minRing: m, maxRing: maxRing, total: sum64(counts), weights: w, pairs: [][2]uint64{{m, maxRing}}}, nil
	}
	return exactRing(counts)
}

// exactRing pins the ring size at the total (fadein.ExactWeights, near
// exact past its limit): what a step publishes when no minimum ring size
// can express its counts (an endpoint held at 0 entries, or equal counts
// the rounding defeats).
func exactRing(counts []uint64) (*stepRingSizes, error) {
	w, size, err := fadein.NearExactWeights(counts)
	if err != nil {
		return nil, err
	}
	return &stepRingSizes{minRing: size, maxRing: size, total: size, weights: w, pairs: [][2]uint64{{size, size}}}, nil
}

func sum64(xs []uint64) uint64 {
	var s uint64
	for _, x := range xs {
		s += x
	}
	return s
}
