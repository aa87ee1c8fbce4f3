package fadein

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// ErrLayout is wrapped by ExactWeights and NewCountRing errors about entry
// counts no ring_hash configuration can express.
var ErrLayout = errors.New("fadein: no exact ring_hash layout")

// ErrRounding is wrapped, with ErrLayout, by ExactWeights for rings too
// large for its arithmetic to be exact in doubles (past 2^22 entries);
// NearExactWeights serves them.
var ErrRounding = errors.New("past what a double holds exactly")

// EntriesPerWeight is k, the ring entries an established endpoint gets per
// unit of its weight when a cluster fades in: the largest power of two with
// k x weightSum <= maxRing, or 0 if even one entry per unit does not fit.
//
// k depends on the weight sum only through its power-of-two bucket, so adding
// or removing endpoints leaves every other endpoint's entries untouched until
// the sum crosses a power of two of maxRing/k; only then does k halve (or
// double) and the ring is laid out anew. Fading endpoints count with their
// final weight, so k does not change during a fade.
func EntriesPerWeight(weightSum, maxRing uint64) uint64 {
	if weightSum == 0 || weightSum > maxRing {
		return 0
	}
	return 1 << (bits.Len64(maxRing/weightSum) - 1)
}

// LayoutEntriesPerWeight is k for a cluster laid out for a capacity (the
// largest weight sum it is meant to reach; 0 for none): maxRing / capacity,
// the same for every size up to capacity, so scaling within it never
// re-lays the ring out. Beyond the capacity, or without one, it is
// EntriesPerWeight's k, and pinned is false.
func LayoutEntriesPerWeight(weightSum, maxRing, capacity uint64) (k uint64, pinned bool) {
	if capacity > 0 && capacity <= maxRing && weightSum <= capacity {
		return maxRing / capacity, true
	}
	return EntriesPerWeight(weightSum, maxRing), false
}

// RampEntries is the number of ring entries a fading endpoint whose final
// count is final receives at share: floor(final x share), at least one (an
// endpoint in EDS always holds an entry), final once share reaches 1. It is
// non-decreasing in share, so a fading endpoint only ever gains entries.
func RampEntries(final uint64, share float64) uint64 {
	if final == 0 {
		return 0
	}
	if share >= 1 {
		return final
	}
	n := uint64(math.Floor(float64(final) * share))
	return min(max(n, 1), final)
}

// ExactWeights returns EDS weights and a ring size R (to publish as both
// minimum_ring_size and maximum_ring_size) under which Envoy's ring_hash and
// grpc-go's (before and after gRFC A113) give endpoint i exactly counts[i]
// ring entries: key_0 .. key_{counts[i]-1}. The counts must be in the order
// both walk the endpoints: sorted by ring key, which is the order grpc-go
// sorts into and the order ringxds publishes EDS in for Envoy. In another
// order the prefix sums below differ and an endpoint may gain or lose an
// entry to its neighbour.
//
// A count may be 0, so that a fading endpoint can wait in EDS without an
// entry, except the first: the walk's first endpoint always gets one.
//
// R is the sum of the counts and need not be a power of two. With n
// endpoints, the weights sum to P, the smallest power of two >= 2nR, and
// their prefix sums are floor((C_j - 1/2) x P / R) + j for j < n, where C_j
// is the prefix sum of the counts. Then every float operation of the ring
// walk is exact: w_j = W_j / P is a dyadic fraction; the scale
// min(ceil(w_min x R) / w_min, R) is exactly R because the ceiling can only
// round up; R x w_j is exact; and the running target after endpoint j lies
// in (C_j - 1/2 - 1/(2n), C_j - 1/2 + j/(2n)], inside (C_j - 1, C_j), so
// the walk stops at exactly C_j entries; after the last it is exactly R.
// Every weight is at least 1 (the + j), as EDS requires, even for a count
// of 0. grpc-go's A113 fixed-point weight floor(W_j x 2^31 / P) is exact
// because P divides 2^31 (2nR <= 2^25 within grpc-go's ring cap), and
// normalizes back to W_j / P. Fused multiply-add changes nothing, as no
// product rounds. All of this needs R x P <= 2^53, which holds up to
// 2^22 entries; larger rings are refused.
func ExactWeights(counts []uint64) (weights []uint32, ringSize uint64, err error) {
	var total uint64
	for i, c := range counts {
		total += c
		if total > ringhash.MaxRingSizeLimit {
			return nil, 0, fmt.Errorf("%w: %d entries exceed the ring size limit %d", ErrLayout, total, uint64(ringhash.MaxRingSizeLimit))
		}
		if i == 0 && c == 0 {
			return nil, 0, fmt.Errorf("%w: the first endpoint in walk order always gets an entry, so its count cannot be 0", ErrLayout)
		}
	}
	if len(counts) == 0 {
		return nil, 0, fmt.Errorf("%w: no endpoints", ErrLayout)
	}
	n := uint64(len(counts))
	p := uint64(1) << bits.Len64(2*n*total-1) // smallest power of two >= 2nR
	if p > 1<<31 {
		return nil, 0, fmt.Errorf("%w: %d endpoints and %d entries need weights summing to %d, more than 2^31: %w", ErrLayout, n, total, p, ErrRounding)
	}
	if total > 1<<53/p {
		// The walk's products R x W_j and its running target, in units of
		// 1/P, must fit a double's 53-bit mantissa to be exact; past that
		// an endpoint gains or loses an entry to rounding.
		return nil, 0, fmt.Errorf("%w: %d entries with weights summing to %d: %w (2^53)", ErrLayout, total, p, ErrRounding)
	}
	return layWeights(counts, total, p, true), total, nil
}

