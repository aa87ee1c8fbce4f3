package ringhash

import "math"

// Shares returns, per endpoint (indexed as the ring's picks are), the
// fraction of request hashes the ring sends it: the hash space its arcs
// cover on a ring, its share of the slots of a Maglev table. Bounded load
// scales each endpoint's capacity by it, as Envoy scales by normalised host
// weight, so a light endpoint is bounded by its own share.
func Shares(r Ring) []float64 {
	out := make([]float64, r.NumEndpoints())
	d, ok := r.(Drawable)
	if !ok || r.Size() == 0 {
		return out
	}
	if r.Policy() == PolicyMaglev {
		d.Entries(func(_ uint64, ep int) { out[ep]++ })
		for i := range out {
			out[i] /= float64(r.Size())
		}
		return out
	}
	// Entry i owns the hashes after the previous entry up to its own; the
	// first also owns the wrap past the last.
	var prev uint64
	first, last, n := -1, uint64(0), 0
	d.Entries(func(h uint64, ep int) {
		if n == 0 {
			first = ep
			out[ep] += float64(h) + 1
		} else {
			out[ep] += float64(h - prev)
		}
		prev, last = h, h
		n++
	})
	if first >= 0 {
		out[first] += float64(math.MaxUint64 - last)
	}
	for i := range out {
		out[i] /= math.Exp2(64)
	}
	return out
}
