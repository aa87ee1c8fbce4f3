package ringhash

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// Shares must match the fraction of random request hashes each endpoint
// receives, on every dialect, and sum to 1.
func TestSharesMatchPicks(t *testing.T) {
	eps := []Endpoint{{Key: "10.0.0.1:80", Weight: 1}, {Key: "10.0.0.2:80", Weight: 7}, {Key: "10.0.0.3:80", Weight: 2}}
	rh, err := NewRingHash(eps, RingHashOptions{MinRingSize: 1024, MaxRingSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	mg, err := NewMaglev(eps, 65537)
	if err != nil {
		t.Fatal(err)
	}
	var sk []Endpoint
	for _, ep := range eps {
		sk = append(sk, Endpoint{Key: "http://" + ep.Key})
	}
	skipper, err := NewSkipper(sk)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, r := range []Ring{rh, mg, skipper} {
		shares := Shares(r)
		counts := make([]float64, len(shares))
		const n = 200000
		for range n {
			counts[r.Pick(rng.Uint64())]++
		}
		sum := 0.0
		for i, s := range shares {
			sum += s
			if math.Abs(s-counts[i]/n) > 0.01 {
				t.Errorf("%s endpoint %d: share %.4f, picks %.4f", r.Policy(), i, s, counts[i]/n)
			}
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("%s: shares sum to %v", r.Policy(), sum)
		}
		t.Logf("%s shares %s", r.Policy(), fmt.Sprintf("%.3f", shares))
	}
}
