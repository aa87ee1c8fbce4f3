package ringhash

import (
	"errors"
	"fmt"
	"math"
)

// Endpoint is one ring member. Key is the string the dialect hashes:
//   - Envoy ring_hash / Maglev: the host key, that is envoy.lb hash_key if
//     set, else "host:port" ([v6]:port).
//   - Skipper: the identity "scheme://host:port" (IPv6 bracketed), see
//     SkipperIdentity.
//
// Weight must be at least 1 for ring_hash and Maglev (Envoy rejects 0);
// Skipper is unweighted and accepts only 0 (unset) or 1.
type Endpoint struct {
	Key    string
	Weight uint32
}

// Ring is implemented by all three dialects. Picks return an index into the
// endpoint slice given to the builder (input order), so callers map back to
// their own endpoint records.
type Ring interface {
	// Pick returns the owner of request hash h.
	Pick(h uint64) int
	// PickAttempt returns the endpoint Envoy would try on retry attempt
	// attempt (0 is the first try and equals Pick). Negative attempts are
	// treated as 0.
	PickAttempt(h uint64, attempt int) int
	// Walk calls fn with the distinct endpoints in ring order, starting at
	// the owner of h, each once, until fn returns false or every endpoint
	// that owns at least one entry has been visited. It does not allocate.
	Walk(h uint64, fn func(endpoint int) bool)
	// NumEndpoints is the number of endpoints the ring was built from,
	// including any that received no entry.
	NumEndpoints() int
	// Size is the number of ring entries or table slots.
	Size() int
	// Policy names the dialect: "ring_hash", "maglev" or "skipper".
	Policy() string
}

// Drawable is implemented by every ring so the debug page can draw it.
type Drawable interface {
	// Entries calls fn for each entry in ascending hash order. For Maglev
	// the order is slot order and hash is the slot index.
	Entries(fn func(hash uint64, endpoint int))
}

// Policy names returned by Ring.Policy.
const (
	PolicyRingHash = "ring_hash"
	PolicyMaglev   = "maglev"
	PolicySkipper  = "skipper"
)

// Errors returned by the builders. They are wrapped, with the offending
// endpoint or value named, so match them with errors.Is.
var (
	// ErrNoEndpoints: a ring needs at least one endpoint.
	ErrNoEndpoints = errors.New("ringhash: empty endpoint set")
	// ErrEmptyKey: every endpoint needs a key to hash.
	ErrEmptyKey = errors.New("empty key")
	// ErrDuplicateKey: two endpoints with one key would share ring entries.
	ErrDuplicateKey = errors.New("duplicate key")
	// ErrZeroWeight: Envoy rejects endpoint weight 0 for ring_hash and Maglev.
	ErrZeroWeight = errors.New("zero weight")
	// ErrWeightUnsupported: Skipper rings are unweighted.
	ErrWeightUnsupported = errors.New("weight other than 1 (Skipper rings are unweighted)")
	// ErrWeightSum: Envoy rejects weights summing to more than 2^32-1.
	ErrWeightSum = errors.New("ringhash: sum of endpoint weights exceeds 4294967295")
	// ErrTooManyEndpoints: more than 8,388,608 endpoints.
	ErrTooManyEndpoints = errors.New("ringhash: too many endpoints")
	// ErrRingSize: ring_hash sizes above 8,388,608 or minimum above maximum.
	ErrRingSize = errors.New("ringhash: bad ring size")
	// ErrTableSize: a Maglev table size that is not a prime <= 5,000,011.
	ErrTableSize = errors.New("ringhash: bad Maglev table size")
	// ErrUnknownHashFunction: a HashFunction other than XXHash or MurmurHash2.
	ErrUnknownHashFunction = errors.New("ringhash: unknown hash function")
)

// EndpointError names the endpoint a builder rejected.
type EndpointError struct {
	Index int    // position in the slice given to the builder
	Key   string // its key, possibly empty
	Err   error  // the reason, matching one of the Err* sentinels
}

// Error names the endpoint by position and key, then the reason.
func (e *EndpointError) Error() string {
	return fmt.Sprintf("ringhash: endpoint %d (key %q): %v", e.Index, e.Key, e.Err)
}

// Unwrap returns the reason, so errors.Is matches the sentinels.
func (e *EndpointError) Unwrap() error { return e.Err }

// maxEndpoints bounds the endpoint count so an owner fits beside the hash
// bits in a sorted ring entry (see sortedRing). 8,388,608 is also Envoy's
// largest ring, and far above any real cluster.
const maxEndpoints = 1 << maxIndexBits

// validate checks what every dialect requires: at least one endpoint,
// non-empty unique keys and, when weighted, positive weights whose sum fits
// in a uint32 (Envoy rejects larger sums in normalizeHostWeights,
// source/common/upstream/thread_aware_lb.cc). It returns the weight sum.
func validate(eps []Endpoint, weighted bool) (uint64, error) {
	if len(eps) == 0 {
		return 0, ErrNoEndpoints
	}
	if len(eps) > maxEndpoints {
		return 0, fmt.Errorf("%w: %d", ErrTooManyEndpoints, len(eps))
	}
	seen := make(map[string]int, len(eps))
	var sum uint64
	for i, ep := range eps {
		if ep.Key == "" {
			return 0, &EndpointError{Index: i, Err: ErrEmptyKey}
		}
		if j, dup := seen[ep.Key]; dup {
			return 0, &EndpointError{Index: i, Key: ep.Key,
				Err: fmt.Errorf("%w (also endpoint %d)", ErrDuplicateKey, j)}
		}
		seen[ep.Key] = i
		if weighted {
			if ep.Weight == 0 {
				return 0, &EndpointError{Index: i, Key: ep.Key, Err: ErrZeroWeight}
			}
			sum += uint64(ep.Weight)
			if sum > math.MaxUint32 {
				return 0, ErrWeightSum
			}
		} else if ep.Weight > 1 {
			return 0, &EndpointError{Index: i, Key: ep.Key, Err: ErrWeightUnsupported}
		}
	}
	return sum, nil
}
