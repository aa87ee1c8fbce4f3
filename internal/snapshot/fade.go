package snapshot

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/ringhash"
)

// Fade-in metadata keys in the MetadataRingxds namespace. They let clients
// and other replicas compute the same share without extra pushes.
const (
	// MetadataFadeStart is when a fading endpoint started fading in,
	// RFC 3339 with nanoseconds, UTC. Only fading endpoints carry it.
	MetadataFadeStart = "fade_start"
	// MetadataFadeDuration is the fade-in window as a Go duration ("30s").
	MetadataFadeDuration = "fade_duration"
	// MetadataFadeExponent is the curve exponent (a number).
	MetadataFadeExponent = "fade_exponent"
	// MetadataRingEntries is the number of ring_hash entries the endpoint
	// holds once every fade is over (a number). Set on every endpoint of a
	// cluster whose ring is laid out for fade-in, so a client can build the
	// final ring (fadein.NewCountRing) while the EDS weights still ramp.
	MetadataRingEntries = "ring_entries"
	// MetadataRingSizes lists, in a laid-out cluster, the ring sizes under
	// which the endpoint weights build the ring planned for their step, in
	// every data plane: [minimum, maximum] pairs, the step's own first,
	// then the neighbouring steps' where they are exact too. A fade step
	// may change both CDS and EDS, which reach a client as separate
	// messages; this lets a client tell whether the Cluster it holds and
	// these weights build the planned ring (see PairConsistent).
	MetadataRingSizes = "ring_sizes"

	// legacyRingSize is what servers before ring_sizes published: the one
	// ring size, as both minimum and maximum, of the step's weights.
	legacyRingSize = "ring_size"
)

// fadeEndpoint is what fade-in decides for one endpoint.
type fadeEndpoint struct {
	// weight is the EDS weight to publish.
	weight uint32
	// entries is the final ring_hash entry count in a laid-out cluster, 0
	// otherwise.
	entries uint64
	// fading endpoints publish their start and the curve.
	fading bool
	start  time.Time
}

// fadePlan is what fade-in changes in one cluster's resources at one step.
type fadePlan struct {
	curve fadein.Curve
	// layout is true when the ring_hash ring is laid out as entries per
	// weight (fadein.EntriesPerWeight); ring then holds the step's ring
	// sizes and the ones its weights also pair with.
	layout bool
	ring   *stepRingSizes
	// byHostPort holds every endpoint's decision.
	byHostPort map[string]fadeEndpoint
	status     []FadeStatus
	// next is the next step instant at which the plan changes, zero if none.
	next  time.Time
	notes []string
}

// planFade decides the weights, ring size and fade metadata of a cluster
// with fade_in at now; nil when the cluster has none.
//
// Ring clusters (ring_hash, and skipper, which Envoy and gRPC run as
// ring_hash) are laid out with k entries per unit of weight, k from
// fadein.EntriesPerWeight over the weights of every endpoint, fading ones
// included. Established endpoints hold k x weight entries; a fading one
// fadein.RampEntries of its final k x weight at the current step. The EDS
// weights are fadein.ExactWeights of those counts in EDS order, so Envoy,
// grpc-go and ringxds build one ring at every step, in which old endpoints
// never lose an entry while the new one gains them.
//
// Maglev clusters keep their weights: Envoy's Maglev has no slow start, and
// ramping a weight in a Maglev table moves keys between old endpoints. They
// publish the fade metadata, so the client library fades them in with an
// NRing.
func planFade(c *model.Cluster, now time.Time, memo *ringMemo) (*fadePlan, error) {
	if c.FadeIn == nil {
		return nil, nil
	}
	p := &fadePlan{
		curve:      fadein.Curve{Duration: c.FadeIn.Duration, Exponent: c.FadeIn.Exponent},
		byHostPort: make(map[string]fadeEndpoint, len(c.Endpoints)),
	}
	step := fadein.StepTime(now)

	// EDS order: the order both data planes walk, which ExactWeights needs.
	eps, weightSum := walkOrder(c)
	k := p.chooseLayout(c, weightSum)

	var plan fadein.RampPlan
	if k > 0 {
		// A layout that cannot be planned fails the cluster, which then
		// keeps its last good resources (Builder): falling back to full
		// weights instead would lay the ring out anew, moving most keys
		// between old endpoints at the fade's start and again at its end.
		var err error
		if plan, p.ring, err = planLayout(c, eps, k, p.curve, step, memo); err != nil {
			return nil, fmt.Errorf("fade-in layout: %w", err)
		}
	}
	p.layout = k > 0
	if p.layout {
		if len(c.Departed) > 0 && slices.Contains(plan.Fading, true) {
			p.notes = append(p.notes, fmt.Sprintf("fade-in: %d endpoint(s) left during the fade; the plan keeps them in its replay until they left, so no entry already published is taken back", len(c.Departed)))
		}
		p.notes = append(p.notes, p.ring.notes...)
	} else {
		plan = curvePlan(eps, p.curve, step)
	}
	p.next = plan.Next
	if plan.Gradual > 0 {
		p.notes = append(p.notes, fmt.Sprintf("fade-in: the endpoints of %d start(s) (endpoints added within one second of each other) follow their own curves: ring order would have brought in more than twice the curve's largest step at once, so some keys pass between new endpoints before they settle", plan.Gradual))
	}
	for i, ep := range eps {
		fe := fadeEndpoint{weight: ep.Weight, fading: plan.Fading[i], start: ep.FirstSeen}
		if !fe.fading {
			fe.start = time.Time{}
		}
		if p.layout {
			fe.entries = k * uint64(ep.Weight)
			fe.weight = p.ring.weights[i]
		}
		p.byHostPort[ep.HostPort()] = fe
	}
	p.status = fadeStatus(eps, p, plan, step)
	return p, nil
}

