package ringhash

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// entryCountsWith replays Envoy's ring walk for per-host entry counts,
// accumulating the targets with acc (rounded or fused multiply-add).
func entryCountsWith(weights []uint32, minSize, maxSize uint64, acc func(target, scale, w float64) float64) []int {
	var sum uint64
	for _, w := range weights {
		sum += uint64(w)
	}
	minW := 1.0
	for _, w := range weights {
		minW = min(minW, float64(w)/float64(sum))
	}
	scale := math.Min(math.Ceil(minW*float64(minSize))/minW, float64(maxSize))
	counts := make([]int, len(weights))
	var current, target float64
	for i, w := range weights {
		target = acc(target, scale, float64(w)/float64(sum))
		for current < target {
			counts[i]++
			current++
		}
	}
	return counts
}

// Envoy rounds scale*w before adding it to the target. A fused
// multiply-add, which Go may emit for x*y+z on arm64 or GOAMD64=v3, shifts
// entries between hosts in some weighted configurations; this finds such
// configurations and checks the ring follows the rounded arithmetic.
func TestRingHashTargetsAreNotFused(t *testing.T) {
	rounded := func(target, scale, w float64) float64 { return target + float64(scale*w) }
	fused := func(target, scale, w float64) float64 { return math.FMA(scale, w, target) }
	rng := rand.New(rand.NewPCG(13, 14))
	found := 0
	for try := 0; try < 20000 && found < 5; try++ {
		weights := make([]uint32, 3+rng.IntN(5))
		for i := range weights {
			weights[i] = uint32(1 + rng.IntN(100))
		}
		minSize := uint64(100 + rng.IntN(2000))
		want := entryCountsWith(weights, minSize, DefaultMaxRingSize, rounded)
		if equalInts(want, entryCountsWith(weights, minSize, DefaultMaxRingSize, fused)) {
			continue
		}
		found++
		eps := make([]Endpoint, len(weights))
		for i, w := range weights {
			eps[i] = Endpoint{Key: "10.0.0." + strconv.Itoa(i+1) + ":80", Weight: w}
		}
		r := mustRingHash(t, eps, RingHashOptions{MinRingSize: minSize})
		assertInts(t, "entries per host (weights "+intsString(weights)+")", entryCounts(r, len(eps)), want)
	}
	if found == 0 {
		t.Fatal("no configuration where fusing changes the ring; the test checks nothing")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func intsString(ws []uint32) string {
	s := ""
	for i, w := range ws {
		if i > 0 {
			s += ","
		}
		s += strconv.Itoa(int(w))
	}
	return s
}
