package ringhash

import (
	"math/bits"
	"slices"
)

// sortedRing is the lookup structure shared by the Envoy ring_hash and
// Skipper dialects: entries sorted by hash, laid out so that a pick touches
// about two cache lines, never binary-searches and has no data-dependent
// branch.
//
// A pick must return the first entry whose hash is >= h, wrapping to entry 0
// (grpc-go balancer/ringhash/ring.go pick, Skipper proxy/consistenthash.go,
// and Envoy's Ketama search in ring_hash_lb.cc all agree on that).
//
// The ring is cut into 2^b buckets by the top b bits of the hash, with about
// one entry per bucket. start(k) is the position of the first entry of
// bucket k, so the answer for h lies in [start(k), start(k+1)] where
// k = h >> (64-b): one index load and a look at about one entry replace
// log2(size) dependent loads.
//
// The index is stored compactly: start(k) = base[k/16] + off[k]. Sixteen
// buckets hold about sixteen entries, so the offsets fit a byte, and the
// index takes 1.25 bytes per bucket instead of 4. Under cache pressure from
// other processes that measured faster, because the index then stays cached
// beside the entries. Only crafted hashes can crowd more than 255 entries
// into a group; such rings keep the plain uint32 index (wide).
//
// Inside a bucket all hashes share their top b bits, so only the low 64-b
// bits need comparing. Each entry is stored as one word, hash << b | owner,
// which compares exactly like the hash against h << b and carries the owner
// in the same cache line. That needs owners to fit in b bits, which the
// builder ensures by never choosing b below the endpoint count's bit length.
type sortedRing struct {
	packed  []uint64 // hash<<b | owner, ascending; ties ordered by owner; then padding
	n       int      // entries, without the findWindow padding entries
	base    []uint32 // base[g] = start(16g)
	off     []uint8  // off[k] = start(k) - base[k/16]; len 2^b + 1
	wide    []uint32 // wide[k] = start(k), only when off cannot hold it
	buckets uint64   // 2^b
	b       uint
	shift   uint   // 64 - b
	mask    uint64 // 1<<b - 1, extracts the owner
	walk    walkInfo
}

// maxIndexBits caps the bucket index at 2^23 buckets (10 MiB) for Envoy's
// largest 8M-entry rings, which then have about one entry per bucket. It is
// also the bit length of the largest endpoint index (maxEndpoints - 1), so
// owners always fit.
const maxIndexBits = 23

// newSortedRing sorts the entries given in build order (hashes[i] owned by
// owners[i]) and builds the bucket index.
//
// The sort is a bucket sort on the same top bits the index uses. Ring hashes
// are XXH64 or MurmurHash2 outputs, so buckets hold about one entry and the
// sort is linear; a crowded bucket, only possible with crafted hashes, falls
// back to pdqsort. Equal hashes are ordered by owner, so the ring is
// deterministic where Envoy's std::sort would be arbitrary.
func newSortedRing(hashes []uint64, owners []uint32, numEndpoints int) sortedRing {
	n := len(hashes)
	b := bits.Len(uint(n)) // 2^b in (n, 2n]: at most one entry per bucket on average
	b = min(b, maxIndexBits)
	b = max(b, bits.Len(uint(numEndpoints-1)), 1)
	shift := uint(64 - b)
	buckets := 1 << b

	// index[k+1] first counts bucket k; the prefix sum turns it into the end
	// of bucket k, and scattering while decrementing those ends leaves
	// index[k+1] at the start of bucket k.
	index := make([]uint32, buckets+1)
	for _, h := range hashes {
		index[(h>>shift)+1]++
	}
	for k := 1; k <= buckets; k++ {
		index[k] += index[k-1]
	}
	packed := make([]uint64, n+findWindow)
	for i, h := range hashes {
		k := (h >> shift) + 1
		index[k]--
		packed[index[k]] = h<<b | uint64(owners[i])
	}
	copy(index, index[1:])
	index[buckets] = uint32(n)

	for k := 0; k < buckets; k++ {
		if lo, hi := index[k], index[k+1]; hi-lo > 1 {
			sortBucket(packed[lo:hi])
		}
	}
	// The padding lets find read a full window at the end of the ring, and
	// repeating the ring's first entries there makes position n mean entry 0.
	for j := 0; j < findWindow; j++ {
		packed[n+j] = packed[j%n]
	}
	r := sortedRing{
		packed:  packed,
		n:       n,
		buckets: uint64(buckets),
		b:       uint(b),
		shift:   shift,
		mask:    1<<b - 1,
	}
	r.base, r.off = compactIndex(index)
	if r.off == nil {
		r.wide = index
	}
	r.walk = newWalkInfo(n, numEndpoints, r.owner)
	return r
}

// sortBucket sorts one bucket. Buckets hold about one entry, so insertion
// sort is the fast path.
func sortBucket(s []uint64) {
	if len(s) > 32 {
		slices.Sort(s)
		return
	}
	for i := 1; i < len(s); i++ {
		v := s[i]
		j := i
		for ; j > 0 && s[j-1] > v; j-- {
			s[j] = s[j-1]
		}
		s[j] = v
	}
}

// findWindow is how many entries find examines without branching. With at
// most one entry per bucket on average, a bucket holds more than four with
// probability below 0.4% (Poisson), and those take the scanning path. Wider
// windows and sparser indexes measured no faster: the extra compares or the
// larger index cost what they save.
const findWindow = 4