// NearExactWeights is ExactWeights without its limits on exactness, for
// rings it refuses with ErrRounding: past 2^22 entries, or with weights
// that would have to sum past 2^31. The weights then sum to at most 2^31
// and drop ExactWeights' "+ j" (each endpoint of a count of at least 1
// still weighs at least 2^31 / R >= 256), so every prefix lands within
// R / 2^31 of an entry's middle, a small fraction of an entry; what is
// left is the doubles' rounding, which may give an endpoint an entry more
// or less than its count (the last in walk order has no margin at all).
// On such a ring that moves under a millionth of the keys per endpoint.
func NearExactWeights(counts []uint64) (weights []uint32, ringSize uint64, err error) {
	weights, ringSize, err = ExactWeights(counts)
	if !errors.Is(err, ErrRounding) {
		return weights, ringSize, err
	}
	var total uint64
	for _, c := range counts {
		total += c
	}
	p := min(uint64(1)<<bits.Len64(2*uint64(len(counts))*total-1), 1<<31)
	return layWeights(counts, total, p, false), total, nil
}

// layWeights lays out ExactWeights' weights, summing to p; withIndex adds
// ExactWeights' "+ j", which keeps a count of 0 at weight 1 and is exact
// only while p >= 2nR. Without it a count of 0 still weighs 1.
func layWeights(counts []uint64, total, p uint64, withIndex bool) []uint32 {
	weights := make([]uint32, len(counts))
	var prefix, prevW uint64
	n := uint64(len(counts))
	for i, c := range counts {
		prefix += c
		w := p
		if i < len(counts)-1 {
			// (2C_j - 1) x P / 2R; C_j >= 1 after the first endpoint.
			w = (2*prefix - 1) * p / (2 * total)
			if withIndex {
				w += uint64(i) + 1
			}
			// Leave a unit for each endpoint still to come.
			w = min(max(w, prevW+1), p-(n-1-uint64(i)))
		}
		weights[i] = uint32(w - prevW)
		prevW = w
	}
	return weights
}

// NewCountRing builds the ring_hash ring in which endpoint i holds exactly
// eps[i].Weight entries (its weight read as an entry count), as Envoy and
// grpc-go build it from the weights ExactWeights gives in key order (past
// its limits, NearExactWeights: within an entry). Each
// endpoint's entries are its first Weight hashes, so the input order does
// not matter; picks index eps as given.
func NewCountRing(eps []ringhash.Endpoint, hash ringhash.HashFunction) (*ringhash.RingHash, error) {
	order := make([]int, len(eps))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(eps[a].Key, eps[b].Key) })
	counts := make([]uint64, len(eps))
	for i, ei := range order {
		counts[i] = uint64(eps[ei].Weight)
	}
	// Past ExactWeights' limits the count ring is near exact, as the
	// published ring of such a cluster is (snapshot uses NearExactWeights
	// too); refusing it would fail every pick of a large laid-out cluster.
	weights, size, err := NearExactWeights(counts)
	if err != nil {
		return nil, err
	}
	weighted := make([]ringhash.Endpoint, len(eps))
	for i, ei := range order {
		weighted[ei] = ringhash.Endpoint{Key: eps[ei].Key, Weight: weights[i]}
	}
	r, err := ringhash.NewRingHash(weighted, ringhash.RingHashOptions{MinRingSize: size, MaxRingSize: size, Hash: hash, SortByKey: true})
	if err != nil {
		return nil, fmt.Errorf("fadein: count ring: %w", err)
	}
	return r, nil
}
