package fadein

import (
	"fmt"
	"math"
	"slices"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// A fade step publishes a Cluster (ring sizes) and a ClusterLoadAssignment
// (weights) that reach a client as two responses, so a client may build a
// ring from one step's sizes and a neighbouring step's weights. ExactWeights
// pins the ring size through maximum_ring_size = R, the step's entry total:
// every step then needs a new Cluster, and no mixed pair is exact, because
// the walk's scale min(ceil(w_min x M) / w_min, X) is capped at the other
// step's total.
//
// The other way to fix the scale is the minimum. With X above the total,
// scale = m / w_min where m = ceil(w_min x M), and the endpoint of smallest
// weight receives exactly m entries (its share of the walk is scale x w_min
// = m, an integer). Every other endpoint weighs at least as much, so m is
// the smallest count c. The whole walk ends at the scale, so the scale lies
// in (R-1, R], and M must satisfy (c-1) x scale / c < M <= scale. Hence:
//
//   - a step whose counts are not all equal is exact under exactly the
//     minimum ring sizes M with (c-1)(R-1)/c < M <= R-1 (StableWeights
//     reaches every scale in (R-1, R)); if all counts are equal the weights
//     are equal and the scale is R: (c-1)R/c < M <= R, less any M the
//     double rounding of 1/n defeats (for about 0.7% of (n, c), every M);
//   - a count of 0 is impossible this way (the lightest endpoint gets m >= 1
//     entries): a step with an endpoint held at 0 needs X = R (ExactWeights);
//   - one minimum serves two steps only if their windows overlap: the total
//     may move by less than about R/c. Early in a fade the fading endpoint
//     holds few entries, c is small and the window wide; as it nears its
//     final k entries the window narrows to about R/k, the number of
//     endpoints. A step that adds more entries than that (10 -> 11 with 256
//     entries each: R/c = 11, the curve's last steps add about 20) has no
//     minimum both of its neighbours' weights accept, under any weights:
//     one of its mixed pairs is inexact in every dialect.
//
// RingSizeSchedule therefore keeps maximum_ring_size at the configured
// value and moves minimum_ring_size only when the windows force it,
// choosing weights per step that are exact under the previous, own and
// next step's minimum. The walks are those of internal/ringhash: Envoy and
// the client library (EDS order, doubles, no cap), grpc-go (sorted by key,
// gRFC A113 fixed point, cap 4096), grpc-js and C-core (EDS order, raw
// weights, cap 4096). EDS is published in key order, so the orders agree.
// The weights sum to 2^31, so A113's fixed point is the weight itself and
// its walk is Envoy's; the ring is checked with and without fused
// multiply-add, which Envoy and C-core on arm64 and Go on arm64 use.

// stableWeightSum is what StableWeights' weights sum to: a power of two, so
// gRFC A113's fixed point floor(w x 2^31 / sum) is w itself and every
// normalized weight is an exact double; and as large as EDS allows, so the
// scale can be placed finely inside (R-1, R).
const stableWeightSum = 1 << 31

// MinRingWindow is the range of minimum_ring_size outside which no EDS
// weights give each endpoint exactly counts[i] entries while the maximum is
// at least the total (see the comment above): [lo, hi], ok false when there
// is none (fewer than two endpoints, or a count of 0). The counts are in
// walk order. The top, M = R, needs the scale to be exactly R, which only
// weights proportional to the counts give, and then only where rounding
// happens to allow it (never reliably in grpc-go's A113 walk);
// StableWeights serves the window below it.
func MinRingWindow(counts []uint64) (lo, hi uint64, ok bool) {
	if len(counts) < 2 || slices.Contains(counts, 0) {
		return 0, 0, false
	}
	c, total := slices.Min(counts), sum(counts)
	if c == slices.Max(counts) {
		return (c-1)*total/c + 1, total, true
	}
	return (c-1)*(total-1)/c + 1, total, true
}

// StableWeights returns EDS weights under which every data plane gives
// endpoint i exactly counts[i] entries for each minimum ring size in mins,
// with maxRing as the maximum ring size (at least the total). The counts
// must be in walk order (by ring key, as EDS is published), all at least 1.
//
// Each endpoint of the smallest count c weighs d; the others weigh more.
// The walk's scale is then s = c x 2^31 / d, chosen inside (R-1, R) and
// below c x min(mins) / (c-1), so that ceil(d x M / 2^31) = c for every M.
// The running target after an endpoint lies in (C_j - 1, C_j]: endpoints of
// count c add exactly c, each larger endpoint puts it half an entry below
// C_j, and the last larger one leaves it R - s below C_j, which the
// endpoints of count c after it carry to s at the end. Before the first
// larger endpoint the target sits on C_j itself, where rounding decides;
// every candidate is therefore checked against the walks, and a few scales
// are tried.
func StableWeights(counts []uint64, mins []uint64, maxRing uint64) ([]uint32, error) {
	lo, hi, ok := MinRingWindow(counts)
	if !ok || len(mins) == 0 {
		return nil, fmt.Errorf("%w: counts %v have no minimum ring size window", ErrLayout, short(counts))
	}
	mLo, mHi := slices.Min(mins), slices.Max(mins)
	total := sum(counts)
	if c := slices.Min(counts); c != slices.Max(counts) {
		hi-- // the scale stays below R
	}
	if mLo < lo || mHi > hi || maxRing < total {
		return nil, fmt.Errorf("%w: minimum ring sizes %d..%d outside the window %d..%d of %d entries (maximum %d)", ErrLayout, mLo, mHi, lo, hi, total, maxRing)
	}
	check := func(w []uint32) bool {
		for _, m := range mins {
			if !PairExact(w, counts, m, maxRing) {
				return false
			}
		}
		return w != nil
	}
	c := slices.Min(counts)
	if c == slices.Max(counts) {
		// Equal counts need equal weights: any difference moves a target
		// across a whole entry. They normalize to the double 1/n in every
		// dialect, whatever the weight.
		w := make([]uint32, len(counts))
		for i := range w {
			w[i] = 1
		}
		if check(w) {
			return w, nil
		}
		return nil, fmt.Errorf("%w: %d endpoints of %d entries: the double 1/%d rounds the walk off under minimum %d..%d", ErrLayout, len(counts), c, len(counts), mLo, mHi)
	}
	// The scale s must exceed R-1 and stay below R and c x mLo / (c-1).
	upper := float64(total)
	if c > 1 {
		upper = math.Min(upper, float64(c)*float64(mLo)/float64(c-1))
	}
	lower := float64(total - 1)
	for _, f := range []float64{0.5, 0.25, 0.75, 0.125, 0.875} {
		s := lower + f*(upper-lower)
		if f == 0.5 && upper-lower > 0.5 {
			s = float64(total) - 0.5 // centre the last endpoints' targets
		}
		d := uint64(math.Ceil(float64(c) * stableWeightSum / s))
		for delta := range uint64(8) {
			// Neighbouring d give other roundings of c / w_min.
			if w := stableCandidate(counts, c, d+delta); check(w) {
				return w, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: no weights make counts %v exact under minimum %d..%d", ErrLayout, short(counts), mLo, mHi)
}

// stableCandidate lays out StableWeights' weights for smallest count c and
// its weight d; nil if a target leaves its interval.
func stableCandidate(counts []uint64, c, d uint64) []uint32 {
	n := len(counts)
	last := -1 // the last endpoint heavier than c
	for i, x := range counts {
		if x > c {
			last = i
		}
	}
	after := uint64(n - 1 - last) // endpoints of count c after it
	if after*d >= stableWeightSum {
		return nil
	}
	w := make([]uint32, n)
	var prefix, q uint64 // C_j and the weight prefix sum
	for i, x := range counts {
		prefix += x
		next := q + d
		switch {
		case i == last:
			next = stableWeightSum - after*d
		case x > c:
			next = (2*prefix - 1) * d / (2 * c) // half an entry below C_j
		}
		// The target c x next / d must lie in (C_j - 1, C_j].
		if next < q+d || next*c > prefix*d || next*c <= (prefix-1)*d {
			return nil
		}
		w[i] = uint32(next - q)
		q = next
	}
	if q != stableWeightSum {
		return nil
	}
	return w
}

// PairExact reports whether the EDS weights, published in walk order with
// the given ring sizes, give endpoint i exactly counts[i] entries in every
// data plane ringxds serves, with and without fused multiply-add: Envoy and
// the client library; grpc-go with gRFC A113 weights; grpc-js and C-core
// with raw weights. The gRPC clients cap both sizes at 4096; when the
// counts total more, they cannot build the ring and are not checked
// (snapshot notes that cap). The ring size schedule asks this of every
// candidate, so it walks without allocating and stops at the first
// endpoint that differs.
func PairExact(weights []uint32, counts []uint64, minRing, maxRing uint64) bool {
	if len(weights) != len(counts) || len(weights) == 0 {
		return false
	}
	grpc := sum(counts) <= ringhash.GRPCRingHashCap
	capMin, capMax := min(minRing, ringhash.GRPCRingHashCap), min(maxRing, ringhash.GRPCRingHashCap)
	matches := func(i int, n uint64) bool { return counts[i] == n }
	for _, fused := range []bool{false, true} {
		if !walk(weights, minRing, maxRing, fused, false, matches) {
			return false
		}
		if grpc && (!walk(weights, capMin, capMax, fused, false, matches) || !walk(weights, capMin, capMax, fused, true, matches)) {
			return false
		}
	}
	return true
}

// walkCounts is the entry count per endpoint of ringhash.NewRingHash's walk
// (Envoy's ring_hash_lb.cc) over weights in walk order, without hashing;
// fused evaluates target += scale x w as one fused multiply-add.
func walkCounts(weights []uint32, minRing, maxRing uint64, fused bool) []uint64 {
	out := make([]uint64, len(weights))
	walk(weights, minRing, maxRing, fused, false, func(i int, n uint64) bool { out[i] = n; return true })
	return out
}

// walk runs the ring walk over weights, gRFC A113's when a113 (grpc-go's
// weights, a113Weight), handing each endpoint's entry count to visit until
// it returns false; it reports whether visit accepted every endpoint.
//
// Envoy's loop adds entries while current < target, current counting
// whole entries; it ends at the first whole number not below target, so
// the count is that ceiling less current, which the doubles hold exactly
// (rings stay far below 2^53).
func walk(weights []uint32, minRing, maxRing uint64, fused, a113 bool, visit func(i int, n uint64) bool) bool {
	var raw uint64
	for _, w := range weights {
		raw += uint64(w)
	}
	weight := func(w uint32) uint32 { return w }
	if a113 {
		weight = func(w uint32) uint32 { return a113Weight(w, raw) }
	}
	var s uint64
	for _, w := range weights {
		s += uint64(weight(w))
	}
	total := float64(s)
	minW := 1.0
	for _, w := range weights {
		minW = min(minW, float64(weight(w))/total)
	}
	scale := math.Min(math.Ceil(minW*float64(minRing))/minW, float64(maxRing))
	var current, target float64
	for i, w := range weights {
		nw := float64(weight(w)) / total
		if fused {
			target = math.FMA(scale, nw, target)
		} else {
			target += float64(scale * nw)
		}
		n := 0.0
		if end := math.Ceil(target); end > current {
			n, current = end-current, end
		}
		if !visit(i, uint64(n)) {
			return false
		}
	}
	return true
}

// a113Weight is grpc-go's gRFC A113 weight of an endpoint of weight w in a
// locality whose weights sum to sum: floor(w x 2^31 / sum), at least 1.
func a113Weight(w uint32, sum uint64) uint32 {
	return max(uint32(uint64(w)<<31/sum), 1)
}

// a113Weights is a113Weight of each of weights.
func a113Weights(weights []uint32) []uint32 {
	var s uint64
	for _, w := range weights {
		s += uint64(w)
	}
	out := make([]uint32, len(weights))
	for i, w := range weights {
		out[i] = a113Weight(w, s)
	}
	return out
}

func sum(xs []uint64) uint64 {
	var s uint64
	for _, x := range xs {
		s += x
	}
	return s
}

// short prints at most a few counts, for errors.
func short(counts []uint64) string {
	if len(counts) <= 8 {
		return fmt.Sprint(counts)
	}
	return fmt.Sprintf("%v... (%d endpoints)", counts[:8], len(counts))
}
