package snapshot

import (
	"fmt"
	"math"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// Disagreement returns the fraction of the 64-bit request hash space that a
// and b send to different endpoint addresses: 0 when every key goes to the
// same pod in both, about 2/3 for two unrelated rings over three equal
// endpoints. exact is false when one of them is a Maglev table, whose
// owners are not contiguous in the hash space: the fraction is then
// measured on DisagreementSamples evenly spread hashes.
func Disagreement(a, b *Decoded) (fraction float64, exact bool, err error) {
	if a == nil || b == nil || a.Ring == nil || b.Ring == nil {
		return 0, false, fmt.Errorf("%w: no ring", ErrUndecodable)
	}
	if a.Ring.Policy() == ringhash.PolicyMaglev || b.Ring.Policy() == ringhash.PolicyMaglev {
		return sampledDisagreement(a, b), false, nil
	}
	f, err := ringDisagreement(a, b)
	return f, err == nil, err
}

// DisagreementSamples is the number of hashes a sampled Disagreement
// compares: its figure is within about half a percentage point.
const DisagreementSamples = 1 << 16

func sampledDisagreement(a, b *Decoded) float64 {
	const step = math.MaxUint64/DisagreementSamples + 1
	differ := 0
	for i := range uint64(DisagreementSamples) {
		// An odd offset keeps samples off the multiples of a table size.
		h := i*step + 0x9e3779b97f4a7c15%step
		if a.Endpoints[a.Ring.Pick(h)].Addr != b.Endpoints[b.Ring.Pick(h)].Addr {
			differ++
		}
	}
	return float64(differ) / DisagreementSamples
}

func ringDisagreement(a, b *Decoded) (float64, error) {
	ea, err := ringEntries(a)
	if err != nil {
		return 0, err
	}
	eb, err := ringEntries(b)
	if err != nil {
		return 0, err
	}
	// Between two consecutive entry hashes of either ring, each ring has
	// one owner (the first entry at or above the hash, wrapping to entry
	// 0). Sweep those intervals once, summing the lengths where the owners'
	// addresses differ.
	var differ float64
	var lo uint64
	i, j := 0, 0
	for i < len(ea) || j < len(eb) {
		hi := uint64(math.MaxUint64)
		if i < len(ea) {
			hi = ea[i].hash
		}
		if j < len(eb) && eb[j].hash < hi {
			hi = eb[j].hash
		}
		if ownerAt(ea, i) != ownerAt(eb, j) {
			differ += float64(hi-lo) + 1
		}
		for i < len(ea) && ea[i].hash == hi {
			i++
		}
		for j < len(eb) && eb[j].hash == hi {
			j++
		}
		if hi == math.MaxUint64 {
			return differ / math.Exp2(64), nil
		}
		lo = hi + 1
	}
	// Above every entry both rings wrap to their first entry.
	if ea[0].addr != eb[0].addr {
		differ += float64(math.MaxUint64-lo) + 1
	}
	return differ / math.Exp2(64), nil
}

type ringEntry struct {
	hash uint64
	addr string
}

// ownerAt is the address owning the interval that ends at entry i: entry i,
// or entry 0 past the last one.
func ownerAt(es []ringEntry, i int) string {
	if i == len(es) {
		return es[0].addr
	}
	return es[i].addr
}

func ringEntries(d *Decoded) ([]ringEntry, error) {
	if d == nil || d.Ring == nil {
		return nil, fmt.Errorf("%w: no ring", ErrUndecodable)
	}
	dr, ok := d.Ring.(ringhash.Drawable)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not a hash-ordered ring", ErrUndecodable, d.Ring.Policy())
	}
	out := make([]ringEntry, 0, d.Ring.Size())
	dr.Entries(func(h uint64, ep int) { out = append(out, ringEntry{h, d.Endpoints[ep].Addr}) })
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty ring", ErrUndecodable)
	}
	return out, nil
}
