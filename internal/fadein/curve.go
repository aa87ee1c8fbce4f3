package fadein

import (
	"math"
	"time"
)

// Curve is a fade-in curve: share(t) = min(1, (t/Duration)^Exponent).
type Curve struct {
	Duration time.Duration
	Exponent float64
}

// Share is the fraction of its final traffic an endpoint that started fading
// elapsed ago receives: 0 for elapsed <= 0, 1 from Duration on. A
// non-positive Duration means no fade (always 1).
func (c Curve) Share(elapsed time.Duration) float64 {
	if c.Duration <= 0 || elapsed >= c.Duration {
		return 1
	}
	if elapsed <= 0 {
		return 0
	}
	return math.Min(1, math.Pow(float64(elapsed)/float64(c.Duration), c.Exponent))
}

// EndStep is the step at which a fade that started at start is over: the
// first step instant at or after start + Duration.
func (c Curve) EndStep(start time.Time) time.Time {
	end := StepTime(start.Add(c.Duration))
	if end.Before(start.Add(c.Duration)) {
		end = end.Add(StepInterval)
	}
	return end
}

// StepInterval is the spacing of the control plane's fade-in steps. Envoy
// merges EDS updates over a one-second window (update_merge_window) and
// rebuilds its ring on each weight change, so closer steps would only be
// merged or cost rebuilds.
const StepInterval = time.Second

// StepTime is the step instant in force at now: now rounded down to a whole
// StepInterval of wall-clock time. Steps are anchored to the clock, not to
// each endpoint's start, so overlapping fades share one step grid and every
// replica steps at the same instants.
func StepTime(now time.Time) time.Time { return now.Truncate(StepInterval) }
