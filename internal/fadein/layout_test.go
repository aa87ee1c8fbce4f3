package fadein

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ringxds/ringxds/internal/ringhash"
)

func TestEntriesPerWeight(t *testing.T) {
	for _, tt := range []struct{ sum, max, want uint64 }{
		{10, 4096, 256}, {11, 4096, 256}, {16, 4096, 256}, {17, 4096, 128},
		{100, 4096, 32}, {110, 4096, 32}, {128, 4096, 32}, {150, 4096, 16},
		{4096, 4096, 1}, {4097, 4096, 0}, {3, 1000, 256}, {0, 4096, 0},
	} {
		if got := EntriesPerWeight(tt.sum, tt.max); got != tt.want {
			t.Errorf("EntriesPerWeight(%d, %d) = %d, want %d", tt.sum, tt.max, got, tt.want)
		}
	}
}

func TestRampEntriesGrowsFromOneToFinal(t *testing.T) {
	prev := uint64(0)
	for i := 0; i <= 1000; i++ {
		got := RampEntries(256, float64(i)/1000)
		if got < 1 || got > 256 || got < prev {
			t.Fatalf("share %v: %d entries after %d", float64(i)/1000, got, prev)
		}
		prev = got
	}
	if RampEntries(256, 0) != 1 || RampEntries(256, 1) != 256 || RampEntries(256, 0.5) != 128 {
		t.Fatal("ramp end points")
	}
}

// grpcA113Weights is grpc-go v1.85.0's weight for one locality of weight 1
// (cdsbalancer configbuilder: fp(ew / sum ew) x fp(1 / 1) in UQ1.31,
// floored at 1), the weight its ring walk normalizes.
func grpcA113Weights(w []uint32) []uint32 {
	var sum uint64
	for _, x := range w {
		sum += uint64(x)
	}
	out := make([]uint32, len(w))
	for i, x := range w {
		fp := uint64(x) << 31 / sum
		out[i] = max(uint32(fp*(1<<31)>>31), 1)
	}
	return out
}

// entryCounts counts each endpoint's ring entries.
func entryCounts(r ringhash.Drawable, n int) []uint64 {
	c := make([]uint64, n)
	r.Entries(func(_ uint64, ep int) { c[ep]++ })
	return c
}