// chooseLayout returns the entries per unit of weight the cluster's ring
// is laid out at (0: not laid out), noting the decisions a user would
// question.
func (p *fadePlan) chooseLayout(c *model.Cluster, weightSum uint64) uint64 {
	if c.Policy == model.PolicyMaglev {
		p.notes = append(p.notes, "fade-in: maglev clusters fade in only in the client library: Envoy's Maglev has no slow start, and ramping a Maglev weight moves keys between old endpoints")
		return 0
	}
	k, pinned := fadein.LayoutEntriesPerWeight(weightSum, c.MaxRingSize, c.FadeIn.Capacity)
	switch {
	case k == 0:
		p.notes = append(p.notes, fmt.Sprintf("fade-in: endpoint weights sum to %d, more than maximum_ring_size %d, so the ring cannot give every unit of weight an entry: Envoy and gRPC clients take new endpoints at full weight; only the client library fades them in", weightSum, c.MaxRingSize))
	case c.FadeIn.Capacity == 0:
		// The decision a user would question after a scale-up that
		// moved keys between old endpoints: where the layout changes.
		p.notes = append(p.notes, fmt.Sprintf("fade-in: no fade_in.capacity is set, so the ring is laid out at %d entries per unit of weight, which holds while endpoint weights sum to %d..%d (now %d); scaling past either bound lays the ring out anew and moves about half the keys between old endpoints. To keep the layout, set fade_in.capacity (Kubernetes: the ringxds.io/fade-in-capacity annotation) to the largest weight sum the cluster scales to: its most endpoints times their weight.", k, c.MaxRingSize/(2*k)+1, c.MaxRingSize/k, weightSum))
	case !pinned:
		p.notes = append(p.notes, fmt.Sprintf("fade-in: endpoint weights sum to %d, more than fade_in.capacity %d: the ring is laid out for the current size (%d entries per unit of weight) instead, and is laid out anew when the size crosses a power of two", weightSum, c.FadeIn.Capacity, k))
	}
	return k
}

// planLayout plans a laid-out cluster's step: each endpoint's entries and
// the ring sizes and weights that publish them.
func planLayout(c *model.Cluster, eps []*model.Endpoint, k uint64, curve fadein.Curve, step time.Time, memo *ringMemo) (fadein.RampPlan, *stepRingSizes, error) {
	plan, err := layoutPlan(c, eps, k, curve, step)
	if err != nil {
		return fadein.RampPlan{}, nil, err
	}
	rs, err := stepRing(c, curve, plan.Counts, slices.Contains(plan.Fading, true), step, memo)
	if err != nil {
		return fadein.RampPlan{}, nil, fmt.Errorf("ring sizes: %w", err)
	}
	return plan, rs, nil
}

