package ringhash

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Envoy's RingHash defaults and the proto limit on both sizes
// (api/envoy/extensions/load_balancing_policies/ring_hash/v3/ring_hash.proto).
const (
	DefaultMinRingSize = 1024
	DefaultMaxRingSize = 8388608
	// GRPCRingHashCap is grpc-go's default cap on both ring sizes
	// (GRPC_RING_HASH_CAP, balancer/ringhash): a larger ring asked for in
	// xDS is built at this size by gRPC clients.
	GRPCRingHashCap  = 4096
	MaxRingSizeLimit = 8388608
)

// RingHashOptions configures NewRingHash.
type RingHashOptions struct {
	// MinRingSize and MaxRingSize bound the ring; 0 means Envoy's defaults
	// 1024 and 8388608. Neither may exceed 8388608.
	MinRingSize, MaxRingSize uint64
	// Hash hashes the ring entries.
	Hash HashFunction
	// SortByKey reproduces grpc-go: endpoints are sorted by key before the
	// ring walk (Envoy keeps input order).
	SortByKey bool
}

// RingHash is Envoy's RING_HASH ring (and, with SortByKey, grpc-go's).
// It is immutable and safe for concurrent use.
type RingHash struct {
	sortedRing
	numEndpoints int
}

var (
	_ Ring     = (*RingHash)(nil)
	_ Drawable = (*RingHash)(nil)
)

// NewRingHash builds the ring exactly as Envoy's RingHashLoadBalancer::Ring
// does (source/extensions/load_balancing_policies/ring_hash/ring_hash_lb.cc),
// so a pick here equals the pick of an Envoy given the same endpoints in the
// same EDS order. With SortByKey it builds grpc-go's ring instead
// (balancer/ringhash/ring.go newRing, which sorts by hash key).
func NewRingHash(eps []Endpoint, opts RingHashOptions) (*RingHash, error) {
	sum, err := validate(eps, true)
	if err != nil {
		return nil, err
	}
	if err := opts.Hash.valid(); err != nil {
		return nil, err
	}
	minSize, maxSize := opts.MinRingSize, opts.MaxRingSize
	if minSize == 0 {
		minSize = DefaultMinRingSize
	}
	if maxSize == 0 {
		maxSize = DefaultMaxRingSize
	}
	if minSize > MaxRingSizeLimit || maxSize > MaxRingSizeLimit {
		return nil, fmt.Errorf("%w: minimum %d and maximum %d must not exceed %d",
			ErrRingSize, minSize, maxSize, MaxRingSizeLimit)
	}
	if minSize > maxSize {
		return nil, fmt.Errorf("%w: minimum %d is above maximum %d", ErrRingSize, minSize, maxSize)
	}

	order := make([]int, len(eps))
	for i := range order {
		order[i] = i
	}
	if opts.SortByKey {
		// grpc-go v1.85 balancer/ringhash/ring.go normalizeWeights:
		// sort.Slice(ret, func(i, j int) bool { return ret[i].hashKey < ret[j].hashKey })
		// Keys are unique here, so that unstable sort has one result.
		slices.SortFunc(order, func(a, b int) int { return cmp.Compare(eps[a].Key, eps[b].Key) })
	}

	// Normalized weights as doubles, weight / sum (thread_aware_lb.cc
	// normalizeHostWeights multiplies by a locality weight of 1.0 first,
	// which is exact). The minimum starts at 1.0 as in Envoy.
	total := float64(sum)
	minW := 1.0
	for _, ep := range eps {
		minW = min(minW, float64(ep.Weight)/total)
	}
	// Scale so the lightest endpoint gets a whole number of entries, capped
	// by the maximum size.
	scale := math.Min(math.Ceil(minW*float64(minSize))/minW, float64(maxSize))

	size := int(math.Ceil(scale))
	hashes := make([]uint64, 0, size)
	owners := make([]uint32, 0, size)
	var buf []byte
	var current, target float64
	for _, ei := range order {
		ep := eps[ei]
		w := float64(ep.Weight) / total
		// The explicit float64 conversion rounds the product before the
		// addition. Without it the Go compiler may fuse the two into an FMA
		// (arm64, GOAMD64=v3), which Envoy's C++ build does not do and which
		// changes per-host entry counts in about 1.5% of weighted configs.
		target += float64(scale * w)
		for i := uint64(0); current < target; i++ {
			buf = appendEntryKey(buf[:0], ep.Key, i)
			hashes = append(hashes, opts.Hash.sum(buf))
			owners = append(owners, uint32(ei))
			current++
		}
	}
	return &RingHash{
		sortedRing:   newSortedRing(hashes, owners, len(eps)),
		numEndpoints: len(eps),
	}, nil
}

// Pick returns the owner of request hash h.
func (r *RingHash) Pick(h uint64) int { return r.pick(h) }

// PickAttempt is Envoy's retry: attempt k takes the ring entry k positions
// after the first choice, which may be the same endpoint again.
func (r *RingHash) PickAttempt(h uint64, attempt int) int { return r.pickAttempt(h, attempt) }

// Walk visits distinct endpoints in ring order from the owner of h. An
// endpoint that received no entry (possible when the ring is smaller than
// the endpoint count) is never visited.
func (r *RingHash) Walk(h uint64, fn func(endpoint int) bool) {
	r.walkFrom(h, fn)
}

// NumEndpoints is the number of endpoints the ring was built from.
func (r *RingHash) NumEndpoints() int { return r.numEndpoints }

// Size is the number of ring entries.
func (r *RingHash) Size() int { return r.n }

// Policy returns "ring_hash".
func (r *RingHash) Policy() string { return PolicyRingHash }

// Entries calls fn for each ring entry in ascending hash order.
func (r *RingHash) Entries(fn func(hash uint64, endpoint int)) { r.entries(fn) }
