package clientlib

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// Endpoint is one backend of a cluster. It is a small value (an address
// and a pointer) so that Pick returns it in registers; the fields callers
// need less often are methods.
type Endpoint struct {
	// Addr is "host:port", IPv6 bracketed: ready for net.Dial or a URL.
	Addr string
	meta *endpointMeta
}

// endpointMeta is the rest of an endpoint's published record, shared by
// every Endpoint value of one ring update.
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

// Weight is the published EDS weight (1 when unset).
func (e Endpoint) Weight() uint32 {
	if e.meta == nil {
		return 0
	}
	return e.meta.weight
}

// String returns Addr.
func (e Endpoint) String() string { return e.Addr }

// fader is the N-ring fade-in (internal/fadein.NRing) as picks use it.
type fader interface {
	Pick(h uint64, now time.Time) int
	Walk(h uint64, now time.Time, fn func(int) bool)
	Fading(now time.Time) int
}

// ringState is one immutable view of a cluster: its endpoints, their load
// counters and the ring. Picks load it through one atomic pointer; an
// update builds a new one.
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
	fade fader
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

// Balancer picks endpoints of one cluster. It is safe for concurrent use;
// picks never block and never allocate.
type Balancer struct {
	cluster string
	opts    balancerOptions
	log     *zap.Logger

	state atomic.Pointer[ringState]
	load  loadTracker
	adm   admission

	ready     chan struct{}
	readyOnce sync.Once

	// Counters, exported by the collector.
	calls, failures, retries, sheds, freezes atomic.Uint64
	hops                                     [MaxWalk]atomic.Uint64

	wake chan struct{} // nudges a parked ticker
	idle atomic.Bool

	mu     sync.Mutex // guards byAddr
	byAddr map[string]*endpointStats
}

func newBalancer(cluster string, opts balancerOptions, log *zap.Logger) *Balancer {
	b := &Balancer{
		cluster: cluster,
		opts:    opts,
		log:     log,
		adm:     admission{limit: opts.maxInFlight, queueLimit: opts.queueLimit},
		ready:   make(chan struct{}),
		wake:    make(chan struct{}, 1),
		byAddr:  make(map[string]*endpointStats),
	}
	return b
}

// Cluster is the cluster name the balancer serves.
func (b *Balancer) Cluster() string { return b.cluster }

// Policy is the ring dialect the management server publishes for the
// cluster: "ring_hash", "maglev" or "skipper".
func (b *Balancer) Policy() string {
	if s := b.state.Load(); s != nil {
		return s.policy
	}
	return ""
}

// Endpoints returns the cluster's current endpoints in EDS order.
func (b *Balancer) Endpoints() []Endpoint {
	if s := b.state.Load(); s != nil {
		return append([]Endpoint(nil), s.eps...)
	}
	return nil
}

