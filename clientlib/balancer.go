package clientlib

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/ringhash"
)

// Endpoint is one backend of a cluster. It is a small value (an address
// and a pointer) so that Pick returns it in registers; the fields callers
// need less often are methods. Two Endpoints are == when they are the same
// backend with the same published record: a ring update that leaves an
// endpoint's record as it was keeps it equal.
type Endpoint struct {
	// Addr is "host:port", IPv6 bracketed: ready for net.Dial or a URL.
	Addr string
	meta *endpointMeta
}

// endpointMeta is the rest of an endpoint's published record. The balancer
// keeps one per distinct record, so equal records share a pointer.
type endpointMeta struct {
	scheme, zone string
	weight       uint32
}

// Scheme is "http", "https" or "h2c", as published for the endpoint.
func (e Endpoint) Scheme() string {
	if e.meta == nil {
		return ""
	}
	return e.meta.scheme
}

// Zone is the endpoint's zone when the server knows it.
func (e Endpoint) Zone() string {
	if e.meta == nil {
		return ""
	}
	return e.meta.zone
}

// Weight is the EDS weight the server published (1 when it set none); 0
// for the zero Endpoint, which is no backend.
//
// It is the configured weight only where the server publishes that. A
// ringxds cluster with fade-in has its ring laid out as entries per unit
// of weight, and publishes derived weights (summing to about 2^31, and
// changing every second while an endpoint fades in) under which every data
// plane builds the same ring: configured weights 1, 1, 2 may arrive as
// 537133185, 537133185, 1073217278. Use the ratios, not the numbers; the
// server's debug page shows the configured weight beside the published one.
func (e Endpoint) Weight() uint32 {
	if e.meta == nil {
		return 0
	}
	return e.meta.weight
}

// String returns Addr.
func (e Endpoint) String() string { return e.Addr }

// ringState is one immutable view of a cluster: its endpoints, their load
// counters and the ring. Picks load it through one atomic pointer; an
// update builds a new one. A cluster with no endpoints has no ring.
type ringState struct {
	policy string
	eps    []Endpoint
	stats  []*endpointStats
	ring   ringhash.Ring
	// kind says which of skipper, ringHash and maglev is set. Picks and
	// walks call the concrete type: a walk callback passed through the
	// Ring interface would escape and allocate, and the direct call saves
	// the dynamic dispatch.
	kind     ringKind
	pure     bool // bounded load off and nothing fading: picks are ring owners
	skipper  *ringhash.Skipper
	ringHash *ringhash.RingHash
	maglev   *ringhash.Maglev
	// fade is set while endpoints fade in; picks then go through the N-ring.
	fade *fadein.NRing
}

type ringKind uint8

const (
	kindSkipper ringKind = iota
	kindRingHash
	kindMaglev
)

// pick returns the ring owner of h.
func (s *ringState) pick(h uint64) int {
	switch s.kind {
	case kindSkipper:
		return s.skipper.Pick(h)
	case kindRingHash:
		return s.ringHash.Pick(h)
	default:
		return s.maglev.Pick(h)
	}
}

// Balancer is one holder's handle on the balancer of a cluster, as
// Client.Balancer returns it: every handle of a cluster picks from the
// same ring with the same load state. It is safe for concurrent use; picks
// never block and never allocate.
//
// Close the handle when done with it; the client unsubscribes from the
// cluster when the last handle is closed. A closed handle's Pick and Do
// return ErrClosed; the other handles are unaffected.
type Balancer struct {
	*balancer
	released atomic.Bool
}

// Pick returns the endpoint for key: the owner of HashKey(key) on the ring
// the cluster's data planes share, or, with bounded load on and the owner
// over its bound, the first endpoint under it in ring order (at most
// MaxWalk endpoints, else the least loaded of them). An ejected endpoint
// (too many failed calls through Do) is passed over, bounded load on or
// off, until its ejection ends.
//
// The hash is Envoy's single-header hash (XXH64), so Pick(v) agrees with an
// Envoy or grpc-go routing a request whose hash header is v.
func (h *Balancer) Pick(key string) (Endpoint, error) {
	if h.released.Load() {
		return Endpoint{}, h.closedError()
	}
	return h.balancer.Pick(key)
}

