package clientlib

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// Do calls fn with the endpoint for key and tracks the call's in-flight
// time, latency and outcome for bounded load, freeze detection and
// ejection.
//
// How fn's error counts: nil, or an error marked CallerFault (and a gRPC
// status error whose code is the caller's: NotFound, InvalidArgument and
// the like), is an answer; the endpoint did its job. Any other error is the
// endpoint's failure and a step towards its ejection, and so is the
// caller's deadline passing while fn ran: an endpoint that does not answer
// in time has failed, as Envoy counts a timeout. A context canceled by the
// caller, or a panic in fn, says nothing about the endpoint.
//
// When the endpoint failed, the retry policy allows it and the retry
// budget has room, Do waits a random pause of up to the retry jitter and
// calls fn once more on a different endpoint: the next one in ring order
// under the load bound. By default only errors for which ConnectFailed
// holds are retried (fn never reached the endpoint), so a call that may
// have had an effect is not repeated; WithIdempotent retries every
// failure. It returns the last attempt's error, wrapping the first
// attempt's too.
//
// Over the balancer's in-flight cap, Do waits in FIFO order for a slot and
// picks the endpoint once it has one, from the ring current then; when the
// wait queue is full too it returns an *OverloadError at once.
func (h *Balancer) Do(ctx context.Context, key string, fn func(ctx context.Context, ep Endpoint) error) error {
	if h.released.Load() {
		return h.closedError()
	}
	b := h.balancer
	return b.do(ctx, ringhash.HashKey(key), b.retryPolicy(), func(ctx context.Context, s *ringState, i int) (outcome, error) {
		return b.call(ctx, s, i, fn)
	})
}

// ErrNotSent marks an error of a call that never reached its endpoint:
// wrap it (fmt.Errorf("...: %w", clientlib.ErrNotSent)) to let Do retry
// the call elsewhere without WithIdempotent.
var ErrNotSent = errors.New("clientlib: call not sent")

// ConnectFailed reports whether err says the call never reached the
// endpoint, so that repeating it elsewhere cannot repeat its effect: a
// refused or failed connection (dial), or an error wrapping ErrNotSent.
func ConnectFailed(err error) bool {
	if errors.Is(err, ErrNotSent) || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// CallerFault marks err, returned by a Do callback, as no fault of the
// endpoint: it answered, and any endpoint would have answered the same (the
// key does not exist, the request is invalid). Do counts the call as
// answered, not as a step towards ejection, does not retry it, and returns
// the marked error, which matches err with errors.Is and errors.As.
func CallerFault(err error) error {
	if err == nil {
		return nil
	}
	return &callerFault{err}
}

type callerFault struct{ err error }

func (e *callerFault) Error() string { return e.err.Error() }
func (e *callerFault) Unwrap() error { return e.err }

// callerCodes are the gRPC status codes of a call the endpoint answered
// correctly: the request, not the endpoint, is at fault. The others
// (Unavailable, DeadlineExceeded, Internal, Unknown, ResourceExhausted,
// Unimplemented, DataLoss) are failures, as Envoy maps them to 5xx.
var callerCodes = map[codes.Code]bool{
	codes.InvalidArgument: true, codes.NotFound: true, codes.AlreadyExists: true,
	codes.PermissionDenied: true, codes.FailedPrecondition: true, codes.Aborted: true,
	codes.OutOfRange: true, codes.Unauthenticated: true,
}

// outcome is how a call to the endpoint begun by r, which returned err
// under ctx, counts. It does not allocate: failures are the path a failing
// endpoint takes at full rate.
func (r callRecord) outcome(ctx context.Context, err error) outcome {
	if err == nil || callersError(err) {
		return answered
	}
	switch ctx.Err() {
	case nil:
		return failed
	case context.DeadlineExceeded:
		// The endpoint is to blame only if it had time to answer: as long
		// as a silent endpoint takes to count as frozen. A deadline spent
		// before the call (in the queue, or already past) says nothing.
		if deadline, ok := ctx.Deadline(); ok && deadline.Sub(r.start) >= r.b.freezeThreshold() {
			return timedOut
		}
	}
	return abandoned // the caller canceled, or ran out of time before the call
}

// callersError reports whether err, or an error it wraps, is marked
// CallerFault or is a gRPC status of one of callerCodes.
func callersError(err error) bool {
	for err != nil {
		switch e := err.(type) {
		case *callerFault:
			return true
		case interface{ GRPCStatus() *status.Status }:
			return callerCodes[e.GRPCStatus().Code()]
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				if callersError(inner) {
					return true
				}
			}
			return false
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		default:
			return false
		}
	}
	return false
}