// Pick returns the endpoint for key: the owner of HashKey(key) on the ring
// the cluster's data planes share, or, with bounded load on and the owner
// over its bound, the first endpoint under it in ring order (at most
// MaxWalk endpoints, else the least loaded of them).
//
// The hash is Envoy's single-header hash (XXH64), so Pick(v) agrees with an
// Envoy or grpc-go routing a request whose hash header is v.
func (b *Balancer) Pick(key string) (Endpoint, error) {
	s := b.state.Load()
	if s == nil {
		return Endpoint{}, b.notReady()
	}
	h := ringhash.HashKey(key)
	if !s.pure {
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

// notReady is Pick's error before the first ring, kept out of line so
// Pick's frame stays small.
//
//go:noinline
func (b *Balancer) notReady() error { return fmt.Errorf("%w: %s", ErrNotReady, b.cluster) }

// choose returns the endpoint for h and how many endpoints the walk passed
// over. exclude (an index, or -1) is never chosen unless it is the only
// endpoint with ring entries.
func (b *Balancer) choose(s *ringState, h uint64, exclude int) (int, int) {
	if s.fade != nil {
		return b.chooseFading(s, h, exclude)
	}
	owner := s.pick(h)
	var capacity float64
	if b.opts.bounded {
		capacity = b.load.capacity(b.opts.factor, len(s.eps))
		if owner != exclude {
			if st := s.stats[owner]; !st.frozen.Load() && st.load() < capacity {
				return owner, 0
			}
		}
	} else if owner != exclude {
		return owner, 0
	}
	w := walker{s: s, exclude: exclude, bounded: b.opts.bounded, capacity: capacity, best: owner, bestLoad: math.Inf(1), found: -1}
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
	return w.result()
}

// chooseFading is choose through the N-ring. It is separate so that the
// walker escaping into the N-ring's Walk costs an allocation only while
// endpoints fade in.
func (b *Balancer) chooseFading(s *ringState, h uint64, exclude int) (int, int) {
	now := time.Now()
	owner := s.fade.Pick(h, now)
	w := &walker{s: s, exclude: exclude, bounded: b.opts.bounded, best: owner, bestLoad: math.Inf(1), found: -1}
	if w.bounded {
		w.capacity = b.load.capacity(b.opts.factor, len(s.eps))
	}
	if w.takesOwner(owner) {
		return owner, 0
	}
	s.fade.Walk(h, now, w.visit)
	return w.result()
}

// walker is the state of one bounded-load walk.
type walker struct {
	s        *ringState
	exclude  int
	bounded  bool
	capacity float64
	n        int // endpoints visited so far

	found, hops    int
	best, bestHops int
	bestLoad       float64
}

// takesOwner reports whether the owner can be chosen without a walk.
func (w *walker) takesOwner(owner int) bool {
	if owner == w.exclude {
		return false
	}
	if !w.bounded {
		return true
	}
	st := w.s.stats[owner]
	return !st.frozen.Load() && st.load() < w.capacity
}

func (w *walker) visit(i int) bool {
	hop := w.n
	w.n++
	if i == w.exclude {
		return w.n < MaxWalk
	}
	if !w.bounded {
		w.found, w.hops = i, hop
		return false
	}
	st := w.s.stats[i]
	l := st.load()
	if !st.frozen.Load() {
		if l < w.capacity {
			w.found, w.hops = i, hop
			return false
		}
	} else {
		// A frozen endpoint is the last resort: rank it as if one more
		// call were stuck on it, at full penalty.
		l = (l + 1) * maxPenalty
	}
	if l < w.bestLoad {
		w.best, w.bestHops, w.bestLoad = i, hop, l
	}
	return w.n < MaxWalk
}

func (w *walker) result() (int, int) {
	if w.found >= 0 {
		return w.found, w.hops
	}
	return w.best, w.bestHops
}

// Do calls fn with the endpoint for key and tracks the call's in-flight
// time and latency for bounded load and freeze detection.
//
// When fn fails and the retry policy allows it (by default: any error
// while ctx is live), Do waits a random pause of up to the retry jitter and
// calls fn once more on a different endpoint: the next one in ring order
// under the load bound. It returns the last attempt's error.
//
// Over the balancer's in-flight cap, Do waits in FIFO order for a slot;
// when the wait queue is full too it returns an *OverloadError at once.
func (b *Balancer) Do(ctx context.Context, key string, fn func(ctx context.Context, ep Endpoint) error) error {
	return b.do(ctx, ringhash.HashKey(key), b.opts.retry, fn)
}

func (b *Balancer) do(ctx context.Context, h uint64, retry bool, fn func(ctx context.Context, ep Endpoint) error) error {
	s := b.state.Load()
	if s == nil {
		return fmt.Errorf("%w: %s", ErrNotReady, b.cluster)
	}
	ok, inflight, queued, err := b.adm.acquire(ctx)
	if err != nil {
		return fmt.Errorf("clientlib: %s: waiting for a slot: %w", b.cluster, err)
	}
	if !ok {
		b.sheds.Add(1)
		return &OverloadError{Cluster: b.cluster, InFlight: inflight, Queued: queued, RetryAfter: b.retryAfter(queued)}
	}
	defer b.adm.release()

	i, hops := b.choose(s, h, -1)
	b.hops[min(hops, MaxWalk-1)].Add(1)
	err = b.call(ctx, s, i, fn)
	if err == nil || !retry || ctx.Err() != nil || (b.opts.retryIf != nil && !b.opts.retryIf(err)) {
		return err
	}

	if j := b.opts.retryJitter; j > 0 {
		t := time.NewTimer(time.Duration(rand.Int64N(int64(j))))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
	// The ring may have changed during the first attempt; exclude the
	// failed endpoint by address in the current one.
	failed := s.eps[i].Addr
	s = b.state.Load()
	exclude := -1
	for k := range s.eps {
		if s.eps[k].Addr == failed {
			exclude = k
			break
		}
	}
	j, _ := b.choose(s, h, exclude)
	if j == exclude {
		return err // nowhere else to go
	}
	b.retries.Add(1)
	if err2 := b.call(ctx, s, j, fn); err2 != nil {
		return fmt.Errorf("clientlib: %s: retry on %s failed: %w (first attempt on %s: %v)", b.cluster, s.eps[j].Addr, err2, failed, err)
	}
	return nil
}

func (b *Balancer) call(ctx context.Context, s *ringState, i int, fn func(context.Context, Endpoint) error) error {
	st := s.stats[i]
	start := time.Now()
	st.start(start.UnixNano())
	b.load.inflight.Add(1)
	if b.idle.Load() && b.idle.CompareAndSwap(true, false) {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	err := fn(ctx, s.eps[i])
	end := time.Now()
	bucket := b.load.bucket.Load()
	st.done(end.UnixNano(), end.Sub(start), bucket, ctx.Err() == nil)
	b.load.inflight.Add(-1)
	b.calls.Add(1)
	if err != nil {
		b.failures.Add(1)
	}
	return err
}

// retryAfter estimates when a shed call could get a slot: the calls ahead
// of it in units of the cap, each round taking the cluster's mean latency.
func (b *Balancer) retryAfter(queued int) time.Duration {
	lat := math.Float64frombits(b.load.latency.Load())
	rounds := float64(queued)/float64(max(b.opts.maxInFlight, 1)) + 1
	return max(time.Duration(rounds*lat*float64(time.Second)), time.Millisecond)
}

// runTicker closes a bucket every 30 ms while the balancer has traffic and
// parks while it has none.
func (b *Balancer) runTicker(ctx context.Context) {
	t := time.NewTicker(bucketWidth)
	defer t.Stop()
	idleTicks := 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s := b.state.Load()
			if s == nil {
				continue
			}
			active, freezes := b.load.tick(s.stats, now, b.opts.freezeAfter)
			if freezes > 0 {
				b.freezes.Add(uint64(freezes))
				b.log.Warn("endpoint frozen: requests outstanding, none completing", zap.String("cluster", b.cluster), zap.Int("endpoints", freezes))
			}
			if active {
				idleTicks = 0
				continue
			}
			if idleTicks++; idleTicks < numBuckets {
				continue
			}
			// A whole window without traffic: every bucket is clear, so
			// ticking would change nothing until the next call.
			b.idle.Store(true)
			select {
			case <-ctx.Done():
				return
			case <-b.wake:
			}
			idleTicks = 0
			t.Reset(bucketWidth)
		}
	}
}

// setState publishes a new view of the cluster, keeping each endpoint's
// load counters across updates by address.
func (b *Balancer) setState(policy string, eps []Endpoint, ring ringhash.Ring, fade fader) {
	s := &ringState{policy: policy, eps: eps, ring: ring, fade: fade, stats: make([]*endpointStats, len(eps))}
	s.pure = !b.opts.bounded && fade == nil
	switch r := ring.(type) {
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
	for i, ep := range eps {
		st := b.byAddr[ep.Addr]
		if st == nil {
			st = newEndpointStats()
		}
		next[ep.Addr] = st
		s.stats[i] = st
	}
	b.byAddr = next
	b.mu.Unlock()
	b.state.Store(s)
	b.readyOnce.Do(func() { close(b.ready) })
}

// wait blocks until the balancer has a ring or ctx ends.
func (b *Balancer) wait(ctx context.Context) error {
	select {
	case <-b.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %s: %w", ErrNotReady, b.cluster, ctx.Err())
	}
}

// Stats is a point-in-time account of a balancer, for logs, debug pages
// and tests; the Prometheus collector exports the same numbers.
type Stats struct {
	// Calls counts attempts made through Do (a retried call counts twice)
	// and Failures those that returned an error.
	Calls, Failures uint64
	// Retries counts second attempts on a different endpoint.
	Retries uint64
	// Sheds counts calls refused with an OverloadError.
	Sheds uint64
	// Freezes counts endpoints found frozen.
	Freezes uint64
	// WalkDistance[d] counts Do picks that went d endpoints past the key's
	// owner (0: the owner).
	WalkDistance [MaxWalk]uint64
	// InFlight and Queued are the calls running and waiting under the cap.
	InFlight, Queued int
	// Endpoints on the ring, Frozen among them, and Fading in through the
	// N-ring (a ring_hash cluster ramping through its EDS weights fades
	// in the published ring itself and counts 0 here).
	Endpoints, Frozen, Fading int
}

// Stats returns the balancer's counters.
func (b *Balancer) Stats() Stats {
	st := Stats{
		Calls:    b.calls.Load(),
		Failures: b.failures.Load(),
		Retries:  b.retries.Load(),
		Sheds:    b.sheds.Load(),
		Freezes:  b.freezes.Load(),
		InFlight: int(b.load.inflight.Load()),
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
		}
		if s.fade != nil {
			st.Fading = s.fade.Fading(time.Now())
		}
	}
	return st
}

// hashKey is the request hash of a key string, Envoy's single-header hash.
func hashKey(key string) uint64 { return ringhash.HashKey(key) }
