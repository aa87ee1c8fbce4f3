package clientlib

import (
	"math"
	"sync/atomic"
	"time"
)

// Occupancy window: seconds of work per second over 150 ms, kept in five
// 30 ms buckets (zalando-cslb: "Window 150 ms in five 30 ms buckets").
const (
	bucketWidth = 30 * time.Millisecond
	numBuckets  = 5
	window      = numBuckets * bucketWidth
	// maxPenalty caps the latency multiplier; a frozen endpoint gets it in
	// full.
	maxPenalty = 5.0
	// ewmaAlpha weighs each bucket's mean latency into an endpoint's EWMA:
	// a time constant of about three buckets (100 ms), short enough to
	// react inside the freeze SLO, long enough to ride out one slow call.
	ewmaAlpha = 0.3
	// freezeLatencyMultiple scales the cluster's mean latency into the
	// freeze threshold, so a cluster whose calls take a second is not
	// "frozen" by each of them.
	freezeLatencyMultiple = 4
)

// endpointStats is one endpoint's load. Picks read the first cache line;
// calls write inflight there and the buckets below. Each value is allocated
// on its own and padded to 320 bytes (a size class of its own, whose
// objects start on 64-byte boundaries) so two endpoints never share a line and picks on one core do not stall
// on completions on another.
type endpointStats struct {
	// Read by every bounded-load pick.
	inflight atomic.Int64
	occ      atomic.Uint64 // float64 bits: seconds of work per second
	penalty  atomic.Uint64 // float64 bits: min(latency / cluster latency, 5)
	frozen   atomic.Bool
	_        [64 - 3*8 - 4]byte

	// Written on completion, read by the ticker.
	lastProgress atomic.Int64             // unix nanos of the last answer or 0 -> 1 in-flight step
	work         [numBuckets]atomic.Int64 // nanos of every finished call, for occupancy
	lat          [numBuckets]atomic.Int64 // nanos of answered calls, for latency
	count        [numBuckets]atomic.Int64 // answered calls

	// Ticker only.
	ewma    float64 // seconds
	freezes atomic.Uint64
	_       [320 - 64 - 8 - 3*8*numBuckets - 16]byte
}

func newEndpointStats() *endpointStats {
	s := &endpointStats{}
	s.penalty.Store(math.Float64bits(1))
	return s
}

// load is max(in-flight, occupancy) x latency penalty.
func (s *endpointStats) load() float64 {
	in := float64(s.inflight.Load())
	occ := math.Float64frombits(s.occ.Load())
	return max(in, occ) * math.Float64frombits(s.penalty.Load())
}

// start records a call starting at now (unix nanos).
func (s *endpointStats) start(now int64) {
	if s.inflight.Add(1) == 1 {
		// An idle endpoint starts its stall clock with this call, not at
		// its last completion, which may be long ago.
		s.lastProgress.Store(now)
	}
}

// done records a call that took d, ending at now, in bucket b. answered
// is false when the caller gave up on it (its context ended): the work
// counts towards occupancy, but an abandoned call proves nothing about the
// endpoint, so it neither resets the stall clock nor ends a freeze.
func (s *endpointStats) done(now int64, d time.Duration, b uint32, answered bool) {
	s.inflight.Add(-1)
	s.work[b].Add(int64(d))
	if !answered {
		return
	}
	s.lat[b].Add(int64(d))
	s.count[b].Add(1)
	s.lastProgress.Store(now)
	if s.frozen.Load() {
		// Completing is proof of life: return traffic at once rather than
		// at the next tick.
		s.frozen.Store(false)
	}
}

// loadTracker is a balancer's shared load state, written by calls and the
// ticker and read by picks. Each field sits on its own cache line.
type loadTracker struct {
	inflight atomic.Int64 // calls in flight through Do, all endpoints
	_        [56]byte
	sum      atomic.Uint64 // float64 bits: sum of endpoint loads at the last tick
	_        [56]byte
	bucket   atomic.Uint32 // current bucket index
	_        [60]byte
	latency  atomic.Uint64 // float64 bits: mean call duration over the window, seconds
	_        [56]byte
}

// capacity is the bounded-load bound for n endpoints: f x (L + 1) / n,
// at least 1, where L is the cluster's total load (the larger of the live
// in-flight count and the load summed at the last tick) and the + 1 is the
// call being placed. An endpoint is under the bound while its load is
// below it: load < capacity. The floor of 1 lets a lightly loaded cluster
// keep every key on its owner as long as the owner has less than one call's
// worth of work, however uneven the keys; this is the ceiling in Mirrokni
// et al.'s "consistent hashing with bounded loads", where a bin's capacity
// is ceil(f x (m + 1) / n) balls.
func (t *loadTracker) capacity(f float64, n int) float64 {
	l := max(float64(t.inflight.Load()), math.Float64frombits(t.sum.Load()))
	return max(f*(l+1)/float64(n), 1)
}

// tick closes the current bucket: it recomputes every endpoint's
// occupancy, latency penalty and frozen state and the cluster totals, then
// clears the oldest bucket and makes it current. It reports whether the
// window holds any activity, so the ticker can park when idle.
//
// The latency statistic: each endpoint keeps an EWMA (alpha 0.3 per 30 ms
// bucket) of its bucket mean durations; the cluster latency is the mean
// duration of every call answered in the window. The penalty is
// min(endpoint EWMA / cluster latency, 5), 1 while either is unknown.
func (t *loadTracker) tick(stats []*endpointStats, now time.Time, freezeAfter time.Duration) (active bool, freezes int) {
	cur := t.bucket.Load()
	var totalWork, totalCount int64
	for _, s := range stats {
		for b := range numBuckets {
			totalWork += s.lat[b].Load()
			totalCount += s.count[b].Load()
		}
	}
	clusterLat := math.Float64frombits(t.latency.Load())
	if totalCount > 0 {
		clusterLat = time.Duration(totalWork / totalCount).Seconds()
		t.latency.Store(math.Float64bits(clusterLat))
	}
	threshold := max(freezeAfter, time.Duration(freezeLatencyMultiple*clusterLat*float64(time.Second)))
	nowNanos := now.UnixNano()

	var sum float64
	for _, s := range stats {
		var work int64
		for b := range numBuckets {
			work += s.work[b].Load()
		}
		occ := time.Duration(work).Seconds() / window.Seconds()
		s.occ.Store(math.Float64bits(occ))
		if n := s.count[cur].Load(); n > 0 {
			mean := time.Duration(s.lat[cur].Load() / n).Seconds()
			if s.ewma == 0 {
				s.ewma = mean
			} else {
				s.ewma += ewmaAlpha * (mean - s.ewma)
			}
		}
		in := s.inflight.Load()
		if in > 0 || work > 0 {
			active = true
		}
		frozen := in > 0 && time.Duration(nowNanos-s.lastProgress.Load()) > threshold
		penalty := 1.0
		if s.ewma > 0 && clusterLat > 0 {
			penalty = min(s.ewma/clusterLat, maxPenalty)
		}
		if frozen {
			penalty = maxPenalty
			if !s.frozen.Load() {
				s.freezes.Add(1)
				freezes++
			}
		}
		s.frozen.Store(frozen)
		s.penalty.Store(math.Float64bits(penalty))
		sum += max(float64(in), occ) * penalty
	}
	t.sum.Store(math.Float64bits(sum))

	next := (cur + 1) % numBuckets
	for _, s := range stats {
		s.work[next].Store(0)
		s.lat[next].Store(0)
		s.count[next].Store(0)
	}
	t.bucket.Store(next)
	return active, freezes
}