// Close releases this handle; closing it again is a no-op. When every
// handle of the cluster is closed, the client unsubscribes from it and
// stops its background work.
func (h *Balancer) Close() error {
	if h.released.CompareAndSwap(false, true) {
		if c := h.life.client(); c != nil {
			c.release(h.balancer)
		}
	}
	return nil
}

func (b *balancer) closedError() error {
	return fmt.Errorf("%w: balancer of %s", ErrClosed, b.cluster)
}

// balancer picks endpoints of one cluster for all its handles.
type balancer struct {
	cluster string
	opts    balancerOptions
	log     *zap.Logger

	state atomic.Pointer[ringState]
	load  loadTracker
	adm   admission

	ready     chan struct{}
	readyOnce sync.Once

	// Counters, exported by the collector.
	calls, failures, retries, sheds, freezes, ejections, retriesDenied atomic.Uint64
	hops                                                               [MaxWalk]atomic.Uint64
	// ejected counts the endpoints of the current ring ejected now; picks
	// leave the bare ring while it is not 0. It is recounted under mu
	// whenever the ring or an ejection changes, never adjusted, so it
	// cannot drift from the endpoints' flags. retrying counts retries in
	// flight, for the budget.
	ejected  atomic.Int32
	retrying atomic.Int64
	// liveShare (float64 bits) is the ring share of the endpoints not
	// ejected: their bounds grow by its inverse, since they take the
	// ejected endpoints' keys.
	liveShare atomic.Uint64

	wake chan struct{} // nudges a parked ticker
	idle atomic.Bool

	// mu guards byAddr and metas, and orders ring updates with ejections:
	// state is stored and ejected recounted under it.
	mu     sync.Mutex
	byAddr map[string]*endpointStats
	metas  map[endpointMeta]*endpointMeta

	life lifetime
	// ringEntries is what the current state holds in ring entries (its ring
	// and fade-in rings), for the client's ring budget. Guarded by the
	// Client's mu.
	ringEntries int
}

func newBalancer(cluster string, opts balancerOptions, log *zap.Logger) *balancer {
	b := &balancer{
		cluster: cluster,
		opts:    opts,
		log:     log,
		adm:     admission{limit: opts.maxInFlight, queueLimit: opts.queueLimit},
		ready:   make(chan struct{}),
		wake:    make(chan struct{}, 1),
		byAddr:  make(map[string]*endpointStats),
		metas:   make(map[endpointMeta]*endpointMeta),
	}
	b.life.init()
	return b
}

// Cluster is the cluster name the balancer serves.
func (b *balancer) Cluster() string { return b.cluster }

// Policy is the ring dialect the management server publishes for the
// cluster: "ring_hash", "maglev" or "skipper".
func (b *balancer) Policy() string {
	if s := b.state.Load(); s != nil {
		return s.policy
	}
	return ""
}

// Endpoints returns the cluster's current endpoints in EDS order.
func (b *balancer) Endpoints() []Endpoint {
	if s := b.state.Load(); s != nil {
		return append([]Endpoint(nil), s.eps...)
	}
	return nil
}

// Pick is Balancer.Pick for any handle.
func (b *balancer) Pick(key string) (Endpoint, error) {
	s := b.state.Load()
	if s == nil || len(s.eps) == 0 {
		return Endpoint{}, b.unavailable(s)
	}
	h := ringhash.HashKey(key)
	if !s.pure || b.ejected.Load() != 0 {
		i, _ := b.choose(s, h, -1)
		return s.eps[i], nil
	}
	// The bare ring, without a walk's set-up; the lookups inline here.
	var i int
	switch s.kind {
	case kindSkipper:
		i = s.skipper.Pick(h)
	case kindRingHash:
		i = s.ringHash.Pick(h)
	default:
		i = s.maglev.Pick(h)
	}
	return s.eps[i], nil
}

// unavailable is Pick's and Do's error without a ring: the balancer was
// closed, the cluster has no endpoints, or it has not arrived (and why).
// It is kept out of line so Pick's frame stays small.
//
//go:noinline
func (b *balancer) unavailable(s *ringState) error {
	switch {
	case b.life.isClosed():
		return b.closedError()
	case s != nil:
		return fmt.Errorf("%w: %s", ErrNoEndpoints, b.cluster)
	}
	return b.notReady(nil)
}

