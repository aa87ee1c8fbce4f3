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

type simResult struct {
	precision, oldOld, flaps, moved, ideal, lag, jump float64
}

const simKeys = 100_000

var simCurve = Curve{Duration: 30 * time.Second, Exponent: 2.5}

// simSteps is the number of fade steps: shares at 0 s, 1 s, ..., 29 s.
const simSteps = 30

func simShare(step int) float64 { return simCurve.Share(time.Duration(step) * time.Second) }

// simulate runs pick over every step: 0 is the ring before the event, 1 to
// simSteps the fade steps, simSteps+1 the ring after it. Endpoints 0..old-1
// are old; pick returns an index into all old+add endpoints.
func simulate(old, add int, pick func(step int, key int, h uint64) int) simResult {
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
	var lag, jump, servedBefore float64
	for step := 1; step <= simSteps+1; step++ {
		served := 0
		for i, h := range keys {
			p := final[i]
			if step <= simSteps {
				p = pick(step, i, h)
			}
			if p >= old && p == final[i] {
				served++
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
		if step <= simSteps {
			lag += math.Abs(frac - simShare(step-1))
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
		lag:       100 * lag / simSteps,
		jump:      100 * jump,
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
// capacity is fade_in.capacity (0: none): the ring is laid out for that
// weight sum instead of the current one.
func fadeSchemes(tb testing.TB, old, add int, capacity uint64) map[string]func(step, key int, h uint64) int {
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
			rampEps[i].Start = t0
		}
	}
	rampWith := func(jumpLimit float64) []ringhash.Ring {
		rings := make([]ringhash.Ring, simSteps+2)
		rings[0] = ramp[0]
		for step := 1; step <= simSteps+1; step++ {
			plan, err := planRamp(rampEps, simCurve, ringhash.XXHash, t0.Add(time.Duration(step-1)*time.Second), jumpLimit)
			if err != nil {
				tb.Fatal(err)
			}
			eps := simEndpoints(n, 1)
			for i := range eps {
				eps[i].Weight = uint32(plan.Counts[i])
			}
			rings[step] = must(NewCountRing(eps, ringhash.XXHash))
		}
		return rings
	}
	ramp = rampWith(exactJumpLimit)
	exact := rampWith(math.Inf(1))

	nring := func(build BuildFunc, eps []ringhash.Endpoint, before ringhash.Ring) func(step, key int, h uint64) int {
		members := make([]Member, n)
		for i := range members {
			members[i] = Member{Key: eps[i]}
			if i >= old {
				members[i].FadeStart, members[i].Curve = t0, simCurve
			}
		}
		nr := NewNRing(build)
		if err := nr.Update(members, t0); err != nil {
			tb.Fatal(err)
		}
		return func(step, _ int, h uint64) int {
			if step == 0 {
				return before.Pick(h)
			}
			return nr.Pick(h, t0.Add(time.Duration(step-1)*time.Second))
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
		score, r := simShare(step-1), rng.Float64()
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
			share = simShare(step - 1)
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

var simScenarios = []struct {
	old, add int
	capacity uint64
}{{10, 1, 0}, {100, 10, 0}, {100, 50, 0}, {100, 50, 256}}

var simOrder = []string{"ringxds-ramp", "ringxds-ramp-exact", "ringxds-nring-ringhash", "ringxds-nring-skipper", "skipper-fadein", "envoy-naive-ramp"}

func BenchmarkFadeSimulation(b *testing.B) {
	for _, sc := range simScenarios {
		schemes := fadeSchemes(b, sc.old, sc.add, sc.capacity)
		for _, name := range simOrder {
			scenario := fmt.Sprintf("%dto%d", sc.old, sc.old+sc.add)
			if sc.capacity > 0 {
				scenario += fmt.Sprintf("-capacity%d", sc.capacity)
			}
			b.Run(scenario+"/"+name, func(b *testing.B) {
				var r simResult
				for b.Loop() {
					r = simulate(sc.old, sc.add, schemes[name])
				}
				b.ReportMetric(r.precision, "precision_%")
				b.ReportMetric(r.oldOld, "oldold_%")
				b.ReportMetric(r.flaps, "flaps/key")
				b.ReportMetric(r.moved, "moved_%")
				b.ReportMetric(r.ideal, "ideal_%")
				b.ReportMetric(r.lag, "lag_pp")
				b.ReportMetric(r.jump, "maxstep_pp")
			})
		}
	}
}
