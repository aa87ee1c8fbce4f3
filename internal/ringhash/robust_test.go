package ringhash

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// Random endpoint sets and options either build a ring whose every pick,
// retry and walk names a real endpoint, or fail with an error; none panics.
func TestRandomInputsBuildOrFailCleanly(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	sizes := []uint64{0, 1, 2, 3, 7, 17, 64, 1000, 65537, 4096, 9}
	built := map[string]int{}
	for iter := 0; iter < 300; iter++ {
		n := rng.IntN(40)
		eps := make([]Endpoint, n)
		unweighted := make([]Endpoint, n)
		for i := range eps {
			// Mostly valid: rare duplicate keys and zero weights.
			key := "k" + strconv.Itoa(rng.IntN(5000))
			w := uint32(1 + rng.IntN(4))
			if rng.IntN(100) == 0 {
				w = 0
			}
			eps[i] = Endpoint{Key: key, Weight: w}
			unweighted[i] = Endpoint{Key: key, Weight: uint32(rng.IntN(2))}
		}
		opts := RingHashOptions{
			MinRingSize: sizes[rng.IntN(len(sizes))],
			MaxRingSize: sizes[rng.IntN(len(sizes))],
			Hash:        HashFunction(rng.IntN(3)),
			SortByKey:   rng.IntN(2) == 0,
		}
		var rings []Ring
		if r, err := NewRingHash(eps, opts); err == nil {
			rings = append(rings, r)
		}
		if r, err := NewMaglev(eps, sizes[rng.IntN(len(sizes))]); err == nil {
			rings = append(rings, r)
		}
		if r, err := NewSkipper(unweighted); err == nil {
			rings = append(rings, r)
		}
		for _, r := range rings {
			built[r.Policy()]++
			if r.NumEndpoints() != n || r.Size() < 1 {
				t.Fatalf("%s: NumEndpoints %d (want %d), Size %d", r.Policy(), r.NumEndpoints(), n, r.Size())
			}
			for j := 0; j < 50; j++ {
				h := rng.Uint64()
				for _, ep := range []int{r.Pick(h), r.PickAttempt(h, rng.IntN(2*r.Size()))} {
					if ep < 0 || ep >= n {
						t.Fatalf("%s: picked %d of %d endpoints", r.Policy(), ep, n)
					}
				}
				r.Walk(h, func(ep int) bool {
					if ep < 0 || ep >= n {
						t.Fatalf("%s: walked to %d of %d endpoints", r.Policy(), ep, n)
					}
					return true
				})
			}
		}
	}
	for _, p := range []string{PolicyRingHash, PolicyMaglev, PolicySkipper} {
		if built[p] < 30 {
			t.Errorf("only %d random %s rings built; the test exercises too little", built[p], p)
		}
	}
}