// retryPolicy is Do's retry predicate, nil when Do does not retry.
func (b *balancer) retryPolicy() func(error) bool {
	switch {
	case !b.opts.retry:
		return nil
	case b.opts.retryIf != nil:
		return b.opts.retryIf
	case b.opts.idempotent:
		return anyError
	}
	return ConnectFailed
}

func anyError(error) bool { return true }

// attemptFunc makes one call to endpoint i of s, recording it, and says how
// it counts.
type attemptFunc func(ctx context.Context, s *ringState, i int) (outcome, error)

// do admits a call, picks its endpoint and runs attempt on it, retrying a
// failure once elsewhere when retryIf (nil: never) allows.
func (b *balancer) do(ctx context.Context, h uint64, retryIf func(error) bool, attempt attemptFunc) error {
	if s := b.state.Load(); s == nil || len(s.eps) == 0 {
		return b.unavailable(s)
	}
	ok, inflight, queued, err := b.adm.acquire(ctx, b.life.done)
	switch {
	case errors.Is(err, errAdmissionClosed):
		return b.closedError()
	case err != nil:
		return fmt.Errorf("clientlib: %s: waiting for a slot: %w", b.cluster, err)
	case !ok:
		b.sheds.Add(1)
		return &OverloadError{Cluster: b.cluster, InFlight: inflight, Queued: queued, RetryAfter: b.retryAfter(queued)}
	}
	defer b.adm.release()
	// The pick is made now, after any wait for a slot: the ring may have
	// changed, or the balancer closed, meanwhile.
	s := b.state.Load()
	if s == nil || len(s.eps) == 0 {
		return b.unavailable(s)
	}
	i, hops := b.choose(s, h, -1)
	b.hops[min(hops, MaxWalk-1)].Add(1)
	o, err := attempt(ctx, s, i)
	if err == nil || o != failed || retryIf == nil || ctx.Err() != nil || !retryIf(err) {
		return err
	}
	return b.retry(ctx, h, s.eps[i].Addr, err, attempt)
}

