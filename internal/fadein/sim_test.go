package fadein

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// The fade-in simulation behind docs/fade-in.md: a scale-up from old to
// old+add endpoints under the production curve (30 s, exponent 2.5), one
// step per second, 100,000 keys sampled at every step, from the ring before
// the event to the ring after the fade.
//
//	go test -run '^$' -bench FadeSimulation ./internal/fadein/
//
// Metrics:
//   - precision_%: of the (key, new endpoint) pairs seen during the fade,
//     the share where that endpoint owns the key after it (warm precision).
//   - oldold_%: key moves between two old endpoints, per 100 keys.
//   - flaps/key: moves from a new endpoint back to an old one, per key.
//   - moved_%: all owner changes, per 100 keys; ideal_% is add/(old+add),
//     the keys a perfect scale-up moves, each once.
//   - lag_pp: how far the fade runs from the curve: at each step, the share
//     of the keys the new endpoints will own that they already serve,
//     against share(t); the mean absolute difference in percentage points.
//   - maxstep_pp: the largest rise of that share in one step (the curve's
//     own largest is its last step, 8.1 points at 30 steps).
//   - podstep_pp: the same for the single new endpoint that jumps most: the
//     largest share of its own final keys it gains in one step.

type simResult struct {
	precision, oldOld, flaps, moved, ideal, lag, jump, podJump float64
}

const simKeys = 100_000

var simCurve = Curve{Duration: 30 * time.Second, Exponent: 2.5}

// simSteps is the number of fade steps: shares at 0 s, 1 s, ..., 29 s.
const simSteps = 30

// simulate runs pick over every step: 0 is the ring before the event, 1 to
// steps the fade steps, steps+1 the ring after it. Endpoints 0..old-1 are
// old; pick returns an index into all old+add endpoints. share(step) is the
// curve's share at a fade step, for lag.
func simulate(old, add, steps int, share func(step int) float64, pick func(step int, key int, h uint64) int) simResult {
	simSteps := steps
	keys := make([]uint64, simKeys)
	for i := range keys {
		keys[i] = ringhash.HashKey(fmt.Sprintf("product-%d", i))
	}
	final := make([]int, simKeys)
	for i, h := range keys {
		final[i] = pick(simSteps+1, i, h)
	}
	prev := make([]int, simKeys)
	for i, h := range keys {
		prev[i] = pick(0, i, h)
	}
	type pair struct{ key, ep int }
	seen := map[pair]bool{}
	var oldOld, flaps, moved int
	toNew := 0
	for _, f := range final {
		if f >= old {
			toNew++
		}
	}
	var lag, jump, servedBefore, podJump float64
	finalOf := map[int]int{} // keys each new endpoint owns at the end
	for _, f := range final {
		if f >= old {
			finalOf[f]++
		}
	}
	podBefore := map[int]int{}
	for step := 1; step <= simSteps+1; step++ {
		served := 0
		podServed := map[int]int{}
		for i, h := range keys {
			p := final[i]
			if step <= simSteps {
				p = pick(step, i, h)
			}
			if p >= old && p == final[i] {
				served++
				podServed[p]++
			}
			if p >= old {
				seen[pair{i, p}] = true
			}
			if p != prev[i] {
				moved++
				switch {
				case prev[i] < old && p < old:
					oldOld++
				case prev[i] >= old && p < old:
					flaps++
				}
			}
			prev[i] = p
		}
		frac := float64(served) / float64(max(toNew, 1))
		if step > simSteps {
			frac = 1
		}
		jump = max(jump, frac-servedBefore)
		servedBefore = frac
		for ep, n := range finalOf {
			now := podServed[ep]
			if step > simSteps {
				now = n
			}
			podJump = max(podJump, float64(now-podBefore[ep])/float64(n))
			podBefore[ep] = now
		}
		if step <= simSteps {
			lag += math.Abs(frac - share(step))
		}
	}
	good := 0
	for pr := range seen {
		if final[pr.key] == pr.ep {
			good++
		}
	}
	return simResult{
		precision: 100 * float64(good) / float64(max(len(seen), 1)),
		oldOld:    100 * float64(oldOld) / simKeys,
		flaps:     float64(flaps) / simKeys,
		moved:     100 * float64(moved) / simKeys,
		ideal:     100 * float64(add) / float64(old+add),
		lag:       100 * lag / float64(simSteps),
		jump:      100 * jump,
		podJump:   100 * podJump,
	}
}

func simEndpoints(n int, weight uint32) []ringhash.Endpoint {
	eps := make([]ringhash.Endpoint, n)
	for i := range eps {
		eps[i] = ringhash.Endpoint{Key: fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250+1), Weight: weight}
	}
	return eps
}

func skipperEndpoints(n int) []ringhash.Endpoint {
	eps := make([]ringhash.Endpoint, n)
	for i := range eps {
		eps[i] = ringhash.Endpoint{Key: fmt.Sprintf("http://10.0.%d.%d:8080", i/250, i%250+1)}
	}
	return eps
}

