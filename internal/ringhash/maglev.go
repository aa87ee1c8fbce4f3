package ringhash

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Envoy's Maglev table sizes
// (api/envoy/extensions/load_balancing_policies/maglev/v3/maglev.proto).
const (
	DefaultMaglevTableSize = 65537
	MaxMaglevTableSize     = 5000011
)

// Maglev is Envoy's MAGLEV lookup table. It is immutable and safe for
// concurrent use.
type Maglev struct {
	table        []uint32 // endpoint index per slot
	size         uint64
	reciprocal   uint64 // floor((2^64-1) / size), for mod without a divide
	walk         walkInfo
	numEndpoints int
}

var (
	_ Ring     = (*Maglev)(nil)
	_ Drawable = (*Maglev)(nil)
)

// NewMaglev builds the table exactly as Envoy's MaglevTable does
// (source/extensions/load_balancing_policies/maglev/maglev_lb.cc):
// endpoints sorted by key (Envoy >= 1.27, so EDS order does not matter),
// offset XXH64(key) % N, skip XXH64(key, seed 1) % (N-1) + 1, and weighted
// filling in rounds where an endpoint takes a slot whenever
// round * weight >= its running target. tableSize 0 means 65537; otherwise
// it must be a prime no larger than 5000011.
func NewMaglev(eps []Endpoint, tableSize uint64) (*Maglev, error) {
	sum, err := validate(eps, true)
	if err != nil {
		return nil, err
	}
	if tableSize == 0 {
		tableSize = DefaultMaglevTableSize
	}
	if tableSize > MaxMaglevTableSize {
		return nil, fmt.Errorf("%w: %d exceeds %d", ErrTableSize, tableSize, MaxMaglevTableSize)
	}
	if !IsPrime(tableSize) {
		return nil, fmt.Errorf("%w: %d is not prime", ErrTableSize, tableSize)
	}

	entries := make([]maglevEntry, len(eps))
	total := float64(sum)
	maxW := 0.0
	for i, ep := range eps {
		w := float64(ep.Weight) / total
		maxW = max(maxW, w)
		entries[i] = maglevEntry{
			endpoint: uint32(i),
			pos:      xxhash.Sum64String(ep.Key) % tableSize,
			skip:     xxh64Seed(ep.Key, 1)%(tableSize-1) + 1,
			weight:   w,
		}
	}
	slices.SortFunc(entries, func(a, b maglevEntry) int {
		return cmp.Compare(eps[a.endpoint].Key, eps[b.endpoint].Key)
	})

	const free = math.MaxUint32
	table := make([]uint32, tableSize)
	for i := range table {
		table[i] = free
	}
	filled := uint64(0)
	for round := uint64(1); filled < tableSize; round++ {
		// Envoy stops mid-round as soon as the table is full; later
		// endpoints of that round get nothing more.
		for i := 0; i < len(entries) && filled < tableSize; i++ {
			e := &entries[i]
			// An endpoint with the maximum weight takes a slot every round;
			// one with a third of it every third round.
			if float64(round)*e.weight < e.target {
				continue
			}
			e.target += maxW
			for table[e.pos] != free {
				e.advance(tableSize)
			}
			table[e.pos] = e.endpoint
			e.advance(tableSize)
			filled++
		}
	}
	return &Maglev{
		table:        table,
		size:         tableSize,
		reciprocal:   math.MaxUint64 / tableSize,
		walk:         newWalkInfo(len(table), len(eps), func(i int) int { return int(table[i]) }),
		numEndpoints: len(eps),
	}, nil
}

// maglevEntry is one endpoint's state while a table is filled. pos walks
// its permutation (offset + skip*next) % N incrementally: adding skip < N to
// pos < N needs at most one subtraction, where the closed form needs a
// divide per probe.
type maglevEntry struct {
	endpoint  uint32
	pos, skip uint64
	weight    float64
	target    float64
}

func (e *maglevEntry) advance(n uint64) {
	e.pos += e.skip
	if e.pos >= n {
		e.pos -= n
	}
}

// slot is h % size computed with a multiply: q = high64(h * floor((2^64-1)/size))
// is the true quotient or one less (the reciprocal is short by less than
// one, times h < 2^64), so one conditional subtraction finishes it.
func (m *Maglev) slot(h uint64) uint64 {
	q, _ := bits.Mul64(h, m.reciprocal)
	r := h - q*m.size
	if r >= m.size {
		r -= m.size
	}
	return r
}

func (m *Maglev) owner(i int) int { return int(m.table[i]) }

// Pick returns the endpoint in slot h % size.
func (m *Maglev) Pick(h uint64) int { return int(m.table[m.slot(h)]) }

// PickAttempt is Envoy's Maglev retry: attempt k looks up
// h ^ (2^64 - k), flipping most bits so retries spread over other slots.
func (m *Maglev) PickAttempt(h uint64, attempt int) int {
	if attempt > 0 {
		h ^= -uint64(attempt)
	}
	return int(m.table[m.slot(h)])
}

// Walk visits distinct endpoints in slot order from slot h % size.
func (m *Maglev) Walk(h uint64, fn func(endpoint int) bool) {
	m.walk.walk(int(m.slot(h)), m.owner, fn)
}

// NumEndpoints is the number of endpoints the table was built from.
func (m *Maglev) NumEndpoints() int { return m.numEndpoints }

// Size is the number of table slots.
func (m *Maglev) Size() int { return len(m.table) }

// Policy returns "maglev".
func (m *Maglev) Policy() string { return PolicyMaglev }

// Entries calls fn for each slot in slot order; hash is the slot index.
func (m *Maglev) Entries(fn func(hash uint64, endpoint int)) {
	for i, ep := range m.table {
		fn(uint64(i), int(ep))
	}
}

// IsPrime reports whether n is prime, the condition Envoy puts on a Maglev
// table size. It is trial division; table sizes are at most 5000011, so at
// most about 1100 odd divisors are tried.
func IsPrime(n uint64) bool {
	if n < 2 {
		return false
	}
	if n%2 == 0 {
		return n == 2
	}
	for d := uint64(3); d*d <= n; d += 2 {
		if n%d == 0 {
			return false
		}
	}
	return true
}
