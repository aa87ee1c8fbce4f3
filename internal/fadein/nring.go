package fadein

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// ErrNoMembers is returned by NRing.Update for an empty member set.
var ErrNoMembers = errors.New("fadein: no members")

// Member is one endpoint as the client sees it.
type Member struct {
	Key ringhash.Endpoint // ring key + weight
	// FadeStart is when the member started fading in; zero: established.
	FadeStart time.Time
	Curve     Curve
}

// BuildFunc builds one ring of the cluster's dialect from members' keys.
type BuildFunc func(eps []ringhash.Endpoint) (ringhash.Ring, error)

// NRing is the client-side fade-in state machine: one ring per scale-up
// event, each a superset of the one before (the established members, then
// each event's new members cumulatively). Ring e is used for key k once
// u(k) < share(now - start of event e), u being a second hash of k that is
// independent of its ring position; a key uses the newest ring it qualifies
// for. Shares only grow, so each key moves to a newer ring at most once per
// event and never back, and because members sit at identical positions in
// every ring, a fading member only receives keys it owns in the ring of all
// members.
//
// Deletions apply to every ring at once (Update rebuilds from the new member
// set), and an event whose fade has finished is merged into the established
// members on the next Update.
//
// All state sits behind one atomic pointer to an immutable value: Pick and
// Walk never lock, Pick never allocates, and Update may run concurrently
// with them.
type NRing struct {
	build BuildFunc
	cur   atomic.Pointer[nringState]
}

// nringState is one immutable generation of an NRing.
type nringState struct {
	// rings[0] is the established ring, rings[e] adds events[0..e-1].
	rings []ringhash.Ring
	// index[e][i] is the member index of ring e's endpoint i.
	index [][]int
	// events[e-1] is the event that rings[e] adds.
	events []event
	// fading is the number of members in events.
	fading int
	// shares[e][m] is member m's share of ring e's hashes (0 when not on it).
	shares [][]float64
}

type event struct {
	start   time.Time
	curve   Curve
	members int
}

// NewNRing returns an empty NRing whose rings build calls. Pick returns -1
// until the first successful Update.
func NewNRing(build BuildFunc) *NRing { return &NRing{build: build} }

// Update replaces the member set; Pick and Walk return indices into members.
// Members still fading at now are grouped into events by fade start (equal
// start and curve form one event). If no member is established, the oldest
// event is taken as established: there is nothing to fade from. On error the
// previous state stays in force.
func (n *NRing) Update(members []Member, now time.Time) error {
	if len(members) == 0 {
		return ErrNoMembers
	}
	var established []int
	fading := map[event][]int{}
	for i, m := range members {
		if m.FadeStart.IsZero() || m.Curve.Share(now.Sub(m.FadeStart)) >= 1 {
			established = append(established, i)
			continue
		}
		// Starts in one fade step form one event, as the published weight
		// ramp takes them together: pods turning ready milliseconds apart
		// would otherwise each get a ring, and a key could move from one
		// new member to another.
		e := event{start: StepTime(m.FadeStart), curve: m.Curve}
		fading[e] = append(fading[e], i)
	}
	events := make([]event, 0, len(fading))
	for e := range fading {
		events = append(events, e)
	}
	slices.SortFunc(events, func(a, b event) int {
		return cmp.Or(a.start.Compare(b.start), cmp.Compare(a.curve.Duration, b.curve.Duration), cmp.Compare(a.curve.Exponent, b.curve.Exponent))
	})
	if len(established) == 0 {
		established = fading[events[0]]
		events = events[1:]
	}

	st := &nringState{
		rings:  make([]ringhash.Ring, 0, len(events)+1),
		index:  make([][]int, 0, len(events)+1),
		events: make([]event, len(events)),
	}
	idx := slices.Clone(established)
	for e := 0; e <= len(events); e++ {
		if e > 0 {
			ev := events[e-1]
			ms := fading[ev]
			ev.members = len(ms)
			st.events[e-1] = ev
			st.fading += len(ms)
			idx = append(slices.Clone(idx), ms...)
		}
		eps := make([]ringhash.Endpoint, len(idx))
		for i, mi := range idx {
			eps[i] = members[mi].Key
		}
		r, err := n.build(eps)
		if err != nil {
			return fmt.Errorf("fadein: ring %d of %d: %w", e, len(events)+1, err)
		}
		st.rings = append(st.rings, r)
		st.index = append(st.index, idx)
		shares := make([]float64, len(members))
		for i, s := range ringhash.Shares(r) {
			shares[idx[i]] = s
		}
		st.shares = append(st.shares, shares)
	}
	n.cur.Store(st)
	return nil
}

