package fadein

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/ringhash"
)

var t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func skipperBuild(eps []ringhash.Endpoint) (ringhash.Ring, error) {
	plain := make([]ringhash.Endpoint, len(eps))
	for i, ep := range eps {
		plain[i] = ringhash.Endpoint{Key: ep.Key}
	}
	return ringhash.NewSkipper(plain)
}

func countBuild(eps []ringhash.Endpoint) (ringhash.Ring, error) {
	return NewCountRing(eps, ringhash.XXHash)
}

var curve = Curve{Duration: 30 * time.Second, Exponent: 2.5}

func members(n int, start time.Time) []Member {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{Key: ringhash.Endpoint{Key: fmt.Sprintf("http://10.0.0.%d:8080", i+1), Weight: 1}}
		if i >= 0 && !start.IsZero() {
			ms[i].FadeStart, ms[i].Curve = start, curve
		}
	}
	return ms
}

func keyHashes(n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = ringhash.HashKey(fmt.Sprintf("product-%d", i))
	}
	return hs
}

// finalOwners picks every key on the ring of all members.
func finalOwners(t *testing.T, build BuildFunc, ms []Member, hs []uint64) []int {
	t.Helper()
	eps := make([]ringhash.Endpoint, len(ms))
	for i, m := range ms {
		eps[i] = m.Key
	}
	r, err := build(eps)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, len(hs))
	for i, h := range hs {
		out[i] = r.Pick(h)
	}
	return out
}

func TestCurveShare(t *testing.T) {
	for _, tt := range []struct {
		at   time.Duration
		want float64
	}{{-time.Second, 0}, {0, 0}, {3 * time.Second, 0.00316}, {15 * time.Second, 0.17678}, {27 * time.Second, 0.76843}, {30 * time.Second, 1}, {time.Hour, 1}} {
		if got := curve.Share(tt.at); got < tt.want-1e-5 || got > tt.want+1e-5 {
			t.Errorf("Share(%v) = %v, want %v", tt.at, got, tt.want)
		}
	}
	if (Curve{}).Share(0) != 1 {
		t.Error("a zero curve means no fade")
	}
}

// TestNRingSingleEvent: 10 established, 2 join. Every key moves at most
// once, only from an old member to a new one, and only to the member that
// owns it once the fade is over; at the end every key is on its final owner.
func TestNRingSingleEvent(t *testing.T) {
	for name, build := range map[string]BuildFunc{"skipper": skipperBuild, "count": countBuild} {
		t.Run(name, func(t *testing.T) {
			ms := append(members(10, time.Time{}), members(12, t0)[10:]...)
			if name == "count" {
				for i := range ms {
					ms[i].Key.Weight = 256
				}
			}
			hs := keyHashes(8000)
			final := finalOwners(t, build, ms, hs)
			n := NewNRing(build)
			if err := n.Update(ms, t0); err != nil {
				t.Fatal(err)
			}
			if got := n.Fading(t0.Add(time.Second)); got != 2 {
				t.Fatalf("Fading = %d, want 2", got)
			}
			prev := make([]int, len(hs))
			for i, h := range hs {
				prev[i] = n.Pick(h, t0)
			}
			moved := 0
			for s := time.Duration(0); s <= 31*time.Second; s += 500 * time.Millisecond {
				now := t0.Add(s)
				for i, h := range hs {
					p := n.Pick(h, now)
					if p >= 10 && p != final[i] {
						t.Fatalf("at %v key %d on fading %d, final owner %d", s, i, p, final[i])
					}
					if p != prev[i] {
						if prev[i] >= 10 || p < 10 {
							t.Fatalf("at %v key %d moved %d -> %d", s, i, prev[i], p)
						}
						moved++
					}
					prev[i] = p
				}
			}
			for i := range hs {
				if prev[i] != final[i] {
					t.Fatalf("after the fade key %d on %d, want %d", i, prev[i], final[i])
				}
			}
			if moved == 0 {
				t.Fatal("no key moved to the new members")
			}
			if got := n.Fading(t0.Add(30 * time.Second)); got != 0 {
				t.Fatalf("Fading after the window = %d", got)
			}
		})
	}
}

