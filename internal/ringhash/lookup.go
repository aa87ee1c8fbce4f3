package ringhash

import (
	"cmp"
	"math/bits"
	"slices"
)

// sortedRing is the lookup structure shared by the Envoy ring_hash and
// Skipper dialects: entries sorted by hash, plus two derived arrays that make
// picks and walks cheap without changing which entry a pick returns.
//
// A pick must return the first entry whose hash is >= h, wrapping to entry 0
// (grpc-go balancer/ringhash/ring.go pick, Skipper proxy/consistenthash.go,
// and Envoy's Ketama search in ring_hash_lb.cc all agree on that). Instead of
// a binary search, index[b] holds the first entry whose hash is >= b<<shift,
// for each of the 2^bits buckets of the top hash bits. The answer for h then
// lies in [index[b], index[b+1]] with b = h>>shift, and with about one entry
// per bucket a pick is one index load, a scan of about one hash and one
// owner load, instead of log2(size) dependent loads.
type sortedRing struct {
	hashes []uint64 // ascending; ties keep build order
	owners []uint32 // endpoint index of each entry
	index  []uint32 // len 2^bits + 1; index[2^bits] == len(hashes)
	shift  uint     // 64 - bits
	walk   walkInfo
}

// maxIndexBits caps the bucket index at 2^23 buckets (32 MiB of uint32)
// for Envoy's largest 8M-entry rings; smaller rings get about one bucket
// per entry.
const maxIndexBits = 23

// newSortedRing sorts the (hash, owner) pairs given in build order and builds
// the bucket index. It takes ownership of both slices.
//
// The sort is a bucket sort on the same top bits the index uses: ring hashes
// are XXH64 or MurmurHash2 outputs, so buckets hold about one entry and the
// sort is linear. Ties keep build order, so the result is deterministic even
// for the (astronomically rare) equal hashes that Envoy's std::sort would
// order arbitrarily.
func newSortedRing(hashes []uint64, owners []uint32, numEndpoints int) sortedRing {
	n := len(hashes)
	b := bits.Len(uint(n))
	b = max(1, min(b, maxIndexBits))
	shift := uint(64 - b)
	buckets := 1 << b

	// index[k+1] counts bucket k; the prefix sum turns it into the end of
	// bucket k. Scattering in reverse while decrementing those ends leaves
	// each element in a stable position and index[k+1] at the start of k.
	index := make([]uint32, buckets+1)
	for _, h := range hashes {
		index[(h>>shift)+1]++
	}
	for k := 1; k <= buckets; k++ {
		index[k] += index[k-1]
	}
	sh := make([]uint64, n)
	so := make([]uint32, n)
	for i := n - 1; i >= 0; i-- {
		k := (hashes[i] >> shift) + 1
		index[k]--
		p := index[k]
		sh[p] = hashes[i]
		so[p] = owners[i]
	}
	copy(index, index[1:])
	index[buckets] = uint32(n)

	for k := 0; k < buckets; k++ {
		lo, hi := int(index[k]), int(index[k+1])
		if hi-lo > 1 {
			sortBucket(sh[lo:hi], so[lo:hi])
		}
	}
	return sortedRing{
		hashes: sh,
		owners: so,
		index:  index,
		shift:  shift,
		walk:   newWalkInfo(so, numEndpoints),
	}
}

// sortBucket stably sorts one bucket by hash. Buckets hold about one entry,
// so insertion sort is the fast path; a crowded bucket (only possible with
// adversarial hashes) falls back to an O(n log n) stable sort.
func sortBucket(hs []uint64, os []uint32) {
	if len(hs) <= 32 {
		for i := 1; i < len(hs); i++ {
			h, o := hs[i], os[i]
			j := i
			for ; j > 0 && hs[j-1] > h; j-- {
				hs[j], os[j] = hs[j-1], os[j-1]
			}
			hs[j], os[j] = h, o
		}
		return
	}
	type pair struct {
		h uint64
		o uint32
	}
	ps := make([]pair, len(hs))
	for i := range hs {
		ps[i] = pair{hs[i], os[i]}
	}
	slices.SortStableFunc(ps, func(a, b pair) int { return cmp.Compare(a.h, b.h) })
	for i, p := range ps {
		hs[i], os[i] = p.h, p.o
	}
}

// find returns the position of the first entry whose hash is >= h, wrapping
// to 0 when h is above every entry.
func (r *sortedRing) find(h uint64) int {
	k := h >> r.shift
	lo, hi := r.index[k], r.index[k+1]
	for j, x := range r.hashes[lo:hi] {
		if x >= h {
			return int(lo) + j
		}
	}
	// Every entry of bucket k is below h, so the answer is the first entry
	// of a later bucket: position hi, or entry 0 if hi is past the end.
	if int(hi) == len(r.hashes) {
		return 0
	}
	return int(hi)
}

func (r *sortedRing) pick(h uint64) int { return int(r.owners[r.find(h)]) }

// pickAttempt is Envoy's retry rule (ring_hash_lb.cc chooseHost): attempt k
// takes the entry k positions after the first choice, modulo the ring size.
func (r *sortedRing) pickAttempt(h uint64, attempt int) int {
	i := r.find(h)
	if attempt > 0 {
		n := uint64(len(r.owners))
		i = int((uint64(i) + uint64(attempt)%n) % n)
	}
	return int(r.owners[i])
}

func (r *sortedRing) entries(fn func(hash uint64, endpoint int)) {
	for i, h := range r.hashes {
		fn(h, int(r.owners[i]))
	}
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

func newWalkInfo(owners []uint32, numEndpoints int) walkInfo {
	n := len(owners)
	first := make([]int32, numEndpoints)
	last := make([]int32, numEndpoints)
	for i := range first {
		first[i], last[i] = -1, -1
	}
	prev := make([]uint32, n)
	for i, o := range owners {
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
func (w *walkInfo) walk(owners []uint32, start int, fn func(endpoint int) bool) {
	n := len(owners)
	prev := w.prev[:n]
	left := w.distinct
	i := start
	for p := 0; p < n; p++ {
		if int(prev[i]) > p {
			if !fn(int(owners[i])) {
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
