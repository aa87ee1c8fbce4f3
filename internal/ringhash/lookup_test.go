package ringhash

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
)

// refFind is the textbook lookup every dialect documents: the first entry
// with hash >= h, wrapping to 0.
func refFind(hashes []uint64, h uint64) int {
	i := sort.Search(len(hashes), func(i int) bool { return hashes[i] >= h })
	if i == len(hashes) {
		return 0
	}
	return i
}

// ringInputs are (hash, owner) sets that stress the bucket index: uniform,
// clustered into one bucket (crowded-bucket fallback), heavy duplicates,
// the extremes of the hash space and tiny rings.
func ringInputs(rng *rand.Rand) map[string][]uint64 {
	in := map[string][]uint64{}
	u := make([]uint64, 5000)
	for i := range u {
		u[i] = rng.Uint64()
	}
	in["uniform"] = u
	c := make([]uint64, 3000)
	for i := range c {
		c[i] = 0x7000_0000_0000_0000 | rng.Uint64()>>20
	}
	in["clustered"] = c
	d := make([]uint64, 2000)
	for i := range d {
		d[i] = uint64(rng.IntN(50)) << 58
	}
	in["duplicates"] = d
	in["extremes"] = []uint64{math.MaxUint64, 0, math.MaxUint64, 1, math.MaxUint64 - 1, 0}
	in["single"] = []uint64{12345}
	in["two"] = []uint64{math.MaxUint64, math.MaxUint64}
	return in
}

func TestSortedRingMatchesBinarySearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for name, hashes := range ringInputs(rng) {
		t.Run(name, func(t *testing.T) {
			const endpoints = 7
			owners := make([]uint32, len(hashes))
			for i := range owners {
				owners[i] = uint32(i % endpoints)
			}
			// Reference: sorted by hash, ties by owner.
			type pair struct {
				h uint64
				o uint32
			}
			ref := make([]pair, len(hashes))
			for i := range hashes {
				ref[i] = pair{hashes[i], owners[i]}
			}
			slices.SortFunc(ref, func(a, b pair) int {
				if c := cmp.Compare(a.h, b.h); c != 0 {
					return c
				}
				return cmp.Compare(a.o, b.o)
			})
			refHashes := make([]uint64, len(ref))
			for i, p := range ref {
				refHashes[i] = p.h
			}

			r := newSortedRing(slices.Clone(hashes), slices.Clone(owners), endpoints)
			// Both index forms must be exercised: 3000 entries in one
			// bucket overflow the byte offsets, uniform hashes never do.
			if wide := r.wide != nil; wide != (name == "clustered") {
				t.Fatalf("wide index = %v", wide)
			}
			i := 0
			r.entries(func(h uint64, o int) {
				if h != ref[i].h || o != int(ref[i].o) {
					t.Fatalf("entry %d = (%d, %d), want (%d, %d)", i, h, o, ref[i].h, ref[i].o)
				}
				i++
			})
			if i != len(ref) {
				t.Fatalf("%d entries, want %d", i, len(ref))
			}
			probe := []uint64{0, 1, math.MaxUint64, math.MaxUint64 - 1}
			for _, h := range hashes {
				probe = append(probe, h, h-1, h+1)
			}
			for i := 0; i < 20000; i++ {
				probe = append(probe, rng.Uint64())
			}
			for _, h := range probe {
				if got, want := r.wrap(r.find(h)), refFind(refHashes, h); got != want {
					t.Fatalf("find(%d) = %d, want %d", h, got, want)
				}
			}
		})
	}
}

