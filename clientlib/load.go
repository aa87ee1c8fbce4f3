package clientlib

import (
	"math"
	"sync/atomic"
	"time"
)

// Occupancy window: seconds of work per second over 150 ms, kept in five
// 30 ms buckets (Zalando's in-process balancer: a 150 ms window in five
// 30 ms buckets).
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

// outcome is how a call through Do ended, as load tracking sees it.
type outcome uint8

const (
	// answered: the endpoint answered: fn returned nil or a caller's
	// error (outcomeOf).
	answered outcome = iota
	// failed: the endpoint answered with a failure. It counts towards
	// ejection and never as a latency sample, so a fast failure cannot
	// make an endpoint look fast.
	failed
	// timedOut: the endpoint did not answer within the caller's deadline,
	// though it had the freeze threshold's time to. A failure, as failed,
	// but not an answer: it does not end a freeze.
	timedOut
	// abandoned: the caller canceled, or fn panicked. It says nothing
	// about the endpoint.
	abandoned
)

// endpointStats is one endpoint's load. Picks read the first cache line;
// calls write inflight there and the buckets below. Each value is allocated
// on its own and padded to 320 bytes (a size class of its own, whose
// objects start on 64-byte boundaries) so two endpoints never share a line
// and picks on one core do not stall on completions on another.
type endpointStats struct {
	// Read by every bounded-load pick.
	inflight atomic.Int64
	occ      atomic.Uint64 // float64 bits: seconds of work per second
	penalty  atomic.Uint64 // float64 bits: min(latency / cluster latency, 5)
	share    atomic.Uint64 // float64 bits: fraction of request hashes the ring gives it
	frozen   atomic.Bool
	ejected  atomic.Bool          // failed too often; out of picks until ejectedUntil
	failing  atomic.Bool          // its last call failed: no walk lands on it
	_        [64 - 4*8 - 3*4]byte // atomic.Bool is 4 bytes

	// Written on completion, read by the ticker.
	lastProgress atomic.Int64             // unix nanos of the last answer or 0 -> 1 in-flight step
	work         [numBuckets]atomic.Int64 // nanos of calls, in the buckets they ran in, for occupancy
	lat          [numBuckets]atomic.Int64 // nanos of answered calls, for latency
	count        [numBuckets]atomic.Int64 // answered calls
	failures     atomic.Int32             // consecutive failed calls
	ejections    atomic.Int32             // times ejected recently: the ejection time grows with it
	ejectedUntil atomic.Int64             // unix nanos

	// Ticker only.
	ewma        float64 // seconds
	unejectedAt int64   // unix nanos the last ejection ended
	freezes     atomic.Uint64
	_           [320 - 64 - 8 - 3*8*numBuckets - 4 - 4 - 8 - 8 - 8 - 8]byte
}

func newEndpointStats() *endpointStats {
	s := &endpointStats{}
	s.penalty.Store(math.Float64bits(1))
	return s
}

// rawLoad is max(in-flight, occupancy): the work the endpoint holds.
func (s *endpointStats) rawLoad() float64 {
	return max(float64(s.inflight.Load()), math.Float64frombits(s.occ.Load()))
}

// load is max(in-flight, occupancy) x latency penalty.
func (s *endpointStats) load() float64 {
	return s.rawLoad() * math.Float64frombits(s.penalty.Load())
}

// start records a call starting at now (unix nanos).
func (s *endpointStats) start(now int64) {
	if s.inflight.Add(1) == 1 {
		// An idle endpoint starts its stall clock with this call, not at
		// its last completion, which may be long ago.
		s.lastProgress.Store(now)
	}
}

// progress records that a call in flight made progress at now (unix
// nanos): a response body arriving piece by piece is no stall.
func (s *endpointStats) progress(now int64) { s.lastProgress.Store(now) }

// done records a call that ran from start to now (unix nanos). Its work is
// spread over the buckets it ran in, back from b, the current one, which
// began at bucketStart: a one-second call is occupancy over the second it
// took, not a burst in the 30 ms it ended in. It returns the consecutive
// failures after this call.
func (s *endpointStats) done(start, now, bucketStart int64, b uint32, o outcome) int32 {
	s.inflight.Add(-1)
	spreadWork(&s.work, start, now, bucketStart, b)
	switch o {
	case abandoned:
		return s.failures.Load()
	case timedOut:
		// A failure, but no answer: the endpoint may still be hanging, so
		// neither its stall clock nor a freeze is reset.
		s.failing.Store(true)
		return s.failures.Add(1)
	case answered:
		d := now - start
		s.lat[b].Add(d)
		s.count[b].Add(1)
		if s.failures.Load() != 0 {
			s.failures.Store(0)
			s.failing.Store(false)
		}
	}
	// Failed or not, the endpoint answered: it is not hanging.
	s.lastProgress.Store(now)
	if s.frozen.Load() {
		// Completing is proof of life: return traffic at once rather than
		// at the next tick.
		s.frozen.Store(false)
	}
	if o == failed {
		s.failing.Store(true)
		return s.failures.Add(1)
	}
	return 0
}

// spreadWork adds the call's running time, start to now, to the buckets it
// overlapped: the current bucket b (from bucketStart), then each earlier one
// (30 ms each). Time before the window is dropped: occupancy is work per
// second over the window.
func spreadWork(work *[numBuckets]atomic.Int64, start, now, bucketStart int64, b uint32) {
	hi, lo := now, bucketStart
	for k := range uint32(numBuckets) {
		if part := min(hi, now) - max(lo, start); part > 0 {
			work[(b+numBuckets-k)%numBuckets].Add(part)
		}
		if start >= lo {
			return
		}
		hi, lo = lo, lo-int64(bucketWidth)
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
	_        [4]byte
	start    atomic.Int64 // unix nanos the current bucket began
	_        [48]byte
	latency  atomic.Uint64 // float64 bits: mean call duration over the window, seconds
	_        [56]byte
}

// freezeThreshold is how long an endpoint may hold calls without
// completing any before it counts as frozen: freezeAfter, or four times the
// cluster's mean latency (seconds) when that is longer.
func freezeThreshold(freezeAfter time.Duration, clusterLatency float64) time.Duration {
	return max(freezeAfter, time.Duration(freezeLatencyMultiple*clusterLatency*float64(time.Second)))
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
	threshold := freezeThreshold(freezeAfter, clusterLat)
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
		// freezeAfter 0 turns freeze detection off.
		frozen := freezeAfter > 0 && in > 0 && time.Duration(nowNanos-s.lastProgress.Load()) > threshold
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
	t.start.Store(nowNanos)
	t.bucket.Store(next)
	return active, freezes
}