// TestNRingOverlap: a second scale-up while the first fades. Keys still only
// move forward (old -> first event -> second event), never back to an old
// member, and each event's share follows its own start.
func TestNRingOverlap(t *testing.T) {
	t1 := t0.Add(10 * time.Second)
	ms := append(members(10, time.Time{}), members(12, t0)[10:]...)
	ms = append(ms, members(14, t1)[12:]...)
	hs := keyHashes(8000)
	final := finalOwners(t, skipperBuild, ms, hs)
	n := NewNRing(skipperBuild)
	// First only the first event exists; the second joins at t1.
	if err := n.Update(ms[:12], t0); err != nil {
		t.Fatal(err)
	}
	rank := func(p int) int { return min(p/10, 1) + p/12 } // 0 old, 1 first event, 2 second
	prev := make([]int, len(hs))
	for i, h := range hs {
		prev[i] = n.Pick(h, t0)
	}
	for s := time.Duration(0); s <= 41*time.Second; s += 500 * time.Millisecond {
		now := t0.Add(s)
		if s == 10*time.Second {
			if err := n.Update(ms, now); err != nil {
				t.Fatal(err)
			}
			if got := n.Fading(now); got != 4 {
				t.Fatalf("Fading = %d, want 4", got)
			}
		}
		for i, h := range hs {
			p := n.Pick(h, now)
			if rank(p) < rank(prev[i]) {
				t.Fatalf("at %v key %d moved back %d -> %d", s, i, prev[i], p)
			}
			if p != prev[i] && rank(p) == 0 {
				t.Fatalf("at %v key %d moved between old members %d -> %d", s, i, prev[i], p)
			}
			prev[i] = p
		}
	}
	for i := range hs {
		if prev[i] != final[i] {
			t.Fatalf("after both fades key %d on %d, want %d", i, prev[i], final[i])
		}
	}
}

// TestNRingDeletionAppliesToAllRings: removing an old member mid-fade moves
// only its keys, in whichever ring a key uses.
func TestNRingDeletionAppliesToAllRings(t *testing.T) {
	ms := append(members(10, time.Time{}), members(12, t0)[10:]...)
	hs := keyHashes(8000)
	n := NewNRing(skipperBuild)
	if err := n.Update(ms, t0); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(20 * time.Second)
	before := make([]string, len(hs))
	for i, h := range hs {
		before[i] = ms[n.Pick(h, now)].Key.Key
	}
	gone := ms[3].Key.Key
	rest := append(append([]Member{}, ms[:3]...), ms[4:]...)
	if err := n.Update(rest, now); err != nil {
		t.Fatal(err)
	}
	for i, h := range hs {
		after := rest[n.Pick(h, now)].Key.Key
		if after == gone {
			t.Fatalf("key %d still on the removed member", i)
		}
		if before[i] != gone && after != before[i] {
			t.Fatalf("key %d moved %s -> %s though its member stayed", i, before[i], after)
		}
	}
	// Removing a fading member hands its keys back: they were only ever
	// borrowed from the old members.
	rest = rest[:len(rest)-1]
	if err := n.Update(rest, now); err != nil {
		t.Fatal(err)
	}
	if got := n.Fading(now); got != 1 {
		t.Fatalf("Fading = %d, want 1", got)
	}
}

// TestNRingFinishedFadeCollapses: after the window the next Update builds a
// single ring, and picks equal the plain ring's.
func TestNRingFinishedFadeCollapses(t *testing.T) {
	ms := append(members(10, time.Time{}), members(12, t0)[10:]...)
	n := NewNRing(skipperBuild)
	later := t0.Add(31 * time.Second)
	if err := n.Update(ms, later); err != nil {
		t.Fatal(err)
	}
	if s := n.cur.Load(); len(s.rings) != 1 || s.fading != 0 {
		t.Fatalf("%d rings, %d fading; want one established ring", len(s.rings), s.fading)
	}
	hs := keyHashes(5000)
	final := finalOwners(t, skipperBuild, ms, hs)
	for i, h := range hs {
		if got := n.Pick(h, later); got != final[i] {
			t.Fatalf("key %d on %d, want %d", i, got, final[i])
		}
	}
}