// fadeSchemes returns, per scheme, a pick function for the simulation.
// simSpec is one simulated scale-up: add endpoints join old ones, the ring
// laid out for capacity (fade_in.capacity; 0 for none); the new endpoints
// start fading together, or stagger apart one after the other, as
// Kubernetes reports pods that turn ready one by one.
type simSpec struct {
	old, add int
	capacity uint64
	stagger  time.Duration
}

func (sc simSpec) name() string {
	s := fmt.Sprintf("%dto%d", sc.old, sc.old+sc.add)
	if sc.capacity > 0 {
		s += fmt.Sprintf("-capacity%d", sc.capacity)
	}
	if sc.stagger > 0 {
		s += fmt.Sprintf("-staggered%v", sc.stagger)
	}
	return s
}

// steps is the number of fade steps: until the last new endpoint's fade
// is over.
func (sc simSpec) steps() int {
	return simSteps + int((time.Duration(sc.add-1)*sc.stagger+time.Second-1)/time.Second)
}

// start is when new endpoint i (0-based among the new) starts fading.
func (sc simSpec) start(t0 time.Time, i int) time.Time {
	return t0.Add(time.Duration(i) * sc.stagger)
}

// share is the new endpoints' mean curve share at fade step step.
func (sc simSpec) share(step int) float64 {
	var sum float64
	for i := range sc.add {
		sum += simCurve.Share(time.Duration(step-1)*time.Second - time.Duration(i)*sc.stagger)
	}
	return sum / float64(sc.add)
}

func fadeSchemes(tb testing.TB, sc simSpec) map[string]func(step, key int, h uint64) int {
	old, add, capacity := sc.old, sc.add, sc.capacity
	simSteps := sc.steps()
	must := func(r ringhash.Ring, err error) ringhash.Ring {
		if err != nil {
			tb.Fatal(err)
		}
		return r
	}
	n := old + add
	kOld, _ := LayoutEntriesPerWeight(uint64(old), 4096, capacity)
	kNew, _ := LayoutEntriesPerWeight(uint64(n), 4096, capacity)

	// ringxds weight ramp: the rings the control plane publishes.
	ramp := make([]ringhash.Ring, simSteps+2)
	ramp[0] = must(NewCountRing(simEndpoints(old, uint32(kOld)), ringhash.XXHash))
	t0 := time.Unix(1_780_000_000, 0)
	rampEps := make([]RampEndpoint, n)
	for i, ep := range simEndpoints(n, uint32(kNew)) {
		rampEps[i] = RampEndpoint{Key: ep.Key, Final: kNew}
		if i >= old {
			rampEps[i].Start = sc.start(t0, i-old)
		}
	}
	// present is the endpoints known at fade step step: the old ones and
	// the new ones that have started.
	present := func(step int) []int {
		var in []int
		for i := range n {
			if i < old || step > simSteps || !rampEps[i].Start.After(t0.Add(time.Duration(step-1)*time.Second)) {
				in = append(in, i)
			}
		}
		return in
	}
	// indexed maps a ring over some endpoints back to indexes of all.
	indexed := func(r ringhash.Ring, in []int) ringhash.Ring { return indexedRing{r, in} }
	rampWith := func(jumpLimit float64) []ringhash.Ring {
		rings := make([]ringhash.Ring, simSteps+2)
		rings[0] = ramp[0]
		for step := 1; step <= simSteps+1; step++ {
			in := present(step)
			cur := make([]RampEndpoint, len(in))
			for k, i := range in {
				cur[k] = rampEps[i]
			}
			plan, err := planRamp(cur, simCurve, ringhash.XXHash, 4096, t0.Add(time.Duration(step-1)*time.Second), jumpLimit)
			if err != nil {
				tb.Fatal(err)
			}
			eps := make([]ringhash.Endpoint, len(in))
			for k := range in {
				eps[k] = ringhash.Endpoint{Key: cur[k].Key, Weight: uint32(plan.Counts[k])}
			}
			rings[step] = indexed(must(NewCountRing(eps, ringhash.XXHash)), in)
		}
		return rings
	}
	ramp = rampWith(exactJumpLimit)
	exact := rampWith(math.Inf(1))

	nring := func(build BuildFunc, eps []ringhash.Endpoint, before ringhash.Ring) func(step, key int, h uint64) int {
		// One NRing per step, updated with the endpoints known then.
		rings := make([]*NRing, simSteps+2)
		ins := make([][]int, simSteps+2)
		for step := 1; step <= simSteps+1; step++ {
			in := present(step)
			members := make([]Member, len(in))
			for k, i := range in {
				members[k] = Member{Key: eps[i]}
				if i >= old {
					members[k].FadeStart, members[k].Curve = rampEps[i].Start, simCurve
				}
			}
			now := t0.Add(time.Duration(step-1) * time.Second)
			if step > simSteps {
				now = now.Add(simCurve.Duration)
			}
			nr := NewNRing(build)
			if err := nr.Update(members, now); err != nil {
				tb.Fatal(err)
			}
			rings[step], ins[step] = nr, in
		}
		return func(step, _ int, h uint64) int {
			if step == 0 {
				return before.Pick(h)
			}
			now := t0.Add(time.Duration(step-1) * time.Second)
			if step > simSteps {
				now = now.Add(simCurve.Duration)
			}
			return ins[step][rings[step].Pick(h, now)]
		}
	}
	countBuild := func(eps []ringhash.Endpoint) (ringhash.Ring, error) { return NewCountRing(eps, ringhash.XXHash) }
	skipperBuild := func(eps []ringhash.Endpoint) (ringhash.Ring, error) { return ringhash.NewSkipper(eps) }

	// Skipper's fadeIn: one ring of every endpoint, one random threshold per
	// request, a fading endpoint allowed if threshold < its score, walk past
	// the disallowed.
	skOld := must(ringhash.NewSkipper(skipperEndpoints(old))).(*ringhash.Skipper)
	skAll := must(ringhash.NewSkipper(skipperEndpoints(n))).(*ringhash.Skipper)
	rng := rand.New(rand.NewPCG(7, 11))
	skipperFade := func(step, _ int, h uint64) int {
		switch {
		case step == 0:
			return skOld.Pick(h)
		case step > simSteps:
			return skAll.Pick(h)
		}
		score, r := sc.share(step), rng.Float64()
		return skAll.PickExcluding(h, func(ep int) bool { return ep >= old && !(r < score) })
	}

	// A naive Envoy ramp: old endpoints at weight 100, the new ones ramping
	// 1..100 with the share, Envoy's default ring sizes (1024 .. 8M).
	naive := make([]ringhash.Ring, simSteps+2)
	naive[0] = must(ringhash.NewRingHash(simEndpoints(old, 100), ringhash.RingHashOptions{}))
	for step := 1; step <= simSteps+1; step++ {
		eps := simEndpoints(n, 100)
		share := 1.0
		if step <= simSteps {
			share = sc.share(step)
		}
		for i := old; i < n; i++ {
			eps[i].Weight = uint32(max(1, math.Round(100*share)))
		}
		naive[step] = must(ringhash.NewRingHash(eps, ringhash.RingHashOptions{}))
	}

	return map[string]func(step, key int, h uint64) int{
		"ringxds-ramp":           func(step, _ int, h uint64) int { return ramp[step].Pick(h) },
		"ringxds-ramp-exact":     func(step, _ int, h uint64) int { return exact[step].Pick(h) },
		"ringxds-nring-ringhash": nring(countBuild, simEndpoints(n, uint32(kNew)), ramp[0]),
		"ringxds-nring-skipper":  nring(skipperBuild, skipperEndpoints(n), skOld),
		"skipper-fadein":         skipperFade,
		"envoy-naive-ramp":       func(step, _ int, h uint64) int { return naive[step].Pick(h) },
	}
}

