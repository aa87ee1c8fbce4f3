package clientlib

import (
	"context"
	"math"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/ringhash"
)

// A call's work is occupancy over the time it ran, not a burst in the
// bucket it ended in: a one-second call leaves the window's worth of work
// (occupancy 1), not 6.7.
func TestOccupancyCountsWhereTheCallRan(t *testing.T) {
	s := newEndpointStats()
	var tr loadTracker
	base := time.Unix(1000, 0)
	tr.start.Store(base.UnixNano())
	s.start(base.Add(-time.Second).UnixNano())
	end := base.Add(20 * time.Millisecond).UnixNano()
	s.done(base.Add(-time.Second).UnixNano(), end, tr.start.Load(), tr.bucket.Load(), answered)
	tr.tick([]*endpointStats{s}, base.Add(30*time.Millisecond), 0)
	occ := math.Float64frombits(s.occ.Load())
	// 20 ms in the current bucket plus four earlier buckets of 30 ms over
	// the 150 ms window.
	if want := (0.020 + 4*0.030) / 0.150; math.Abs(occ-want) > 1e-9 {
		t.Fatalf("occupancy %.3f after a 1 s call, want %.3f", occ, want)
	}
	// A short call lands whole in the current bucket.
	s2 := newEndpointStats()
	s2.start(base.Add(40 * time.Millisecond).UnixNano())
	s2.done(base.Add(40*time.Millisecond).UnixNano(), base.Add(50*time.Millisecond).UnixNano(), base.Add(30*time.Millisecond).UnixNano(), 1, answered)
	var sum int64
	for b := range numBuckets {
		sum += s2.work[b].Load()
	}
	if sum != int64(10*time.Millisecond) || s2.work[1].Load() != sum {
		t.Fatalf("a 10 ms call booked %v, %v of it in the current bucket", time.Duration(sum), time.Duration(s2.work[1].Load()))
	}
}

// A failed call is no latency sample: fast errors must not make an
// endpoint look fast, or bounded load would send it more.
func TestFailuresAreNoLatencySamples(t *testing.T) {
	s := newEndpointStats()
	now := time.Now().UnixNano()
	for range 10 {
		s.start(now)
		s.done(now, now+1000, 0, 0, failed)
	}
	if s.count[0].Load() != 0 || s.lat[0].Load() != 0 {
		t.Fatalf("failed calls counted as %d latency samples", s.count[0].Load())
	}
	if s.failures.Load() != 10 || !s.failing.Load() {
		t.Fatalf("failures %d, failing %v", s.failures.Load(), s.failing.Load())
	}
	s.start(now)
	s.done(now, now+1000, 0, 0, answered)
	if s.failures.Load() != 0 || s.failing.Load() {
		t.Fatal("a success did not reset the failure count")
	}
}

// A frozen endpoint in a walk is ranked at (load + 1) x the full penalty
// once, not with its penalty applied twice.
func TestFrozenEndpointIsPenalisedOnce(t *testing.T) {
	b, _ := benchBalancer(t, ringhash.PolicySkipper, 3)
	s := b.state.Load()
	st := s.stats[0]
	st.inflight.Store(2)
	st.penalty.Store(math.Float64bits(maxPenalty))
	st.frozen.Store(true)
	w := b.newWalker(s, -1)
	w.visit(0)
	if want := 3 * maxPenalty; w.bestLoad != want {
		t.Fatalf("frozen endpoint ranked at %v, want %v", w.bestLoad, want)
	}
}

// WithFreezeAfter(0) turns freeze detection off instead of freezing every
// busy endpoint.
func TestFreezeAfterZeroDisablesFreezes(t *testing.T) {
	b, _ := benchBalancer(t, ringhash.PolicySkipper, 3, WithFreezeAfter(0))
	s := b.state.Load()
	s.stats[0].start(time.Now().Add(-time.Hour).UnixNano())
	b.load.tick(s.stats, time.Now(), b.opts.freezeAfter)
	if s.stats[0].frozen.Load() {
		t.Fatal("an endpoint froze with freeze detection off")
	}
}

// Endpoints are == across ring updates that leave their record as it was.
func TestEndpointEqualityAcrossUpdates(t *testing.T) {
	b, r := benchBalancer(t, ringhash.PolicySkipper, 3)
	before, _ := b.Pick("k")
	_, eps := benchRing(t, ringhash.PolicySkipper, 3) // fresh records, equal content
	b.setState(ringhash.PolicySkipper, eps, r, nil)
	after, _ := b.Pick("k")
	if before != after {
		t.Fatalf("%v != %v after an update that changed nothing", before, after)
	}
	if (Endpoint{}).Weight() != 0 || before.Weight() != 1 {
		t.Fatalf("weights %d, %d", (Endpoint{}).Weight(), before.Weight())
	}
}

// Several values of the hash header are joined with ",", as the gRPC
// clients join them.
func TestHeaderKeyJoinsValues(t *testing.T) {
	r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	r.Header.Add("X-Key", "a")
	r.Header.Add("X-Key", "b")
	if k, ok := HeaderKey("x-key")(r); !ok || k != "a,b" {
		t.Fatalf("key %q %v", k, ok)
	}
}

