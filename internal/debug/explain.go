package debug

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/predict"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// PickExplanation says why one data plane sends a key where it does
// (/debug/pick?explain=1).
type PickExplanation struct {
	Policy string `json:"policy"`
	// Size is the number of ring entries or Maglev table slots.
	Size int `json:"size"`
	// Entry is the ring entry the key's hash lands on: the first at or
	// after it, wrapping to entry 0; for Maglev the slot hash mod size.
	Entry ExplainedEntry `json:"entry"`
	// Before and After are the entries around Entry, in ring order.
	Before []ExplainedEntry `json:"before"`
	After  []ExplainedEntry `json:"after"`
	// Skipped are the entries between the hash and Entry that this data
	// plane does not hold yet, because their endpoint is fading in (the
	// first maxSkipped; SkippedMore counts the rest).
	Skipped     []SkippedEntry `json:"skipped,omitempty"`
	SkippedMore int            `json:"skipped_more,omitempty"`
	// Fallbacks are the other endpoints in the order a walk from the key
	// meets them: where clientlib's Do and Transport send the key when the
	// owner is over its load bound, frozen or ejected (the first
	// maxFallbacks; FallbacksMore counts the rest).
	Fallbacks     []string `json:"fallbacks,omitempty"`
	FallbacksMore int      `json:"fallbacks_more,omitempty"`
	// Why says it in words.
	Why string `json:"why"`
}

// ExplainedEntry is one ring entry or table slot.
type ExplainedEntry struct {
	Index int `json:"index"`
	// Hash is the entry's hash as a decimal string; empty for a Maglev
	// slot, which has none.
	Hash     string `json:"hash,omitempty"`
	Endpoint string `json:"endpoint"`
}

// SkippedEntry is an entry a key passed over, and why.
type SkippedEntry struct {
	ExplainedEntry
	Reason string `json:"reason"`
}

// Bounds on an explanation's lists: enough to see the neighbourhood, not
// the ring.
const (
	explainNeighbours = 2
	maxSkipped        = 8
	maxFallbacks      = 8
)

// addFallback records a endpoint a walk meets after the owner, within
// maxFallbacks.
func (x *PickExplanation) addFallback(a string) {
	if a == x.Entry.Endpoint {
		return
	}
	if len(x.Fallbacks) < maxFallbacks {
		x.Fallbacks = append(x.Fallbacks, a)
		return
	}
	x.FallbacksMore++
}