// curvePlan is the plan of a cluster that is not laid out: weights stay,
// and only the fade metadata changes, at each fade's end.
func curvePlan(eps []*model.Endpoint, curve fadein.Curve, step time.Time) fadein.RampPlan {
	plan := fadein.RampPlan{Fading: make([]bool, len(eps))}
	for i, ep := range eps {
		if ep.FirstSeen.IsZero() || curve.Share(step.Sub(ep.FirstSeen)) >= 1 {
			continue
		}
		plan.Fading[i] = true
		if end := curve.EndStep(ep.FirstSeen); plan.Next.IsZero() || end.Before(plan.Next) {
			plan.Next = end
		}
	}
	return plan
}

// fadeStatus is what /debug/snapshot shows of each fading endpoint.
func fadeStatus(eps []*model.Endpoint, p *fadePlan, plan fadein.RampPlan, step time.Time) []FadeStatus {
	var out []FadeStatus
	for i, ep := range eps {
		fe := p.byHostPort[ep.HostPort()]
		if !fe.fading {
			continue
		}
		var entries uint64
		if p.layout {
			entries = plan.Counts[i]
		}
		out = append(out, FadeStatus{
			Endpoint:     ep.HostPort(),
			Start:        fe.start,
			Duration:     p.curve.Duration,
			Exponent:     p.curve.Exponent,
			Share:        p.curve.Share(step.Sub(fe.start)),
			Weight:       fe.weight,
			Entries:      entries,
			FinalEntries: fe.entries,
		})
	}
	return out
}

// walkOrder returns the cluster's endpoints in EDS order, the order both
// data planes walk (which the weights need), and their weight sum.
func walkOrder(c *model.Cluster) ([]*model.Endpoint, uint64) {
	// The keys are spelled once each: formatting them in every comparison
	// made the sort most of a fade step's cost.
	type keyed struct {
		ep            *model.Endpoint
		key, hostPort string
	}
	byKey := make([]keyed, len(c.Endpoints))
	var weightSum uint64
	for i := range c.Endpoints {
		ep := &c.Endpoints[i]
		hp := ep.HostPort()
		byKey[i] = keyed{ep, cmp.Or(ep.HashKey, hp), hp}
		weightSum += uint64(ep.Weight)
	}
	slices.SortFunc(byKey, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.hostPort, b.hostPort))
	})
	eps := make([]*model.Endpoint, len(byKey))
	for i := range byKey {
		eps[i] = byKey[i].ep
	}
	return eps, weightSum
}

// layoutPlan is fadein.PlanRamp for a laid-out cluster at step, k entries
// per unit of weight, eps in walk order; the plan covers eps only.
func layoutPlan(c *model.Cluster, eps []*model.Endpoint, k uint64, curve fadein.Curve, step time.Time) (fadein.RampPlan, error) {
	plans, err := layoutPlanSteps(c, eps, k, curve, []time.Time{step})
	if err != nil {
		return fadein.RampPlan{}, err
	}
	return plans[0], nil
}

// layoutPlanSteps is layoutPlan at each of steps, ascending, planned
// together (fadein.PlanRampSteps).
func layoutPlanSteps(c *model.Cluster, eps []*model.Endpoint, k uint64, curve fadein.Curve, steps []time.Time) ([]fadein.RampPlan, error) {
	ramp := make([]fadein.RampEndpoint, len(eps), len(eps)+len(c.Departed))
	for i, ep := range eps {
		ramp[i] = fadein.RampEndpoint{Key: RingKey(ep), Final: k * uint64(ep.Weight), Start: ep.FirstSeen}
	}
	// Endpoints that left mid-fade are replayed until they left, after
	// the others (they are not in EDS, so not in the walk order). One that
	// came back is present under the same ring key: replaying both would
	// put two endpoints on one set of ring positions, so only the present
	// one counts.
	present := make(map[string]bool, len(eps))
	for _, ep := range eps {
		present[RingKey(ep)] = true
	}
	for i := range c.Departed {
		d := &c.Departed[i]
		if present[RingKey(&d.Endpoint)] {
			continue
		}
		ramp = append(ramp, fadein.RampEndpoint{Key: RingKey(&d.Endpoint), Final: k * uint64(d.Endpoint.Weight), Start: d.Endpoint.FirstSeen, Gone: d.Gone})
	}
	plans, err := fadein.PlanRampSteps(ramp, curve, ringhash.XXHash, c.MaxRingSize, steps)
	if err != nil {
		return nil, fmt.Errorf("fade-in plan: %w", err)
	}
	for i := range plans {
		plans[i].Counts, plans[i].Fading = plans[i].Counts[:len(eps)], plans[i].Fading[:len(eps)]
	}
	return plans, nil
}
