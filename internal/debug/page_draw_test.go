package debug

import (
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/ringxds/ringxds/internal/ringhash"
)

func testEndpoints(n int) []ringhash.Endpoint {
	eps := make([]ringhash.Endpoint, n)
	for i := range eps {
		eps[i] = ringhash.Endpoint{Key: "10.0.0." + strconv.Itoa(i+1) + ":8080", Weight: 1}
	}
	return eps
}

// checkCover asserts that segments tile one turn of the hash space: each
// starts where the previous ended, and together they span exactly 1.
func checkCover(t *testing.T, segs []segment) {
	t.Helper()
	if len(segs) == 0 {
		t.Fatal("no segments")
	}
	for i := 1; i < len(segs); i++ {
		if segs[i].start != segs[i-1].end {
			t.Fatalf("segment %d starts at %v, previous ends at %v", i, segs[i].start, segs[i-1].end)
		}
		if segs[i].owner == segs[i-1].owner {
			t.Fatalf("segments %d and %d have the same owner %d and were not merged", i-1, i, segs[i].owner)
		}
	}
	if span := segs[len(segs)-1].end - segs[0].start; math.Abs(span-1) > 1e-9 {
		t.Fatalf("segments span %v, want 1", span)
	}
}

// ownerAt finds the segment holding fraction f in [0, 1): the first whose
// end is at or past f, or the first segment, whose arc may wrap past zero.
func ownerAt(segs []segment, f float64) int {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].end >= f })
	if i == len(segs) {
		i = 0
	}
	return segs[i].owner
}

// The drawing must say what the ring does: the arc a hash falls in belongs
// to the endpoint the ring picks for it.
func TestRingArcsAgreeWithPicks(t *testing.T) {
	for _, tc := range []struct {
		name string
		ring func(eps []ringhash.Endpoint) (ringhash.Ring, error)
	}{
		{"ring_hash", func(eps []ringhash.Endpoint) (ringhash.Ring, error) {
			return ringhash.NewRingHash(eps, ringhash.RingHashOptions{MinRingSize: 1024, MaxRingSize: 1024})
		}},
		{"skipper", func(eps []ringhash.Endpoint) (ringhash.Ring, error) { return ringhash.NewSkipper(eps) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eps := testEndpoints(5)
			r, err := tc.ring(eps)
			if err != nil {
				t.Fatal(err)
			}
			shares := make([]float64, len(eps))
			segs := ringSegments(r.(ringhash.Drawable), r.Size(), shares)
			checkCover(t, segs)
			if segs[0].owner == segs[len(segs)-1].owner {
				t.Fatal("the arcs meeting at zero share an owner but were not merged")
			}
			var sum float64
			for _, s := range shares {
				sum += s
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Fatalf("shares sum to %v", sum)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for range 20000 {
				h := rng.Uint64()
				if got, want := ownerAt(segs, float64(h)/(1<<64)), r.Pick(h); got != want {
					t.Fatalf("hash %d: drawn in the arc of endpoint %d, ring picks %d", h, got, want)
				}
			}
		})
	}
}

func TestMaglevRunsAgreeWithPicks(t *testing.T) {
	eps := testEndpoints(3)
	m, err := ringhash.NewMaglev(eps, 65537)
	if err != nil {
		t.Fatal(err)
	}
	shares := make([]float64, len(eps))
	segs := tableSegments(m, m.Size(), shares)
	checkCover(t, segs)
	if segs[0].start != 0 {
		t.Fatalf("table starts at %v", segs[0].start)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		h := rng.Uint64()
		f := (float64(h%65537) + 0.5) / 65537
		if got, want := ownerAt(segs, f), m.Pick(h); got != want {
			t.Fatalf("hash %d: drawn in the run of endpoint %d, table picks %d", h, got, want)
		}
	}
	for i, s := range shares {
		if math.Abs(s-1.0/3) > 0.001 {
			t.Errorf("endpoint %d owns %v of the table, want about 1/3", i, s)
		}
	}
}

// A table too fine to draw is binned: few segments, still one turn, and
// each bin goes to the endpoint that owns most of it.
func TestBinnedDrawing(t *testing.T) {
	eps := testEndpoints(3)
	m, err := ringhash.NewMaglev(eps, 65537)
	if err != nil {
		t.Fatal(err)
	}
	d := draw(m, len(eps))
	if !d.Binned || d.Segments <= maxSegments {
		t.Fatalf("a 65537-slot table of 3 endpoints was drawn with %d segments, binned=%v", d.Segments, d.Binned)
	}
	for i, p := range d.Paths {
		if n := strings.Count(p, "M"); n == 0 || n > drawBins {
			t.Errorf("endpoint %d: %d runs drawn", i, n)
		}
	}

	// Two endpoints, the first owning the first 70% of the space in small
	// alternating arcs weighted 3:1, the second the rest outright.
	var segs []segment
	for i := range 7000 {
		f := float64(i) / 10000
		segs = append(segs, segment{start: f, end: f + 0.000075, owner: 0}, segment{start: f + 0.000075, end: f + 0.0001, owner: 1})
	}
	segs = append(segs, segment{start: 0.7, end: 1, owner: 1})
	binned := binSegments(segs, 100)
	checkCover(t, binned)
	if len(binned) != 2 || binned[0].owner != 0 || math.Abs(binned[0].end-0.7) > 1e-9 {
		t.Fatalf("binned to %+v, want endpoint 0 on [0, 0.7) and endpoint 1 on the rest", binned)
	}
}

func TestArcPathsAreWellFormed(t *testing.T) {
	// A single endpoint owns the whole circle, which SVG can only draw as
	// two arcs.
	r, err := ringhash.NewRingHash(testEndpoints(1), ringhash.RingHashOptions{MinRingSize: 8, MaxRingSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	d := draw(r, 1)
	if got := strings.Count(d.Paths[0], "Z"); got != 2 {
		t.Fatalf("whole ring drawn with %d arcs: %s", got, d.Paths[0])
	}
	if math.Abs(d.Shares[0]-1) > 1e-12 {
		t.Fatalf("share %v, want 1", d.Shares[0])
	}
	if strings.Contains(d.Paths[0], "NaN") || strings.Contains(d.Paths[0], "e") {
		t.Fatalf("bad numbers in path: %s", d.Paths[0])
	}
}

func TestEndpointColors(t *testing.T) {
	seen := map[string]bool{}
	for i := range 64 {
		c := endpointColor(i)
		if len(c) != 7 || c[0] != '#' || strings.Trim(c[1:], "0123456789abcdef") != "" {
			t.Fatalf("endpoint %d: colour %q is not #rrggbb", i, c)
		}
		if i < 20 && seen[c] {
			t.Fatalf("endpoint %d repeats colour %s", i, c)
		}
		seen[c] = true
	}
	if got := hslHex(0, 1, 0.5); got != "#ff0000" {
		t.Fatalf("hslHex(0,1,.5) = %s", got)
	}
}
