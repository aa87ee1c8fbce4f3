package fadein

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// What any weight ramp on Envoy's ring must give up for 100% precision.
//
// A step of a weight ramp in which old endpoints keep their entries is the
// final ring with some entries of the new endpoints missing, each new
// endpoint holding a prefix key_0 .. key_{c-1} of its entries. A key whose
// final entry f is missing goes to the next entry that is in. That is an
// old endpoint's (its owner before the scale-up: fine), an entry of f's own
// endpoint (fine), or an entry g of another new endpoint: a key g's
// endpoint warms and hands over later. Walking back from g, the first
// entry not of g's endpoint is then missing, so the step is 100% precise
// exactly when its entries are closed under two dependencies:
//
//   - index: key_j needs key_{j-1} (Envoy and grpc-go hand out prefixes);
//   - gap: an entry needs the nearest entry before it that is not its own
//     endpoint's, when that one is new.
//
// TestPrecisionIsClosureUnderIndexAndGapOrder checks the equivalence on
// random rings. Entries on a cycle of dependencies can only come in at the
// same step, so the largest strongly connected component is a lower bound
// on the largest step of any 100%-precise weight ramp, whatever its order
// or timing (BenchmarkPreciseRampBound).

// boundEntry is one entry of the final ring.
type boundEntry struct {
	pos     uint64
	ep, idx int
}

// precisionDeps is the final ring of eps, where the endpoints from first on
// are new, and the dependencies among the new entries: deps[id] lists the
// entries entry id needs, with id = base[ep-first] + idx.
type precisionDeps struct {
	ring  []boundEntry
	first int
	base  []int
	deps  [][]int
	arc   []uint64 // keys each new entry owns in the final ring
}

func newPrecisionDeps(keys []string, final []uint64, first int) precisionDeps {
	d := precisionDeps{first: first, base: make([]int, len(keys)-first+1)}
	var hashes []uint64
	for ep, key := range keys {
		hashes = ringhash.XXHash.AppendEntryHashes(hashes[:0], key, final[ep])
		for idx, h := range hashes {
			d.ring = append(d.ring, boundEntry{h, ep, idx})
		}
		if ep >= first {
			d.base[ep-first+1] = d.base[ep-first] + int(final[ep])
		}
	}
	slices.SortFunc(d.ring, func(a, b boundEntry) int { return cmp.Compare(a.pos, b.pos) })
	n := d.base[len(d.base)-1]
	d.deps, d.arc = make([][]int, n), make([]uint64, n)
	for i, e := range d.ring {
		if e.ep < first {
			continue
		}
		id := d.id(e)
		d.arc[id] = e.pos - d.ring[(i+len(d.ring)-1)%len(d.ring)].pos // wraps for the first
		if e.idx > 0 {
			d.deps[id] = append(d.deps[id], id-1)
		}
		for k := 1; k < len(d.ring); k++ {
			c := d.ring[(i-k+len(d.ring))%len(d.ring)]
			if c.ep == e.ep {
				continue
			}
			if c.ep >= first {
				d.deps[id] = append(d.deps[id], d.id(c))
			}
			break
		}
	}
	return d
}

func (d precisionDeps) id(e boundEntry) int { return d.base[e.ep-d.first] + e.idx }

func (d precisionDeps) in(e boundEntry, counts []uint64) bool {
	return e.ep < d.first || uint64(e.idx) < counts[e.ep]
}

// closed reports whether the step where endpoint i holds counts[i] entries
// meets every dependency.
func (d precisionDeps) closed(counts []uint64) bool {
	for _, e := range d.ring {
		if e.ep < d.first || !d.in(e, counts) {
			continue
		}
		for _, w := range d.deps[d.id(e)] {
			if !d.inID(w, counts) {
				return false
			}
		}
	}
	return true
}

func (d precisionDeps) inID(id int, counts []uint64) bool {
	ep := d.first + slotOf(d.base, id)
	return uint64(id-d.base[ep-d.first]) < counts[ep]
}

// slotOf returns the index i with base[i] <= id < base[i+1]: the new
// endpoint, counted from first, that entry id belongs to.
func slotOf(base []int, id int) int {
	i, _ := slices.BinarySearch(base, id+1)
	return i - 1
}

// precise reports, by looking at every key range of the final ring, whether
// no new endpoint holds a key at the step that it does not own at the end.
// Ownership is constant on each final entry's range, since the step's ring
// is a subset of the final one.
func (d precisionDeps) precise(counts []uint64) bool {
	n := len(d.ring)
	next := -1 // index of the first entry in, at or after i
	for k := 2*n - 1; k >= 0; k-- {
		if d.in(d.ring[k%n], counts) {
			next = k % n
		}
		if k < n && next >= 0 {
			g := d.ring[next]
			if g.ep >= d.first && g.ep != d.ring[k].ep {
				return false
			}
		}
	}
	return true
}

// closure raises counts until they are closed.
func (d precisionDeps) closure(counts []uint64) {
	for changed := true; changed; {
		changed = false
		for _, e := range d.ring {
			if e.ep < d.first || !d.in(e, counts) {
				continue
			}
			for _, w := range d.deps[d.id(e)] {
				if !d.inID(w, counts) {
					ep := d.first + slotOf(d.base, w)
					counts[ep], changed = uint64(w-d.base[ep-d.first])+1, true
				}
			}
		}
	}
}