var simScenarios = []simSpec{
	{old: 10, add: 1},
	{old: 100, add: 10},
	{old: 100, add: 50},
	{old: 100, add: 50, capacity: 256},
	{old: 100, add: 10, stagger: time.Second},
	{old: 100, add: 50, capacity: 256, stagger: 500 * time.Millisecond},
}

var simOrder = []string{"ringxds-ramp", "ringxds-ramp-exact", "ringxds-nring-ringhash", "ringxds-nring-skipper", "skipper-fadein", "envoy-naive-ramp"}

func BenchmarkFadeSimulation(b *testing.B) {
	for _, sc := range simScenarios {
		schemes := fadeSchemes(b, sc)
		for _, name := range simOrder {
			if sc.stagger > 0 && (name == "skipper-fadein" || name == "envoy-naive-ramp") {
				continue // their per-request and per-step shares assume one start
			}
			b.Run(sc.name()+"/"+name, func(b *testing.B) {
				var r simResult
				for b.Loop() {
					r = simulate(sc.old, sc.add, sc.steps(), sc.share, schemes[name])
				}
				b.ReportMetric(r.precision, "precision_%")
				b.ReportMetric(r.oldOld, "oldold_%")
				b.ReportMetric(r.flaps, "flaps/key")
				b.ReportMetric(r.moved, "moved_%")
				b.ReportMetric(r.ideal, "ideal_%")
				b.ReportMetric(r.lag, "lag_pp")
				b.ReportMetric(r.jump, "maxstep_pp")
				b.ReportMetric(r.podJump, "podstep_pp")
			})
		}
	}
}

// indexedRing picks among some of the simulated endpoints and answers with
// indexes into all of them.
type indexedRing struct {
	ringhash.Ring
	in []int
}

func (r indexedRing) Pick(h uint64) int { return r.in[r.Ring.Pick(h)] }