// TestNRingAllFading: with no established member the oldest event is the
// base ring, so picks never fail.
func TestNRingAllFading(t *testing.T) {
	n := NewNRing(skipperBuild)
	if got := n.Pick(1, t0); got != -1 {
		t.Fatalf("Pick before Update = %d, want -1", got)
	}
	if err := n.Update(members(3, t0), t0); err != nil {
		t.Fatal(err)
	}
	if got := n.Pick(1, t0); got < 0 || got > 2 {
		t.Fatalf("Pick = %d", got)
	}
	if err := n.Update(nil, t0); !errors.Is(err, ErrNoMembers) {
		t.Fatalf("empty Update: %v", err)
	}
	bad := func([]ringhash.Endpoint) (ringhash.Ring, error) { return nil, errors.New("boom") }
	if err := NewNRing(bad).Update(members(3, time.Time{}), t0); err == nil {
		t.Fatal("a failing build must fail Update")
	}
}

func TestNRingWalkStartsAtPick(t *testing.T) {
	ms := append(members(10, time.Time{}), members(12, t0)[10:]...)
	n := NewNRing(skipperBuild)
	if err := n.Update(ms, t0); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(20 * time.Second)
	for _, h := range keyHashes(2000) {
		var seen []int
		n.Walk(h, now, func(i int) bool { seen = append(seen, i); return true })
		// The walk covers the ring the key uses: the 10 old members, or
		// all 12 once the key has cut over.
		if (len(seen) != 10 && len(seen) != 12) || seen[0] != n.Pick(h, now) {
			t.Fatalf("walk %v, pick %d", seen, n.Pick(h, now))
		}
	}
}

func TestNRingPickAllocatesNothing(t *testing.T) {
	ms := append(members(10, time.Time{}), members(12, t0)[10:]...)
	ms = append(ms, members(14, t0.Add(5*time.Second))[12:]...)
	n := NewNRing(skipperBuild)
	if err := n.Update(ms, t0); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(20 * time.Second)
	h := uint64(12345)
	if a := testing.AllocsPerRun(1000, func() { h = h*6364136223846793005 + 1; _ = n.Pick(h, now) }); a != 0 {
		t.Fatalf("Pick allocates %v times", a)
	}
	if a := testing.AllocsPerRun(1000, func() { _ = n.Fading(now) }); a != 0 {
		t.Fatalf("Fading allocates %v times", a)
	}
}

// TestNRingConcurrentUpdateAndPick is meant for -race.
func TestNRingConcurrentUpdateAndPick(t *testing.T) {
	ms := append(members(10, time.Time{}), members(12, t0)[10:]...)
	n := NewNRing(skipperBuild)
	if err := n.Update(ms, t0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := uint64(g)
			for {
				select {
				case <-stop:
					return
				default:
				}
				h = h*6364136223846793005 + 1442695040888963407
				now := t0.Add(time.Duration(h%30) * time.Second)
				if p := n.Pick(h, now); p < 0 || p >= len(ms) {
					t.Errorf("pick %d", p)
					return
				}
				n.Walk(h, now, func(int) bool { return false })
			}
		}()
	}
	for i := 0; i < 50; i++ {
		k := 10 + i%3
		if err := n.Update(ms[:k], t0.Add(time.Duration(i)*100*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// Shares follows the keys: mid-fade, each member's share is the fraction
// of random request hashes Pick gives it, and the shares sum to 1.
func TestNRingSharesMatchPicks(t *testing.T) {
	start := time.Unix(1000, 0)
	curve := Curve{Duration: 10 * time.Second, Exponent: 1}
	var members []Member
	for i := range 6 {
		m := Member{Key: ringhash.Endpoint{Key: fmt.Sprintf("10.0.0.%d:80", i+1), Weight: 1}}
		if i >= 3 {
			m.FadeStart, m.Curve = start.Add(time.Duration(i-3)*2*time.Second), curve
		}
		members = append(members, m)
	}
	n := NewNRing(func(eps []ringhash.Endpoint) (ringhash.Ring, error) {
		return ringhash.NewRingHash(eps, ringhash.RingHashOptions{MinRingSize: 1024, MaxRingSize: 1024})
	})
	now := start.Add(5 * time.Second)
	if err := n.Update(members, now); err != nil {
		t.Fatal(err)
	}
	shares := n.Shares(now)
	rng := rand.New(rand.NewPCG(3, 4))
	counts := make([]float64, len(members))
	const draws = 200000
	for range draws {
		counts[n.Pick(rng.Uint64(), now)]++
	}
	sum := 0.0
	for i := range members {
		sum += shares[i]
		if math.Abs(shares[i]-counts[i]/draws) > 0.01 {
			t.Errorf("member %d: share %.4f, picks %.4f", i, shares[i], counts[i]/draws)
		}
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("shares sum to %v", sum)
	}
}