// retry makes the second attempt of a call whose first, on failedAddr,
// failed with err, on another endpoint of the current ring.
func (b *balancer) retry(ctx context.Context, h uint64, failedAddr string, err error, attempt attemptFunc) error {
	if !b.takeRetry() {
		b.retriesDenied.Add(1)
		return err
	}
	defer b.retrying.Add(-1)
	if j := b.opts.retryJitter; j > 0 {
		t := time.NewTimer(time.Duration(rand.Int64N(int64(j))))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
	s := b.state.Load()
	if s == nil || len(s.eps) == 0 {
		return err
	}
	exclude := -1
	for k := range s.eps {
		if s.eps[k].Addr == failedAddr {
			exclude = k
			break
		}
	}
	j, _ := b.choose(s, h, exclude)
	if j == exclude {
		return err // nowhere else to go
	}
	b.retries.Add(1)
	if _, err2 := attempt(ctx, s, j); err2 != nil {
		return fmt.Errorf("clientlib: %s: retry on %s failed: %w (first attempt on %s: %w)", b.cluster, s.eps[j].Addr, err2, failedAddr, err)
	}
	return nil
}

// takeRetry reserves a retry under the budget: retries in flight stay
// within the budget's share of the calls in flight, or its minimum, as
// Envoy's retry budget bounds them. Retries then cannot multiply the load
// on a cluster that fails as a whole.
func (b *balancer) takeRetry() bool {
	limit := max(int64(b.opts.retryBudgetMin), int64(b.opts.retryBudgetRatio*float64(b.load.inflight.Load())))
	for {
		n := b.retrying.Load()
		if n >= limit {
			return false
		}
		if b.retrying.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// call runs fn on endpoint i, recording it for bounded load, freeze
// detection and ejection. The record is made in a defer, so a panicking fn
// leaves no call in flight (the panic goes on to the caller).
func (b *balancer) call(ctx context.Context, s *ringState, i int, fn func(context.Context, Endpoint) error) (o outcome, err error) {
	rec := b.begin(s, i)
	o = abandoned // a panic says nothing about the endpoint
	defer func() { rec.finish(o) }()
	err = fn(ctx, s.eps[i])
	o = rec.outcome(ctx, err)
	return o, err
}

// callRecord is one call to one endpoint, from begin to finish.
type callRecord struct {
	b          *balancer
	st         *endpointStats
	addr       string
	start      time.Time
	startNanos int64
}

// begin records a call to endpoint i of s starting now.
func (b *balancer) begin(s *ringState, i int) callRecord {
	start := time.Now()
	r := callRecord{b: b, st: s.stats[i], addr: s.eps[i].Addr, start: start, startNanos: start.UnixNano()}
	r.st.start(r.startNanos)
	b.load.inflight.Add(1)
	b.wakeTicker()
	return r
}

// finish records the call's end and outcome, and ejects its endpoint when
// this failure is one too many.
func (r callRecord) finish(o outcome) {
	b := r.b
	// Monotonic end, so a wall clock step cannot make it earlier than start.
	end := r.startNanos + int64(time.Since(r.start))
	n := r.st.done(r.startNanos, end, b.load.start.Load(), b.load.bucket.Load(), o)
	b.load.inflight.Add(-1)
	b.calls.Add(1)
	if o == failed || o == timedOut {
		b.failures.Add(1)
		if b.opts.ejectAfter > 0 && int(n) >= b.opts.ejectAfter {
			b.eject(r.st, r.addr, end)
		}
	}
}

// eject takes the endpoint of st out of picks after consecutive failures,
// for the base ejection time times the number of recent ejections, at most
// the maximum; never more than the allowed share of the current ring's
// endpoints (and at least one), so a cluster failing as a whole keeps being
// tried. An endpoint no longer on the ring (the call began before an
// update removed it) is not ejected: it takes no picks anyway.
func (b *balancer) eject(st *endpointStats, addr string, now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.state.Load()
	if s == nil || b.byAddr[addr] != st || st.ejected.Load() {
		return
	}
	if b.ejected.Load() >= max(1, int32(b.opts.maxEjectedShare*float64(len(s.eps)))) {
		return
	}
	st.ejected.Store(true)
	k := st.ejections.Add(1)
	d := min(time.Duration(k)*b.opts.ejectBase, b.opts.ejectMax)
	st.ejectedUntil.Store(now + int64(d))
	b.ejections.Add(1)
	b.recountEjected()
	b.log.Warn("endpoint ejected after consecutive failures", zap.String("cluster", b.cluster),
		zap.String("endpoint", addr), zap.Int32("failures", st.failures.Load()), zap.Duration("for", d))
	// The ticker ends ejections; it must not stay parked meanwhile.
	b.wakeTicker()
}

// wakeTicker unparks the ticker if it is parked.
func (b *balancer) wakeTicker() {
	if b.idle.Load() && b.idle.CompareAndSwap(true, false) {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// retryAfter estimates when a shed call could get a slot: the calls ahead
// of it in units of the cap, each round taking the cluster's mean latency.
func (b *balancer) retryAfter(queued int) time.Duration {
	lat := math.Float64frombits(b.load.latency.Load())
	rounds := float64(queued)/float64(max(b.opts.maxInFlight, 1)) + 1
	return max(time.Duration(rounds*lat*float64(time.Second)), time.Millisecond)
}