// walkRef is Walk written the obvious way, with a seen set.
func walkRef(owners []int, start int) []int {
	seen := map[int]bool{}
	var out []int
	for p := 0; p < len(owners); p++ {
		o := owners[(start+p)%len(owners)]
		if !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	return out
}

func testRings(t testing.TB) []Ring {
	var eps []Endpoint
	for i := 0; i < 150; i++ {
		eps = append(eps, Endpoint{Key: "http://10.1." + itoa(i/250) + "." + itoa(i%250) + ":8080", Weight: uint32(1 + i%3)})
	}
	rh, err := NewRingHash(eps, RingHashOptions{MinRingSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	// A ring smaller than the endpoint count leaves some without entries.
	small, err := NewRingHash(eps, RingHashOptions{MinRingSize: 64, MaxRingSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	mg, err := NewMaglev(eps, 1009)
	if err != nil {
		t.Fatal(err)
	}
	for i := range eps {
		eps[i].Weight = 1
	}
	sk, err := NewSkipper(eps)
	if err != nil {
		t.Fatal(err)
	}
	return []Ring{rh, small, mg, sk}
}

// ownersOf lists the owner of each ring position and the textbook start
// position of a hash.
func ownersOf(r Ring) ([]int, func(h uint64) int) {
	var owners []int
	r.(Drawable).Entries(func(_ uint64, ep int) { owners = append(owners, ep) })
	if m, ok := r.(*Maglev); ok {
		return owners, func(h uint64) int { return int(h % m.size) }
	}
	var hashes []uint64
	r.(Drawable).Entries(func(h uint64, _ int) { hashes = append(hashes, h) })
	return owners, func(h uint64) int { return refFind(hashes, h) }
}

func TestWalkVisitsDistinctEndpointsInRingOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, r := range testRings(t) {
		owners, find := ownersOf(r)
		for i := 0; i < 300; i++ {
			h := rng.Uint64()
			var got []int
			r.Walk(h, func(ep int) bool { got = append(got, ep); return true })
			want := walkRef(owners, find(h))
			if !slices.Equal(got, want) {
				t.Fatalf("%s size %d: Walk(%d) = %v, want %v", r.Policy(), r.Size(), h, got, want)
			}
			if got[0] != r.Pick(h) {
				t.Fatalf("%s: Walk starts at %d, Pick is %d", r.Policy(), got[0], r.Pick(h))
			}
			// Stopping early stops the walk.
			n := 0
			r.Walk(h, func(int) bool { n++; return n < 3 })
			if n != 3 {
				t.Fatalf("%s: walk continued after fn returned false (%d calls)", r.Policy(), n)
			}
		}
	}
}

// Picks, retries and walks allocate nothing: they run on every request.
func TestPickWalkZeroAllocs(t *testing.T) {
	for _, r := range testRings(t) {
		h := uint64(0x9e3779b97f4a7c15)
		sink := 0
		visit := func(ep int) bool { sink += ep; return true }
		if a := testing.AllocsPerRun(100, func() { h += 0x9e3779b97f4a7c15; sink += r.Pick(h) }); a != 0 {
			t.Errorf("%s Pick: %v allocs", r.Policy(), a)
		}
		if a := testing.AllocsPerRun(100, func() { h += 0x9e3779b97f4a7c15; sink += r.PickAttempt(h, 2) }); a != 0 {
			t.Errorf("%s PickAttempt: %v allocs", r.Policy(), a)
		}
		if a := testing.AllocsPerRun(100, func() { h += 0x9e3779b97f4a7c15; r.Walk(h, visit) }); a != 0 {
			t.Errorf("%s Walk: %v allocs", r.Policy(), a)
		}
		if s, ok := r.(*Skipper); ok {
			excl := func(ep int) bool { return ep%2 == 0 }
			if a := testing.AllocsPerRun(100, func() { h += 0x9e3779b97f4a7c15; sink += s.PickExcluding(h, excl) }); a != 0 {
				t.Errorf("skipper PickExcluding: %v allocs", a)
			}
		}
		_ = sink
	}
}

// Rings are read-only after build: parallel readers (run with -race) see
// the same answers a single reader does.
func TestConcurrentReaders(t *testing.T) {
	rings := testRings(t)
	const probes = 2000
	want := make([][]int, len(rings))
	for i, r := range rings {
		for p := uint64(0); p < probes; p++ {
			want[i] = append(want[i], r.PickAttempt(p*0x9e3779b97f4a7c15, int(p%3)))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8*len(rings))
	for g := 0; g < 8; g++ {
		for i, r := range rings {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for p := uint64(0); p < probes; p++ {
					h := p * 0x9e3779b97f4a7c15
					if got := r.PickAttempt(h, int(p%3)); got != want[i][p] {
						errs <- r.Policy() + ": concurrent pick differs"
						return
					}
					n := 0
					r.Walk(h, func(int) bool { n++; return n < 5 })
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestNegativeAttemptIsFirstTry(t *testing.T) {
	for _, r := range testRings(t) {
		for h := uint64(1); h < 1<<62; h *= 3 {
			if r.PickAttempt(h, -1) != r.Pick(h) || r.PickAttempt(h, math.MinInt) != r.Pick(h) {
				t.Fatalf("%s: negative attempt differs from Pick at %d", r.Policy(), h)
			}
		}
		if got := r.PickAttempt(7, math.MaxInt); got < 0 || got >= r.NumEndpoints() {
			t.Fatalf("%s: huge attempt picked %d", r.Policy(), got)
		}
	}
}
