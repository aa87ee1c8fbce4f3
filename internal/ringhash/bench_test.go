package ringhash

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// benchKeys are distinct 16-byte request keys, 1 MiB in all: enough that
// the benchmark sees the cache behaviour of real traffic, not one hot line.
const (
	benchKeyCount = 1 << 16
	benchKeyLen   = 16
)

func benchKeys() []byte {
	rng := rand.New(rand.NewPCG(7, 8))
	keys := make([]byte, benchKeyCount*benchKeyLen)
	seen := make(map[[benchKeyLen]byte]bool, benchKeyCount)
	for i := 0; i < benchKeyCount; {
		var k [benchKeyLen]byte
		for j := range k {
			k[j] = byte('a' + rng.IntN(26))
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		copy(keys[i*benchKeyLen:], k[:])
		i++
	}
	return keys
}

// benchEndpoints returns n Skipper identities http://10.x.y.z:8080 and the
// matching Envoy host keys 10.x.y.z:8080, all of weight 1.
func benchEndpoints(n int) (skipper, envoy []Endpoint) {
	for i := 0; i < n; i++ {
		host := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255+1)
		skipper = append(skipper, Endpoint{Key: SkipperIdentity("http", host, 8080), Weight: 1})
		envoy = append(envoy, Endpoint{Key: host + ":8080", Weight: 1})
	}
	return skipper, envoy
}

// naiveEntry and the two functions below are the usual Go consistent-hash
// ring, as Skipper writes it: fmt.Sprintf per virtual node, sort.Slice, and
// sort.Search per pick. They are the baseline the benchmarks compare with.
type naiveEntry struct {
	hash uint64
	idx  int
}

type naiveRing []naiveEntry

func newNaiveSkipper(eps []Endpoint) naiveRing {
	ring := make(naiveRing, 0, len(eps)*SkipperVnodes)
	for i, ep := range eps {
		for j := 0; j < SkipperVnodes; j++ {
			ring = append(ring, naiveEntry{xxhash.Sum64String(fmt.Sprintf("%s-%d", ep.Key, j)), i})
		}
	}
	sort.Slice(ring, func(a, b int) bool { return ring[a].hash < ring[b].hash })
	return ring
}

func (r naiveRing) Pick(h uint64) int {
	i := sort.Search(len(r), func(i int) bool { return r[i].hash >= h })
	if i == len(r) {
		i = 0
	}
	return r[i].idx
}

// The baseline must be the same ring, or the comparison means nothing.
func TestNaiveBaselineIsSkipperRing(t *testing.T) {
	eps, _ := benchEndpoints(100)
	naive := newNaiveSkipper(eps)
	s := mustSkipper(t, eps)
	i := 0
	s.Entries(func(h uint64, ep int) {
		if naive[i].hash != h || naive[i].idx != ep {
			t.Fatalf("entry %d: naive (%d, %d), ring (%d, %d)", i, naive[i].hash, naive[i].idx, h, ep)
		}
		i++
	})
	keys := benchKeys()
	for k := 0; k < benchKeyCount; k++ {
		h := xxhash.Sum64(keys[k*benchKeyLen : (k+1)*benchKeyLen])
		if naive.Pick(h) != s.Pick(h) {
			t.Fatalf("picks differ at %d", h)
		}
	}
}

var benchSizes = []int{10, 100, 1000}

type picker interface{ Pick(h uint64) int }

// BenchmarkPick measures one request: XXH64 of the next 16-byte key, then a
// pick. All dialects, baseline included, are called through the same
// interface.
func BenchmarkPick(b *testing.B) {
	keys := benchKeys()
	for _, dialect := range []string{"ring_hash", "maglev", "skipper", "baseline"} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/n=%d", dialect, n), func(b *testing.B) {
				skEps, envoyEps := benchEndpoints(n)
				var p picker
				var err error
				switch dialect {
				case "ring_hash":
					size := uint64(100 * n)
					p, err = NewRingHash(envoyEps, RingHashOptions{MinRingSize: size, MaxRingSize: size})
				case "maglev":
					p, err = NewMaglev(envoyEps, 0)
				case "skipper":
					p, err = NewSkipper(skEps)
				case "baseline":
					p = newNaiveSkipper(skEps)
				}
				if err != nil {
					b.Fatal(err)
				}
				sink := 0
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					k := i & (benchKeyCount - 1)
					sink += p.Pick(xxhash.Sum64(keys[k*benchKeyLen : k*benchKeyLen+benchKeyLen]))
					i++
				}
				if sink < 0 {
					b.Fatal("impossible")
				}
			})
		}
	}
}

// BenchmarkBuild measures building each ring from scratch, and the naive
// Skipper build (Sprintf + sort.Slice) for comparison.
func BenchmarkBuild(b *testing.B) {
	for _, dialect := range []string{"ring_hash", "maglev", "skipper", "skipper-naive"} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/n=%d", dialect, n), func(b *testing.B) {
				skEps, envoyEps := benchEndpoints(n)
				size := uint64(100 * n)
				b.ReportAllocs()
				for b.Loop() {
					var err error
					switch dialect {
					case "ring_hash":
						_, err = NewRingHash(envoyEps, RingHashOptions{MinRingSize: size, MaxRingSize: size})
					case "maglev":
						_, err = NewMaglev(envoyEps, 0)
					case "skipper":
						_, err = NewSkipper(skEps)
					case "skipper-naive":
						_ = newNaiveSkipper(skEps)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkWalk measures the bounded-load pattern: a pick plus the next two
// distinct endpoints clockwise, with n = 1000.
func BenchmarkWalk(b *testing.B) {
	keys := benchKeys()
	skEps, envoyEps := benchEndpoints(1000)
	size := uint64(100 * len(envoyEps))
	rh, err := NewRingHash(envoyEps, RingHashOptions{MinRingSize: size, MaxRingSize: size})
	if err != nil {
		b.Fatal(err)
	}
	mg, err := NewMaglev(envoyEps, 0)
	if err != nil {
		b.Fatal(err)
	}
	sk, err := NewSkipper(skEps)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range []Ring{rh, mg, sk} {
		b.Run(r.Policy()+"/n=1000", func(b *testing.B) {
			sink, seen := 0, 0
			visit := func(ep int) bool { sink += ep; seen++; return seen%3 != 0 }
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				k := i & (benchKeyCount - 1)
				r.Walk(xxhash.Sum64(keys[k*benchKeyLen:k*benchKeyLen+benchKeyLen]), visit)
				i++
			}
			if sink < 0 {
				b.Fatal("impossible")
			}
		})
	}
}
