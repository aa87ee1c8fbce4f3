package ringhash

import (
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// SkipperVnodes is the number of ring entries per endpoint in Skipper's
// consistentHash (every release since July 2021 except v0.24.49-v0.24.53).
const SkipperVnodes = 100

// Skipper is Skipper's consistentHash ring (proxy/consistenthash.go): 100
// virtual nodes per endpoint, entry j hashing "identity-j" with XXH64.
// Skipper has no endpoint weights. It is immutable and safe for concurrent
// use.
type Skipper struct {
	sortedRing
	numEndpoints int
}

var (
	_ Ring     = (*Skipper)(nil)
	_ Drawable = (*Skipper)(nil)
)

// NewSkipper builds Skipper's ring. Keys are Skipper identities, see
// SkipperIdentity. The input order of endpoints does not change any pick
// (barring 64-bit hash collisions between virtual nodes).
//
// Skipper has no weights, so Weight must be 0 (unset) or 1; anything else is
// rejected with ErrWeightUnsupported rather than silently ignored, because a
// weighted cluster served through an unweighted ring would not balance the
// way its operator configured.
func NewSkipper(eps []Endpoint) (*Skipper, error) {
	if _, err := validate(eps, false); err != nil {
		return nil, err
	}
	size := len(eps) * SkipperVnodes
	hashes := make([]uint64, 0, size)
	owners := make([]uint32, 0, size)
	var buf []byte
	for ei, ep := range eps {
		buf = append(buf[:0], ep.Key...)
		buf = append(buf, '-')
		base := len(buf)
		for j := 0; j < SkipperVnodes; j++ {
			buf = strconv.AppendInt(buf[:base], int64(j), 10)
			hashes = append(hashes, xxhash.Sum64(buf))
			owners = append(owners, uint32(ei))
		}
	}
	return &Skipper{
		sortedRing:   newSortedRing(hashes, owners, len(eps)),
		numEndpoints: len(eps),
	}, nil
}

// Pick returns the owner of request hash h (Skipper hashes the key string
// with XXH64, see HashKey).
func (s *Skipper) Pick(h uint64) int { return s.pick(h) }

// PickAttempt applies Envoy's retry rule to Skipper's ring: attempt k takes
// the entry k positions after the first choice. Skipper itself has no
// retry-specific pick; PickExcluding is what it does for unusable endpoints.
func (s *Skipper) PickAttempt(h uint64, attempt int) int { return s.pickAttempt(h, attempt) }

// PickExcluding walks clockwise from the owner of h, virtual node by virtual
// node, to the first endpoint not excluded, as Skipper skips fading or
// unhealthy endpoints that stay on the ring. It returns -1 if every endpoint
// is excluded. excluded is called at most once per endpoint.
func (s *Skipper) PickExcluding(h uint64, excluded func(endpoint int) bool) int {
	found := -1
	s.walkFrom(h, func(ep int) bool {
		if excluded(ep) {
			return true
		}
		found = ep
		return false
	})
	return found
}

// Walk visits distinct endpoints in ring order from the owner of h, which is
// the order Skipper's bounded-load walk considers them in.
func (s *Skipper) Walk(h uint64, fn func(endpoint int) bool) {
	s.walkFrom(h, fn)
}

// NumEndpoints is the number of endpoints the ring was built from.
func (s *Skipper) NumEndpoints() int { return s.numEndpoints }

// Size is the number of ring entries, 100 per endpoint.
func (s *Skipper) Size() int { return s.n }

// Policy returns "skipper".
func (s *Skipper) Policy() string { return PolicySkipper }

// Entries calls fn for each ring entry in ascending hash order.
func (s *Skipper) Entries(fn func(hash uint64, endpoint int)) { s.entries(fn) }