// choose returns the endpoint for h and how many endpoints the walk passed
// over. exclude (an index, or -1) is never chosen unless it is the only
// endpoint with ring entries.
func (b *balancer) choose(s *ringState, h uint64, exclude int) (int, int) {
	if s.fade != nil {
		return b.chooseFading(s, h, exclude)
	}
	owner := s.pick(h)
	if owner != exclude && b.ownerUnder(s.stats[owner]) {
		return owner, 0
	}
	w := b.newWalker(s, exclude)
	// The walk goes to the concrete ring so that w.visit does not escape
	// and this path does not allocate.
	switch s.kind {
	case kindSkipper:
		s.skipper.Walk(h, w.visit)
	case kindRingHash:
		s.ringHash.Walk(h, w.visit)
	default:
		s.maglev.Walk(h, w.visit)
	}
	return w.result(owner)
}

// chooseFading is choose through the N-ring: the walk follows the ring the
// key uses now, mapping its endpoints to members.
func (b *balancer) chooseFading(s *ringState, h uint64, exclude int) (int, int) {
	now := time.Now()
	owner := s.fade.Pick(h, now)
	w := b.newWalker(s, exclude)
	if w.takesOwner(owner) {
		return owner, 0
	}
	ring, index := s.fade.Ring(h, now)
	w.index = index
	switch r := ring.(type) {
	case *ringhash.Skipper:
		r.Walk(h, w.visit)
	case *ringhash.RingHash:
		r.Walk(h, w.visit)
	case *ringhash.Maglev:
		r.Walk(h, w.visit)
	}
	return w.result(owner)
}

// ownerUnder is walker.under for the key's owner, without a walker: the
// path most picks take.
func (b *balancer) ownerUnder(st *endpointStats) bool {
	if st.ejected.Load() {
		return false
	}
	if !b.opts.bounded {
		return true
	}
	return !st.frozen.Load() && st.load() < max(b.boundScale()*math.Float64frombits(st.share.Load()), 1)
}

// boundScale is f x (L + 1), over the live endpoints' share of the ring:
// an endpoint's bound is boundScale times its share, at least 1. L is the
// cluster's total load (the larger of the live in-flight count and the
// load summed at the last tick) and the + 1 is the call being placed. An
// endpoint is under the bound while its load is below it.
//
// Scaling by the ring share is what Envoy's bounded load does with
// normalised host weights: with equal shares it is f x (L + 1) / n, and a
// light or fading endpoint is bounded by its own share, so the heavy ones
// keep their keys. The floor of 1 lets a lightly loaded cluster keep every
// key on its owner as long as the owner has less than one call's worth of
// work, however uneven the keys; this is the ceiling in Mirrokni et al.'s
// "consistent hashing with bounded loads", where a bin's capacity is
// ceil(f x (m + 1) / n) balls. Ejected endpoints' keys go to the others,
// whose bounds grow by the inverse of the live share.
func (b *balancer) boundScale() float64 {
	l := max(float64(b.load.inflight.Load()), math.Float64frombits(b.load.sum.Load()))
	scale := b.opts.factor * (l + 1)
	if live := math.Float64frombits(b.liveShare.Load()); live > 0 && live < 1 {
		scale /= live
	}
	return scale
}

// freezeThreshold is the cluster's current freeze threshold.
func (b *balancer) freezeThreshold() time.Duration {
	return freezeThreshold(b.opts.freezeAfter, math.Float64frombits(b.load.latency.Load()))
}

func (b *balancer) newWalker(s *ringState, exclude int) walker {
	w := walker{s: s, exclude: exclude, bounded: b.opts.bounded, best: -1, fallback: -1, found: -1, bestLoad: math.Inf(1)}
	if w.bounded {
		w.scale = b.boundScale()
	}
	return w
}

// walker is the state of one pick's walk. An endpoint is a candidate when
// it is neither excluded, ejected nor failing (its last call failed: it
// keeps its own keys until ejected, but no other key is sent to it); with
// bounded load, the first candidate under its bound wins, else the least
// loaded candidate seen. Without any candidate the pick falls back to a
// failing endpoint, then to the owner, as Envoy's panic mode routes to
// unhealthy hosts rather than nowhere.
type walker struct {
	s       *ringState
	index   []int // ring index -> member, when walking one of an N-ring's rings
	exclude int
	bounded bool
	scale   float64 // f x (L + 1): an endpoint's bound is scale x share, at least 1
	n       int     // endpoints visited so far

	found, hops    int
	best, bestHops int
	bestLoad       float64
	fallback       int
}