// explainParam reports whether a query asks for explanations.
func explainParam(v string) bool {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// explain says why implementation p sends request hash h where it does on
// the cluster at now, from the same rings predict picks from.
func (h *Handler) explain(snap *snapshot.Snapshot, p dataplane.Implementation, cluster string, hash uint64, now time.Time) (*PickExplanation, error) {
	d, err := h.decoded(snap, p.Kind, p.Dialect, cluster)
	if err != nil {
		return nil, err
	}
	if p.FadeSchedule {
		f, err := h.fadeRing(snap, p, cluster, d, now)
		if err != nil {
			return nil, err
		}
		if f != nil {
			return explainNRing(f, p.Name, hash, now), nil
		}
	}
	addrs := make([]string, len(d.Endpoints))
	for i, ep := range d.Endpoints {
		addrs[i] = ep.Addr
	}
	x := explainRing(d.Ring, addrs, hash)
	if final, ok := finalRing(d, p.Dialect); ok {
		x.skip(final, addrs, hash, func(string) string {
			return "not on this data plane's ring yet: its endpoint is fading in, and the published weights hold only part of its entries"
		})
	}
	d.Ring.Walk(hash, func(i int) bool {
		x.addFallback(addrs[i])
		return true
	})
	x.Why = x.because(hash, p.Name)
	return x, nil
}

// explainNRing explains a pick of clientlib/grpcbalancer's fade N-ring:
// which of its rings the key uses now, and what the newest would do.
func explainNRing(f *predict.FadeRing, impl string, hash uint64, now time.Time) *PickExplanation {
	step := fadein.StepTime(now)
	r, index := f.NRing.Ring(hash, step)
	addrs := make([]string, len(index))
	for i, m := range index {
		addrs[i] = f.Addrs[m]
	}
	x := explainRing(r, addrs, hash)
	stage, rings, u := f.NRing.Stage(hash, step)
	if newest, newIndex := f.NRing.Newest(); stage < rings-1 {
		newAddrs := make([]string, len(newIndex))
		for i, m := range newIndex {
			newAddrs[i] = f.Addrs[m]
		}
		x.skip(newest, newAddrs, hash, func(string) string {
			return fmt.Sprintf("its endpoint is fading in, and this key cuts over to it only once that fade's share passes %.3f", u)
		})
	}
	f.NRing.Walk(hash, step, func(m int) bool {
		x.addFallback(f.Addrs[m])
		return true
	})
	x.Why = x.because(hash, impl)
	if rings > 1 {
		x.Why += fmt.Sprintf(" Mid-fade the balancer holds %d rings, each adding one fade's endpoints; this key uses ring %d (0: no fading endpoint) and moves to a newer one when that fade's share passes its cut-over point %.3f.", rings, stage, u)
	}
	return x
}

// explainRing finds the entry request hash h lands on in r, and its
// neighbours, in one pass over the entries: no copy of a ring that may
// hold millions.
func explainRing(r ringhash.Ring, addrs []string, h uint64) *PickExplanation {
	x := &PickExplanation{Policy: r.Policy(), Size: r.Size(), Before: []ExplainedEntry{}, After: []ExplainedEntry{}}
	maglev := r.Policy() == ringhash.PolicyMaglev
	target := h
	if maglev {
		// Entries gives a Maglev table's slot index as the hash.
		target = h % uint64(r.Size())
	}
	k := explainNeighbours
	// The neighbours lie just before and after the hit, or across the
	// wrap: among the first and last entries.
	var head, tail, before, after []ExplainedEntry
	hit, n := -1, 0
	r.(ringhash.Drawable).Entries(func(eh uint64, ep int) {
		e := ExplainedEntry{Index: n, Endpoint: addrs[ep]}
		if !maglev {
			e.Hash = strconv.FormatUint(eh, 10)
		}
		n++
		if len(head) <= k {
			head = append(head, e)
		}
		tail = appendLast(tail, e, k)
		switch {
		case hit < 0 && eh >= target:
			hit, x.Entry = e.Index, e
		case hit < 0:
			before = appendLast(before, e, k)
		case len(after) < k:
			after = append(after, e)
		}
	})
	if n == 0 {
		return x
	}
	if hit < 0 {
		// Above the last entry: the ring wraps to entry 0.
		hit, x.Entry = 0, head[0]
	}
	known := make(map[int]ExplainedEntry, 4*k+1)
	for _, s := range [][]ExplainedEntry{head, tail, before, after} {
		for _, e := range s {
			known[e.Index] = e
		}
	}
	seen := map[int]bool{hit: true}
	take := func(idx int, into *[]ExplainedEntry) {
		if e, ok := known[idx]; ok && !seen[idx] {
			seen[idx] = true
			*into = append(*into, e)
		}
	}
	for j := k; j >= 1; j-- {
		take(((hit-j)%n+n)%n, &x.Before)
	}
	for j := 1; j <= k; j++ {
		take((hit+j)%n, &x.After)
	}
	return x
}

// appendLast appends e to s, keeping only the last k.
func appendLast(s []ExplainedEntry, e ExplainedEntry, k int) []ExplainedEntry {
	s = append(s, e)
	if len(s) > k {
		s = s[1:]
	}
	return s
}

// skip lists the entries of final (the ring once every fade is over, a
// superset of the ring explained) that lie between the key's hash and the
// entry it landed on: entries the key would have landed on first, had
// they been in. It checks that final holds the entry landed on, so a
// final ring that does not match (other keys, another dialect) says
// nothing rather than something wrong.
func (x *PickExplanation) skip(final ringhash.Ring, addrs []string, h uint64, reason func(endpoint string) string) {
	if x.Policy == ringhash.PolicyMaglev || final.Policy() != ringhash.PolicyRingHash {
		return
	}
	hit, err := strconv.ParseUint(x.Entry.Hash, 10, 64)
	if err != nil {
		return
	}
	wraps := hit < h // the key passed the ring's end before landing
	in := func(eh uint64) bool {
		if wraps {
			return eh >= h || eh < hit
		}
		return eh >= h && eh < hit
	}
	var skipped []SkippedEntry
	more, matched := 0, false
	i := 0
	final.(ringhash.Drawable).Entries(func(eh uint64, ep int) {
		defer func() { i++ }()
		if eh == hit && addrs[ep] == x.Entry.Endpoint {
			matched = true
		}
		if !in(eh) {
			return
		}
		if len(skipped) == maxSkipped {
			more++
			return
		}
		skipped = append(skipped, SkippedEntry{
			ExplainedEntry: ExplainedEntry{Index: i, Hash: strconv.FormatUint(eh, 10), Endpoint: addrs[ep]},
			Reason:         reason(addrs[ep]),
		})
	})
	if matched {
		x.Skipped, x.SkippedMore = skipped, more
	}
}

// because is the explanation in words, for implementation impl.
func (x *PickExplanation) because(h uint64, impl string) string {
	var b strings.Builder
	if x.Policy == ringhash.PolicyMaglev {
		fmt.Fprintf(&b, "Maglev looks the key up in slot hash mod %d = %d, which %s owns.", x.Size, x.Entry.Index, x.Entry.Endpoint)
	} else {
		fmt.Fprintf(&b, "On this %s ring of %d entries the key's hash %d lands on entry %d (hash %s), the first at or after it", x.Policy, x.Size, h, x.Entry.Index, x.Entry.Hash)
		if hit, _ := strconv.ParseUint(x.Entry.Hash, 10, 64); hit < h {
			b.WriteString(" once the ring wraps past its last entry")
		}
		fmt.Fprintf(&b, "; %s owns it.", x.Entry.Endpoint)
	}
	if n := len(x.Skipped) + x.SkippedMore; n > 0 {
		if n == 1 {
			b.WriteString(" 1 entry between the hash and it belongs to an endpoint still fading in (skipped).")
		} else {
			fmt.Fprintf(&b, " %d entries between the hash and it belong to endpoints still fading in (skipped).", n)
		}
	}
	if len(x.Fallbacks) == 0 {
		return b.String()
	}
	next := strings.Join(x.Fallbacks, ", ")
	if x.FallbacksMore > 0 {
		next += fmt.Sprintf(" and %d more", x.FallbacksMore)
	}
	switch impl {
	case dataplane.Clientlib:
		fmt.Fprintf(&b, " Do and Transport (bounded load, on by default) take the owner unless it is over its load bound, frozen or ejected, then %s, in that order.", next)
	case dataplane.Envoy:
		b.WriteString(" Envoy applies no bounded load here (ringxds sets no hash_balance_factor), so every Envoy sends the key to the owner.")
	default:
		fmt.Fprintf(&b, " A gRPC client passes over an endpoint whose connection is failing to the next in ring order: %s.", next)
	}
	return b.String()
}

// finalRing builds the ring a laid-out cluster reaches once every fade is
// over, from the final entries its endpoints publish, with the entry keys
// dialect d hashes; ok is false outside a fade.
func finalRing(d *snapshot.Decoded, dialect snapshot.Dialect) (ringhash.Ring, bool) {
	if d.Ring.Policy() != ringhash.PolicyRingHash {
		return nil, false
	}
	eps := make([]ringhash.Endpoint, len(d.Endpoints))
	var total uint64
	for i, ep := range d.Endpoints {
		if ep.RingEntries == 0 {
			return nil, false
		}
		key := dialect.KeyPrefix + ep.Addr
		if dialect.HashKey && ep.HashKey != "" {
			key = ep.HashKey
		}
		eps[i] = ringhash.Endpoint{Key: key, Weight: uint32(min(ep.RingEntries, uint64(^uint32(0))))}
		total += ep.RingEntries
	}
	if total <= uint64(d.Ring.Size()) {
		return nil, false // not fading: the ring is the final one
	}
	r, err := fadein.NewCountRing(eps, ringhash.XXHash)
	if err != nil {
		return nil, false
	}
	return r, true
}