// TestExactWeightsBuildTheCountsInEveryDataPlane brute-forces the exactness
// argument of ExactWeights: for random entry counts, realistic endpoint
// numbers and ring sizes up to grpc-go's cap, Envoy's walk (EDS order, the
// published weights) and grpc-go's (sorted by key, A113 fixed-point weights)
// both give every endpoint exactly its count.
func TestExactWeightsBuildTheCountsInEveryDataPlane(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	configs := 0
	check := func(counts []uint64) {
		t.Helper()
		configs++
		weights, size, err := ExactWeights(counts)
		if err != nil {
			t.Fatal(err)
		}
		eps := make([]ringhash.Endpoint, len(counts))
		for i := range counts {
			// Zero-padded, so input order is key order, as EDS is published.
			eps[i] = ringhash.Endpoint{Key: fmt.Sprintf("10.0.%03d.%03d:8080", i>>8, i&255), Weight: weights[i]}
		}
		envoy, err := ringhash.NewRingHash(eps, ringhash.RingHashOptions{MinRingSize: size, MaxRingSize: size})
		if err != nil {
			t.Fatal(err)
		}
		a113 := grpcA113Weights(weights)
		geps := make([]ringhash.Endpoint, len(eps))
		for i := range eps {
			geps[i] = ringhash.Endpoint{Key: eps[i].Key, Weight: a113[i]}
		}
		grpc, err := ringhash.NewRingHash(geps, ringhash.RingHashOptions{MinRingSize: size, MaxRingSize: size, SortByKey: true})
		if err != nil {
			t.Fatal(err)
		}
		for name, r := range map[string]*ringhash.RingHash{"envoy": envoy, "grpc": grpc} {
			got := entryCounts(r, len(counts))
			for i := range counts {
				if got[i] != counts[i] {
					t.Fatalf("%s: counts %v, weights %v, ring %d: endpoint %d has %d entries, want %d", name, counts, weights, size, i, got[i], counts[i])
				}
			}
		}
	}
	// Every fade step of the layouts the control plane publishes: n old
	// endpoints of k entries (k the ladder value), one to three new ones
	// growing from 1 to k.
	for _, n := range []int{1, 2, 3, 5, 7, 10, 13, 16, 31, 50, 64, 100, 127, 200, 500, 1000, 2000} {
		k := EntriesPerWeight(uint64(n+1), 4096)
		// Every count up to 64, then a spread, and the final one.
		for j := uint64(1); j <= k; j = min(j+max(1, j/16), max(k, j+1)) {
			counts := make([]uint64, n+1)
			for i := range n {
				counts[i] = k
			}
			counts[n] = j
			check(counts)
		}
		// A batch of new endpoints interleaved with the old ones in key
		// order, some still at 0 entries (held back), some growing.
		counts := make([]uint64, n+10)
		for i := range counts {
			counts[i] = k
			if i%(n/10+2) == 1 {
				counts[i] = uint64(rng.IntN(int(k) + 1))
			}
		}
		check(counts)
	}
	// Random counts, including unequal weights and endpoints in any order.
	for range 1000 {
		n := 1 + rng.IntN(300)
		counts := make([]uint64, n)
		budget := 1 + rng.IntN(4096)
		for i := range counts {
			counts[i] = 1 + uint64(rng.IntN(max(1, 2*budget/n)))
			if i > 0 && rng.IntN(8) == 0 {
				counts[i] = 0
			}
		}
		var s uint64
		for _, c := range counts {
			s += c
		}
		if s > 4096 {
			continue
		}
		check(counts)
	}
	t.Logf("%d configurations identical in Envoy and grpc-go", configs)
}

// TestCountsAsWeightsAreNotExact is the control for the test above: the
// obvious layout, weights equal to the counts with the ring size as minimum
// and maximum, gives grpc-go's A113 walk a different ring in a sizeable
// share of fade steps.
func TestCountsAsWeightsAreNotExact(t *testing.T) {
	bad, total := 0, 0
	for _, n := range []int{10, 100} {
		k := EntriesPerWeight(uint64(n+1), 4096)
		for j := uint32(1); j <= uint32(k); j++ {
			w := make([]uint32, n+1)
			eps := make([]ringhash.Endpoint, n+1)
			for i := range w {
				w[i] = uint32(k)
			}
			w[n] = j
			a113 := grpcA113Weights(w)
			for i := range eps {
				eps[i] = ringhash.Endpoint{Key: fmt.Sprintf("10.0.%03d.%03d:8080", i>>8, i&255), Weight: a113[i]}
			}
			size := uint64(n)*k + uint64(j)
			r, err := ringhash.NewRingHash(eps, ringhash.RingHashOptions{MinRingSize: size, MaxRingSize: size, SortByKey: true})
			if err != nil {
				t.Fatal(err)
			}
			got := entryCounts(r, n+1)
			total++
			for i := range w {
				if got[i] != uint64(w[i]) {
					bad++
					break
				}
			}
		}
	}
	t.Logf("weights = counts: %d of %d fade steps build a different ring in grpc-go", bad, total)
	if bad == 0 {
		t.Fatal("counts as weights were exact everywhere; the test above would prove nothing")
	}
}

// TestCountRingIgnoresInputOrder: NewCountRing sorts by key itself, so a
// client holding members in any order builds the published ring.
func TestCountRingIgnoresInputOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		n := 2 + rng.IntN(40)
		eps := make([]ringhash.Endpoint, n)
		for i := range eps {
			eps[i] = ringhash.Endpoint{Key: fmt.Sprintf("10.1.%d.%d:80", rng.IntN(256), i), Weight: 1 + uint32(rng.IntN(100))}
		}
		r, err := NewCountRing(eps, ringhash.XXHash)
		if err != nil {
			t.Fatal(err)
		}
		got := entryCounts(r, n)
		for i := range eps {
			if got[i] != uint64(eps[i].Weight) {
				t.Fatalf("endpoint %d: %d entries, want %d", i, got[i], eps[i].Weight)
			}
		}
	}
}