// find returns the position of the first entry whose hash is >= h. When h is
// above every entry it returns n, whose padding entry repeats entry 0, so
// owner(find(h)) needs no wrap test; use wrap for the true position.
//
// The position is lo plus the number of bucket entries below h. Counting
// them over a fixed window with borrow bits instead of a loop that exits on
// the first hit avoids the branch mispredictions that would otherwise cost
// more than the memory loads.
func (r *sortedRing) find(h uint64) int {
	k := h >> r.shift
	lo, hi := r.start(k), r.start(k+1)
	cnt := uint64(hi - lo)
	if cnt > findWindow {
		return r.findLong(lo, hi, h)
	}
	t := h << r.b
	w := r.packed[lo : lo+findWindow : lo+findWindow]
	// below is 1 when entry j is below h; in is 1 when j < cnt, which masks
	// out entries of later buckets (their top bits are not in the packed
	// word, so comparing them would be meaningless).
	var c uint64
	for j, x := range w {
		_, below := bits.Sub64(x, t, 0)
		_, in := bits.Sub64(uint64(j), cnt, 0)
		c += below & in
	}
	return int(uint64(lo) + c)
}

// findLong scans a crowded bucket.
func (r *sortedRing) findLong(lo, hi uint32, h uint64) int {
	t := h << r.b
	for j, x := range r.packed[lo:hi] {
		if x >= t {
			return int(lo) + j
		}
	}
	return int(hi)
}

// wrap turns a find result into a ring position.
func (r *sortedRing) wrap(i int) int {
	if i == r.n {
		return 0
	}
	return i
}

// start returns the position of the first entry of bucket k.
func (r *sortedRing) start(k uint64) uint32 {
	if r.wide != nil {
		return r.wide[k]
	}
	return r.base[k>>groupBits] + uint32(r.off[k])
}

// groupBits sets the compact index's group of 2^groupBits buckets.
const groupBits = 4

// compactIndex splits a bucket index into per-group bases and byte offsets,
// or returns nil slices if some offset does not fit a byte.
func compactIndex(index []uint32) ([]uint32, []uint8) {
	buckets := len(index) - 1
	base := make([]uint32, buckets>>groupBits+1)
	off := make([]uint8, len(index))
	for k, v := range index {
		g := k >> groupBits
		if k&(1<<groupBits-1) == 0 {
			base[g] = v
		}
		d := v - base[g]
		if d > 255 {
			return nil, nil
		}
		off[k] = uint8(d)
	}
	return base, off
}

func (r *sortedRing) owner(i int) int { return int(r.packed[i] & r.mask) }

// hash reconstructs the full hash of the entry at position i of bucket k.
func (r *sortedRing) hash(k uint64, i int) uint64 {
	return k<<r.shift | r.packed[i]>>r.b
}

func (r *sortedRing) pick(h uint64) int { return r.owner(r.find(h)) }

// pickAttempt is Envoy's retry rule (ring_hash_lb.cc chooseHost): attempt k
// takes the entry k positions after the first choice, modulo the ring size.
func (r *sortedRing) pickAttempt(h uint64, attempt int) int {
	i := r.wrap(r.find(h))
	if attempt > 0 {
		n := uint64(r.n)
		i = int((uint64(i) + uint64(attempt)%n) % n)
	}
	return r.owner(i)
}

func (r *sortedRing) entries(fn func(hash uint64, endpoint int)) {
	for k := uint64(0); k < r.buckets; k++ {
		for i := int(r.start(k)); i < int(r.start(k+1)); i++ {
			fn(r.hash(k, i), r.owner(i))
		}
	}
}

func (r *sortedRing) walkFrom(h uint64, fn func(endpoint int) bool) {
	r.walk.walk(r.wrap(r.find(h)), r.owner, fn)
}

// walkInfo lets Walk report distinct endpoints without any scratch memory,
// which keeps it allocation-free and safe for any number of concurrent
// walkers. For each position i, prev[i] is the distance back (cyclically) to
// the previous position owned by the same endpoint, or the ring size if the
// endpoint owns only that position. A walk that started p steps before i
// meets i's owner for the first time exactly when prev[i] > p.
type walkInfo struct {
	prev     []uint32
	distinct int // endpoints owning at least one position
}

func newWalkInfo(n, numEndpoints int, owner func(i int) int) walkInfo {
	first := make([]int32, numEndpoints)
	last := make([]int32, numEndpoints)
	for i := range first {
		first[i], last[i] = -1, -1
	}
	prev := make([]uint32, n)
	for i := 0; i < n; i++ {
		o := owner(i)
		if last[o] >= 0 {
			prev[i] = uint32(i - int(last[o]))
		} else {
			first[o] = int32(i)
		}
		last[o] = int32(i)
	}
	distinct := 0
	for o, f := range first {
		if f >= 0 {
			distinct++
			prev[f] = uint32(int(f) + n - int(last[o]))
		}
	}
	return walkInfo{prev: prev, distinct: distinct}
}

// walk visits distinct owners in position order starting at start.
func (w *walkInfo) walk(start int, owner func(i int) int, fn func(endpoint int) bool) {
	n := len(w.prev)
	left := w.distinct
	i := start
	for p := 0; p < n; p++ {
		if int(w.prev[i]) > p {
			if !fn(owner(i)) {
				return
			}
			left--
			if left == 0 {
				return
			}
		}
		i++
		if i == n {
			i = 0
		}
	}
}
