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

	"github.com/ringxds/ringxds/internal/ringhash"
)

// Do calls fn with the endpoint for key and tracks the call's in-flight
// time, latency and outcome for bounded load, freeze detection and
// ejection.
//
// When fn fails, the retry policy allows it and the retry budget has room,
// Do waits a random pause of up to the retry jitter and calls fn once more
// on a different endpoint: the next one in ring order under the load bound.
// By default only errors for which ConnectFailed holds are retried (fn
// never reached the endpoint), so a call that may have had an effect is
// not repeated; WithIdempotent retries every error. It returns the last
// attempt's error, wrapping the first attempt's too.
//
// Over the balancer's in-flight cap, Do waits in FIFO order for a slot;
// when the wait queue is full too it returns an *OverloadError at once.
func (b *Balancer) Do(ctx context.Context, key string, fn func(ctx context.Context, ep Endpoint) error) error {
	return b.do(ctx, ringhash.HashKey(key), b.opts.retry, fn)
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

func (b *Balancer) do(ctx context.Context, h uint64, retry bool, fn func(ctx context.Context, ep Endpoint) error) error {
	s := b.state.Load()
	if s == nil || len(s.eps) == 0 {
		return b.unavailable(s)
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
	if err == nil || !retry || ctx.Err() != nil || !b.retryable(err) {
		return err
	}
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
	// The ring may have changed during the first attempt; exclude the
	// failed endpoint by address in the current one.
	failedAddr := s.eps[i].Addr
	s = b.state.Load()
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
	if err2 := b.call(ctx, s, j, fn); err2 != nil {
		return fmt.Errorf("clientlib: %s: retry on %s failed: %w (first attempt on %s: %w)", b.cluster, s.eps[j].Addr, err2, failedAddr, err)
	}
	return nil
}

// retryable applies the retry policy to a failed call's error.
func (b *Balancer) retryable(err error) bool {
	switch {
	case b.opts.retryIf != nil:
		return b.opts.retryIf(err)
	case b.opts.idempotent:
		return true
	}
	return ConnectFailed(err)
}

// takeRetry reserves a retry under the budget: retries in flight stay
// within the budget's share of the calls in flight, or its minimum, as
// Envoy's retry budget bounds them. Retries then cannot multiply the load
// on a cluster that fails as a whole.
func (b *Balancer) takeRetry() bool {
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
func (b *Balancer) call(ctx context.Context, s *ringState, i int, fn func(context.Context, Endpoint) error) (err error) {
	st := s.stats[i]
	start := time.Now()
	startNanos := start.UnixNano()
	st.start(startNanos)
	b.load.inflight.Add(1)
	if b.idle.Load() && b.idle.CompareAndSwap(true, false) {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	o := abandoned // a panic says nothing about the endpoint
	defer func() {
		// Monotonic end, so a wall clock step cannot make d negative.
		end := startNanos + int64(time.Since(start))
		n := st.done(startNanos, end, b.load.start.Load(), b.load.bucket.Load(), o)
		b.load.inflight.Add(-1)
		b.calls.Add(1)
		if err != nil || o != answered {
			b.failures.Add(1)
		}
		if o == failed && b.opts.ejectAfter > 0 && int(n) >= b.opts.ejectAfter {
			b.eject(s, i, end)
		}
	}()
	err = fn(ctx, s.eps[i])
	switch {
	case err == nil:
		o = answered
	case ctx.Err() == nil:
		o = failed
	}
	return err
}

// eject takes endpoint i out of picks after consecutive failures, for the
// base ejection time times the number of recent ejections, at most the
// maximum; never more than the allowed share of the endpoints (and at
// least one), so a cluster failing as a whole keeps being tried.
func (b *Balancer) eject(s *ringState, i int, now int64) {
	st := s.stats[i]
	if st.ejected.Load() {
		return
	}
	limit := max(1, int32(b.opts.maxEjectedShare*float64(len(s.eps))))
	for {
		n := b.ejected.Load()
		if n >= limit {
			return
		}
		if b.ejected.CompareAndSwap(n, n+1) {
			break
		}
	}
	if !st.ejected.CompareAndSwap(false, true) {
		b.ejected.Add(-1)
		return
	}
	k := st.ejections.Add(1)
	d := min(time.Duration(k)*b.opts.ejectBase, b.opts.ejectMax)
	st.ejectedUntil.Store(now + int64(d))
	b.ejections.Add(1)
	b.updateLiveShare(s)
	b.log.Warn("endpoint ejected after consecutive failures", zap.String("cluster", b.cluster),
		zap.String("endpoint", s.eps[i].Addr), zap.Int32("failures", st.failures.Load()), zap.Duration("for", d))
	// The ticker ends ejections; it must not stay parked meanwhile.
	if b.idle.Load() && b.idle.CompareAndSwap(true, false) {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// retryAfter estimates when a shed call could get a slot: the calls ahead
// of it in units of the cap, each round taking the cluster's mean latency.
func (b *Balancer) retryAfter(queued int) time.Duration {
	lat := math.Float64frombits(b.load.latency.Load())
	rounds := float64(queued)/float64(max(b.opts.maxInFlight, 1)) + 1
	return max(time.Duration(rounds*lat*float64(time.Second)), time.Millisecond)
}