// Shares returns each member's share of request hashes at now: the share
// it holds in each ring, weighted by the share of keys that use that ring.
// A key uses the newest ring whose event's share exceeds its unit hash.
func (n *NRing) Shares(now time.Time) []float64 {
	s := n.cur.Load()
	if s == nil {
		return nil
	}
	out := make([]float64, len(s.shares[0]))
	covered := 0.0 // share of keys taken by newer rings
	for e := len(s.events); e >= 0; e-- {
		p := 1.0
		if e > 0 {
			ev := &s.events[e-1]
			p = ev.curve.Share(now.Sub(ev.start))
		}
		take := max(p-covered, 0)
		covered = max(covered, p)
		for m, share := range s.shares[e] {
			out[m] += take * share
		}
	}
	return out
}

// Ring returns the ring request hash h uses at now and the member index of
// each of its endpoints, so a caller can walk the concrete ring without a
// closure.
func (n *NRing) Ring(h uint64, now time.Time) (ringhash.Ring, []int) {
	s := n.cur.Load()
	if s == nil {
		return nil, nil
	}
	e := s.ring(h, now)
	return s.rings[e], s.index[e]
}

// Stage says which of its rings request hash h uses at now: ring 0 holds
// the established members and ring e adds the members of the e-th fade
// event, of rings in all. u is the key's cut-over point in [0, 1): the key
// uses ring e once event e's share exceeds u. It is what /debug/pick
// explains a mid-fade pick with; rings is 0 before the first Update.
func (n *NRing) Stage(h uint64, now time.Time) (ring, rings int, u float64) {
	s := n.cur.Load()
	if s == nil {
		return 0, 0, 0
	}
	return s.ring(h, now), len(s.rings), unitHash(h)
}

// Newest returns the ring of every member, the one each key uses once
// every fade is over, and the member index of each of its endpoints; nil
// before the first Update.
func (n *NRing) Newest() (ringhash.Ring, []int) {
	s := n.cur.Load()
	if s == nil {
		return nil, nil
	}
	return s.rings[len(s.rings)-1], s.index[len(s.rings)-1]
}

// ring returns the ring key hash h uses at now.
func (s *nringState) ring(h uint64, now time.Time) int {
	if len(s.events) == 0 {
		return 0
	}
	u := unitHash(h)
	for e := len(s.events); e >= 1; e-- {
		ev := &s.events[e-1]
		if u < ev.curve.Share(now.Sub(ev.start)) {
			return e
		}
	}
	return 0
}

// Pick returns the member that owns request hash h at now, as an index into
// the last Update's members, or -1 before the first Update.
func (n *NRing) Pick(h uint64, now time.Time) int {
	s := n.cur.Load()
	if s == nil {
		return -1
	}
	e := s.ring(h, now)
	return s.index[e][s.rings[e].Pick(h)]
}

// Walk calls fn with distinct members in the order of the ring h uses at
// now, starting at Pick's choice, until fn returns false: the order a
// bounded-load walk considers them in. It allocates once (the closure that
// maps the ring's indices to members); Pick allocates nothing.
func (n *NRing) Walk(h uint64, now time.Time, fn func(int) bool) {
	s := n.cur.Load()
	if s == nil {
		return
	}
	e := s.ring(h, now)
	idx := s.index[e]
	s.rings[e].Walk(h, func(i int) bool { return fn(idx[i]) })
}

// Fading returns the number of members still fading in at now.
func (n *NRing) Fading(now time.Time) int {
	s := n.cur.Load()
	if s == nil {
		return 0
	}
	c := 0
	for _, ev := range s.events {
		if ev.curve.Share(now.Sub(ev.start)) < 1 {
			c += ev.members
		}
	}
	return c
}

// unitHash maps a request hash to [0, 1) through the murmur3 64-bit
// finalizer. The ring places a key by h itself; u only decides when the key
// cuts over, and the finalizer's avalanche makes it independent of where h
// lands on the ring, so each event takes an unbiased share of every
// endpoint's keys.
func unitHash(h uint64) float64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return float64(h>>11) / (1 << 53)
}