// under reports whether endpoint i is available and under its bound.
func (w *walker) under(i int) bool {
	st := w.s.stats[i]
	if st.ejected.Load() {
		return false
	}
	if !w.bounded {
		return true
	}
	return !st.frozen.Load() && st.load() < max(w.scale*math.Float64frombits(st.share.Load()), 1)
}

// takesOwner reports whether the owner can be chosen without a walk.
func (w *walker) takesOwner(owner int) bool {
	return owner != w.exclude && w.under(owner)
}

func (w *walker) visit(i int) bool {
	if w.index != nil {
		i = w.index[i]
	}
	hop := w.n
	w.n++
	st := w.s.stats[i]
	switch {
	case i == w.exclude || st.ejected.Load():
		return w.n < MaxWalk
	case st.failing.Load():
		if w.fallback < 0 {
			w.fallback = i
		}
		return w.n < MaxWalk
	case w.under(i):
		w.found, w.hops = i, hop
		return false
	}
	// Over its bound or frozen: rank it. A frozen endpoint is the last
	// resort, ranked as if one more call were stuck on it at full penalty.
	l := st.load()
	if st.frozen.Load() {
		l = (st.rawLoad() + 1) * maxPenalty
	}
	if l < w.bestLoad {
		w.best, w.bestHops, w.bestLoad = i, hop, l
	}
	return w.n < MaxWalk
}

func (w *walker) result(owner int) (int, int) {
	switch {
	case w.found >= 0:
		return w.found, w.hops
	case w.best >= 0:
		return w.best, w.bestHops
	case w.fallback >= 0:
		return w.fallback, 0
	}
	return owner, 0
}

// setState publishes a new view of the cluster, keeping each endpoint's
// load counters across updates by address, and its record's pointer while
// the record is unchanged (so Endpoint values stay ==). ring is nil, and
// eps empty, for a cluster without endpoints.
func (b *balancer) setState(policy string, eps []Endpoint, ring ringhash.Ring, fade *fadein.NRing) {
	s := &ringState{policy: policy, eps: eps, ring: ring, fade: fade, stats: make([]*endpointStats, len(eps))}
	s.pure = !b.opts.bounded && fade == nil
	switch r := ring.(type) {
	case nil:
	case *ringhash.Skipper:
		s.kind, s.skipper = kindSkipper, r
	case *ringhash.RingHash:
		s.kind, s.ringHash = kindRingHash, r
	case *ringhash.Maglev:
		s.kind, s.maglev = kindMaglev, r
	default:
		// Decode builds only these three; anything else is a programming
		// error that must not reach the pick path.
		panic(fmt.Sprintf("clientlib: unsupported ring type %T", ring))
	}
	b.mu.Lock()
	next := make(map[string]*endpointStats, len(eps))
	metas := make(map[endpointMeta]*endpointMeta, len(eps))
	var ejected int32
	for i, ep := range eps {
		st := b.byAddr[ep.Addr]
		if st == nil {
			st = newEndpointStats()
		}
		if st.ejected.Load() {
			ejected++
		}
		next[ep.Addr] = st
		s.stats[i] = st
		if ep.meta != nil {
			m := metas[*ep.meta]
			if m == nil {
				if m = b.metas[*ep.meta]; m == nil {
					m = ep.meta
				}
				metas[*m] = m
			}
			s.eps[i].meta = m
		}
	}
	b.byAddr, b.metas = next, metas
	b.setShares(s, time.Now())
	b.state.Store(s)
	b.ejected.Store(ejected)
	b.mu.Unlock()
	b.readyOnce.Do(func() { close(b.ready) })
}

// recountEjected recounts the ejected endpoints of the current ring and
// their live share, with mu held.
func (b *balancer) recountEjected() {
	s := b.state.Load()
	if s == nil {
		b.ejected.Store(0)
		return
	}
	var n int32
	for _, st := range s.stats {
		if st.ejected.Load() {
			n++
		}
	}
	b.ejected.Store(n)
	b.updateLiveShare(s)
}