func TestExactWeightsRejectsEmptyAndZero(t *testing.T) {
	if _, _, err := ExactWeights(nil); err == nil {
		t.Fatal("no counts: want error")
	}
	if _, _, err := ExactWeights([]uint64{0, 3}); err == nil {
		t.Fatal("zero count first in walk order: want error")
	}
	if _, _, err := ExactWeights([]uint64{3, 0, 2, 0}); err != nil {
		t.Fatalf("zero counts after the first: %v", err)
	}
}

// TestCountRingGrowthOnlyAddsEntries pins the property the weight ramp
// rests on: raising one endpoint's count leaves every other endpoint's
// entries where they were.
func TestCountRingGrowthOnlyAddsEntries(t *testing.T) {
	eps := []ringhash.Endpoint{{Key: "a:1", Weight: 64}, {Key: "b:1", Weight: 64}, {Key: "c:1", Weight: 1}}
	prev := map[uint64]int{}
	for j := uint32(1); j <= 64; j++ {
		eps[2].Weight = j
		r, err := NewCountRing(eps, ringhash.XXHash)
		if err != nil {
			t.Fatal(err)
		}
		cur := map[uint64]int{}
		r.Entries(func(h uint64, ep int) { cur[h] = ep })
		for h, ep := range prev {
			if cur[h] != ep {
				t.Fatalf("count %d: entry %d moved from %d to %d", j, h, ep, cur[h])
			}
		}
		if len(cur) != 128+int(j) {
			t.Fatalf("count %d: ring of %d", j, len(cur))
		}
		prev = cur
	}
}

// TestExactWeightsOnLargeRingsAreExactOrRefused: past 2^22 entries the
// walk's doubles can no longer hold every product exactly, and a fade step
// of a 6.6M-entry ring gave its last endpoint one entry too many. Large
// rings must come out exact in both walks or be refused, and the refused
// ones' NearExactWeights within an entry of every count.
func TestExactWeightsOnLargeRingsAreExactOrRefused(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	refused := 0
	for sc := range 200 {
		n := 2 + rng.IntN(150)
		if sc%4 == 0 {
			n = 2 + rng.IntN(5000) // weights past 2^31 for exactness
		}
		counts := make([]uint64, n)
		per := uint64(ringhash.MaxRingSizeLimit) / uint64(n)
		for i := range counts {
			counts[i] = 1 + uint64(rng.Int64N(int64(per)))
			if i > 0 && rng.IntN(20) == 0 {
				counts[i] = 0 // a fading endpoint held back
			}
		}
		w, size, err := ExactWeights(counts)
		if err != nil {
			if !errors.Is(err, ErrRounding) {
				t.Fatal(err)
			}
			refused++
			if w, size, err = NearExactWeights(counts); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(w, 0) {
				t.Fatalf("near exact, %d endpoints: a weight of 0", n)
			}
			for _, fused := range []bool{false, true} {
				for i, got := range walkCounts(w, size, size, fused) {
					if got+1 < counts[i] || got > counts[i]+1 {
						t.Fatalf("near exact, %d entries: endpoint %d gets %d, want %d", size, i, got, counts[i])
					}
				}
			}
			continue
		}
		for _, fused := range []bool{false, true} {
			if got := walkCounts(w, size, size, fused); !slices.Equal(got, counts) {
				t.Fatalf("%d endpoints, %d entries (fused %v): weights build %v, want %v", n, size, fused, short(got), short(counts))
			}
		}
	}
	if refused == 0 || refused == 200 {
		t.Fatalf("%d of 200 refused: the sample does not straddle the limit", refused)
	}
	t.Logf("%d of 200 large layouts refused", refused)
}