func TestPrecisionIsClosureUnderIndexAndGapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	var precise, imprecise int
	for scenario := range 60 {
		old, add := 5+rng.IntN(60), 2+rng.IntN(20)
		k := uint64(1 + rng.IntN(24))
		keys := make([]string, old+add)
		final := make([]uint64, old+add)
		for i := range keys {
			keys[i] = fmt.Sprintf("10.%d.%d.%d:80", scenario, i/250, i%250)
			final[i] = k
		}
		d := newPrecisionDeps(keys, final, old)
		for range 50 {
			counts := slices.Clone(final)
			for i := old; i < len(counts); i++ {
				counts[i] = rng.Uint64N(k + 1)
			}
			if rng.IntN(2) == 0 {
				d.closure(counts)
			}
			c, p := d.closed(counts), d.precise(counts)
			if c != p {
				t.Fatalf("scenario %d (%d+%d endpoints, %d entries each), counts %v: closed %v, precise %v", scenario, old, add, k, counts[old:], c, p)
			}
			if p {
				precise++
			} else {
				imprecise++
			}
		}
	}
	// Both sides of the equivalence must have been seen, or the test shows
	// nothing.
	if precise < 100 || imprecise < 100 {
		t.Fatalf("only %d precise and %d imprecise steps", precise, imprecise)
	}
}

// sccBound returns the largest strongly connected component of the
// dependencies as a share of the keys the new endpoints own at the end,
// and the largest share of one new endpoint's keys inside one component.
func (d precisionDeps) sccBound() (batch, endpoint float64) {
	n := len(d.deps)
	// Tarjan's algorithm, iterative: rings of a few thousand entries chain
	// deeply.
	index, low := make([]int, n), make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	next := 0
	epKeys := map[int]float64{}
	var total float64
	for id := range n {
		ep := d.first + slotOf(d.base, id)
		epKeys[ep] += float64(d.arc[id])
		total += float64(d.arc[id])
	}
	type frame struct{ v, edge int }
	for root := range n {
		if index[root] >= 0 {
			continue
		}
		call := []frame{{root, 0}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			if f.edge < len(d.deps[f.v]) {
				w := d.deps[f.v][f.edge]
				f.edge++
				switch {
				case index[w] < 0:
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					call = append(call, frame{w, 0})
				case onStack[w]:
					low[f.v] = min(low[f.v], index[w])
				}
				continue
			}
			v := f.v
			call = call[:len(call)-1]
			if len(call) > 0 {
				p := call[len(call)-1].v
				low[p] = min(low[p], low[v])
			}
			if low[v] != index[v] {
				continue
			}
			var keys float64
			per := map[int]float64{}
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				keys += float64(d.arc[w])
				per[d.first+slotOf(d.base, w)] += float64(d.arc[w])
				if w == v {
					break
				}
			}
			batch = max(batch, keys/total)
			for ep, k := range per {
				endpoint = max(endpoint, k/epKeys[ep])
			}
		}
	}
	return batch, endpoint
}

func TestSCCBoundOfOneEndpointIsOneEntry(t *testing.T) {
	// One new endpoint has no gap dependencies: every entry is its own
	// component, so the bound is its largest entry, far below the batch.
	keys := make([]string, 11)
	final := make([]uint64, 11)
	for i := range keys {
		keys[i], final[i] = fmt.Sprintf("10.0.0.%d:8080", i+1), 256
	}
	d := newPrecisionDeps(keys, final, 10)
	batch, endpoint := d.sccBound()
	var largest uint64
	var total float64
	for _, a := range d.arc {
		largest = max(largest, a)
		total += float64(a)
	}
	if want := float64(largest) / total; batch != want || endpoint != want {
		t.Fatalf("bound %.4f / %.4f, want the largest entry %.4f", batch, endpoint, want)
	}
}

// firstStepShare is the share of the new endpoints' keys in the smallest
// precise step in which every new endpoint holds its entry 0: what a
// precise ramp must show at its first step if each new endpoint is to be
// in the ring from its start.
func (d precisionDeps) firstStepShare() float64 {
	counts := make([]uint64, d.first+len(d.base)-1)
	for ep := d.first; ep < len(counts); ep++ {
		counts[ep] = 1
	}
	d.closure(counts)
	var in, total float64
	for _, e := range d.ring {
		if e.ep >= d.first {
			total += float64(d.arc[d.id(e)])
			if d.in(e, counts) {
				in += float64(d.arc[d.id(e)])
			}
		}
	}
	return in / total
}

// BenchmarkPreciseRampBound reports, for simultaneous scale-ups laid out as
// in the fade simulation, the share of the new endpoints' keys that any
// 100%-precise weight ramp must bring in at one step (scc_pp), and the same
// for the worst single endpoint's own keys (pod_scc_pp), and what the first
// step must show if every new endpoint holds an entry from its start
// (entry0_closure_pp). The curve's own largest step is 8.1 points.
func BenchmarkPreciseRampBound(b *testing.B) {
	for _, sc := range []simSpec{
		{old: 10, add: 1},
		{old: 10, add: 2},
		{old: 100, add: 1},
		{old: 100, add: 10},
		{old: 100, add: 50, capacity: 256},
		{old: 1000, add: 10},
		{old: 1000, add: 100},
	} {
		b.Run(sc.name(), func(b *testing.B) {
			n := sc.old + sc.add
			k, _ := LayoutEntriesPerWeight(uint64(n), 4096, sc.capacity)
			keys := make([]string, n)
			final := make([]uint64, n)
			for i, ep := range simEndpoints(n, 1) {
				keys[i], final[i] = ep.Key, k
			}
			var batch, endpoint float64
			var d precisionDeps
			for b.Loop() {
				d = newPrecisionDeps(keys, final, sc.old)
				batch, endpoint = d.sccBound()
			}
			b.ReportMetric(float64(k), "entries/endpoint")
			b.ReportMetric(100*batch, "scc_pp")
			b.ReportMetric(100*endpoint, "pod_scc_pp")
			b.ReportMetric(100*d.firstStepShare(), "entry0_closure_pp")
		})
	}
}