// setShares stores each endpoint's share of the request hashes, which its
// load bound scales with. Fading shares change over time; the ticker
// refreshes them.
func (b *balancer) setShares(s *ringState, now time.Time) {
	var shares []float64
	switch {
	case s.fade != nil:
		shares = s.fade.Shares(now)
	case s.ring != nil:
		shares = ringhash.Shares(s.ring)
	}
	for i, st := range s.stats {
		if i < len(shares) {
			st.share.Store(math.Float64bits(shares[i]))
		}
	}
	b.updateLiveShare(s)
}

// updateLiveShare recomputes the ring share of the endpoints not ejected.
func (b *balancer) updateLiveShare(s *ringState) {
	live := 0.0
	for _, st := range s.stats {
		if !st.ejected.Load() {
			live += math.Float64frombits(st.share.Load())
		}
	}
	b.liveShare.Store(math.Float64bits(live))
}

// wait blocks until the balancer has a ring, ctx ends or the balancer is
// closed.
func (b *balancer) wait(ctx context.Context) error {
	// A server that has said nothing of the cluster for unknownAfter most
	// likely lacks it: ask it which clusters it has, so that the error can
	// name one a typo away.
	lacking := time.NewTimer(unknownAfter)
	defer lacking.Stop()
	for {
		select {
		case <-b.ready:
			return nil
		case <-b.life.done:
			return b.closedError()
		case <-ctx.Done():
			return b.notReady(ctx.Err())
		case <-lacking.C:
			if c := b.life.client(); c != nil && b.life.startSuggest() {
				go c.suggestFor(b, false)
			}
		}
	}
}

// Stats is a point-in-time account of a balancer, for logs, debug pages
// and tests; the Prometheus collector exports the same numbers.
type Stats struct {
	// Calls counts attempts made through Do and Transport (a retried call
	// counts twice) and Failures those the endpoint failed (Do).
	Calls, Failures uint64
	// Retries counts second attempts on a different endpoint, and
	// RetriesDenied the retries the budget refused.
	Retries, RetriesDenied uint64
	// Sheds counts calls refused with an OverloadError.
	Sheds uint64
	// Freezes counts endpoints found frozen, Ejections endpoints ejected
	// after consecutive failures.
	Freezes, Ejections uint64
	// WalkDistance[d] counts Do picks that went d endpoints past the key's
	// owner (0: the owner).
	WalkDistance [MaxWalk]uint64
	// InFlight and Queued are the calls running and waiting under the cap.
	InFlight, Queued int
	// Endpoints on the ring; Frozen, Ejected and Fading in through the
	// N-ring among them (a ring_hash cluster ramping through its EDS weights
	// fades in the published ring itself and counts 0 here).
	Endpoints, Frozen, Ejected, Fading int
	// StaleSince is when the management server stopped publishing the
	// cluster; the balancer keeps its last ring meanwhile. Zero while the
	// cluster is published.
	StaleSince time.Time
}

// Stats returns the balancer's counters.
func (b *balancer) Stats() Stats {
	st := Stats{
		Calls:         b.calls.Load(),
		Failures:      b.failures.Load(),
		Retries:       b.retries.Load(),
		RetriesDenied: b.retriesDenied.Load(),
		Sheds:         b.sheds.Load(),
		Freezes:       b.freezes.Load(),
		Ejections:     b.ejections.Load(),
		InFlight:      int(b.load.inflight.Load()),
		StaleSince:    b.life.staleSince(),
	}
	for i := range b.hops {
		st.WalkDistance[i] = b.hops[i].Load()
	}
	_, st.Queued = b.adm.counts()
	if s := b.state.Load(); s != nil {
		st.Endpoints = len(s.eps)
		for _, es := range s.stats {
			if es.frozen.Load() {
				st.Frozen++
			}
			if es.ejected.Load() {
				st.Ejected++
			}
		}
		if s.fade != nil {
			st.Fading = s.fade.Fading(time.Now())
		}
	}
	return st
}

// hashKey is the request hash of a key string, Envoy's single-header hash.
func hashKey(key string) uint64 { return ringhash.HashKey(key) }