// Picks do not allocate while endpoints fade in through the N-ring, also
// when bounded load walks.
func TestPickWhileFadingDoesNotAllocate(t *testing.T) {
	b, _ := benchBalancer(t, ringhash.PolicySkipper, 6)
	_, eps := benchRing(t, ringhash.PolicySkipper, 6)
	now := time.Now()
	members := make([]fadein.Member, len(eps))
	for i, ep := range eps {
		members[i] = fadein.Member{Key: ringhash.Endpoint{Key: "http://" + ep.Addr}}
		if i >= 3 {
			members[i].FadeStart, members[i].Curve = now, fadein.Curve{Duration: time.Hour, Exponent: 1}
		}
	}
	n := fadein.NewNRing(func(keys []ringhash.Endpoint) (ringhash.Ring, error) { return ringhash.NewSkipper(keys) })
	if err := n.Update(members, now.Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	r, _ := benchRing(t, ringhash.PolicySkipper, 6)
	b.setState(ringhash.PolicySkipper, eps, r, n)
	for _, st := range b.state.Load().stats[1:] {
		st.inflight.Store(100) // make bounded picks walk
	}
	b.load.inflight.Store(500)
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		ep, _ := b.Pick(benchKeys[i&1023])
		sink += len(ep.Addr)
		i++
	}); a != 0 {
		t.Fatalf("%v allocs per Pick while fading", a)
	}
}

// An ejected endpoint is out of picks, bounded load on or off, and back
// after its ejection time.
func TestEjectionTakesEndpointOutAndBack(t *testing.T) {
	for _, bounded := range []bool{false, true} {
		b, ring := benchBalancer(t, ringhash.PolicySkipper, 3, WithBoundedLoad(bounded), WithEjection(2, 50*time.Millisecond, time.Second, 0.5), WithoutRetry())
		s := b.state.Load()
		victim := ring.Pick(hashKey("k"))
		fail := func(context.Context, Endpoint) error { return context.DeadlineExceeded }
		for range 2 {
			_ = b.Do(context.Background(), "k", fail)
		}
		if !s.stats[victim].ejected.Load() || b.Stats().Ejected != 1 {
			t.Fatalf("bounded=%v: not ejected after 2 failures: %+v", bounded, b.Stats())
		}
		for i := range 200 {
			if ep, _ := b.Pick(benchKeys[i]); ep.Addr == s.eps[victim].Addr {
				t.Fatalf("bounded=%v: an ejected endpoint was picked", bounded)
			}
		}
		b.endEjections(time.Now().Add(100 * time.Millisecond))
		if s.stats[victim].ejected.Load() || b.ejected.Load() != 0 {
			t.Fatalf("bounded=%v: still ejected after its time", bounded)
		}
		if ep, _ := b.Pick("k"); ep.Addr != s.eps[victim].Addr {
			t.Fatalf("bounded=%v: the key did not go back to its owner", bounded)
		}
	}
}

// Ejections, their ends and ring updates racing each other leave the
// count of ejected endpoints, which picks and the ejection cap read, equal
// to the endpoints' flags.
func TestEjectedCountMatchesFlagsUnderRingUpdates(t *testing.T) {
	b, ring := benchBalancer(t, ringhash.PolicySkipper, 8, WithEjection(1, time.Millisecond, time.Millisecond, 1))
	eps := b.state.Load().eps
	var wg sync.WaitGroup
	run := func(f func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				f(i)
			}
		}()
	}
	run(func(int) { b.setState(ringhash.PolicySkipper, slices.Clone(eps), ring, nil) })
	run(func(i int) {
		s := b.state.Load()
		k := i % len(s.eps)
		b.eject(s.stats[k], s.eps[k].Addr, time.Now().UnixNano())
	})
	run(func(int) { b.endEjections(time.Now().Add(time.Second)) })
	wg.Wait()
	flags := 0
	for _, st := range b.state.Load().stats {
		if st.ejected.Load() {
			flags++
		}
	}
	if got := int(b.ejected.Load()); got != flags {
		t.Fatalf("ejected count %d, but %d endpoints are flagged ejected", got, flags)
	}
}

// A call that timed out is a failure but no answer: it must not end a
// freeze or restart the stall clock, as an answer, even a failed one, does.
func TestTimeoutDoesNotEndAFreeze(t *testing.T) {
	st := newEndpointStats()
	st.start(1)
	st.start(2)
	st.frozen.Store(true)
	st.done(2, 100, 0, 0, timedOut)
	if !st.frozen.Load() || st.lastProgress.Load() != 1 || st.failures.Load() != 1 {
		t.Fatalf("after a timeout: frozen %v, last progress %d, failures %d; want still frozen, 1, 1",
			st.frozen.Load(), st.lastProgress.Load(), st.failures.Load())
	}
	st.done(1, 200, 0, 0, failed)
	if st.frozen.Load() || st.lastProgress.Load() != 200 {
		t.Fatalf("after a failed answer: frozen %v, last progress %d; want unfrozen at 200", st.frozen.Load(), st.lastProgress.Load())
	}
}
