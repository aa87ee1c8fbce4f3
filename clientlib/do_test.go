package clientlib

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// Over the cap, calls wait in FIFO order and get slots as calls finish;
// over the queue bound, they fail fast with an *OverloadError.
func TestDoShedsBeyondCapAndQueue(t *testing.T) {
	b, _ := benchBalancer(t, ringhash.PolicySkipper, 5, WithMaxInFlight(2, 2), WithoutRetry())
	ctx := context.Background()
	release := make(chan struct{})
	started := make(chan int, 10)
	call := func(id int) chan error {
		done := make(chan error, 1)
		go func() {
			done <- b.Do(ctx, "k", func(context.Context, Endpoint) error {
				started <- id
				<-release
				return nil
			})
		}()
		return done
	}
	running := []chan error{call(1), call(2)}
	<-started
	<-started
	queued := []chan error{call(3)}
	waitQueued(t, b, 1)
	queued = append(queued, call(4))
	waitQueued(t, b, 2)

	err := b.Do(ctx, "k", func(context.Context, Endpoint) error {
		t.Error("a shed call ran")
		return nil
	})
	var oe *OverloadError
	if !errors.As(err, &oe) || oe.InFlight != 2 || oe.Queued != 2 || oe.RetryAfter <= 0 {
		t.Fatalf("over the queue bound: %v, want an OverloadError with 2 in flight, 2 queued", err)
	}
	rec := httptest.NewRecorder()
	if !WriteOverload(rec, err) || rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("WriteOverload: %v code %d Retry-After %q", err, rec.Code, rec.Header().Get("Retry-After"))
	}
	if WriteOverload(httptest.NewRecorder(), errors.New("other")) {
		t.Fatal("WriteOverload took an error that is not an overload")
	}

	// One slot frees: the oldest waiter, 3, runs, not 4.
	release <- struct{}{}
	if id := <-started; id != 3 {
		t.Fatalf("first queued call to run: %d, want 3 (FIFO)", id)
	}
	close(release)
	for _, ch := range append(running, queued...) {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if st := b.Stats(); st.Sheds != 1 || st.Queued != 0 {
		t.Fatalf("stats %+v, want 1 shed and an empty queue", st)
	}
}

func waitQueued(t *testing.T, b *Balancer, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, q := b.adm.counts(); q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue never reached %d", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A waiter whose context ends leaves the queue without taking a slot.
func TestQueuedCallLeavesOnCancel(t *testing.T) {
	b, _ := benchBalancer(t, ringhash.PolicySkipper, 5, WithMaxInFlight(1, 5))
	release := make(chan struct{})
	go func() {
		_ = b.Do(context.Background(), "k", func(context.Context, Endpoint) error { <-release; return nil })
	}()
	waitInFlight(t, b, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- b.Do(ctx, "k", func(context.Context, Endpoint) error { return nil }) }()
	waitQueued(t, b, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if _, q := b.adm.counts(); q != 0 {
		t.Fatalf("%d still queued", q)
	}
	close(release)
	waitInFlight(t, b, 0)
	if err := b.Do(context.Background(), "k", func(context.Context, Endpoint) error { return nil }); err != nil {
		t.Fatalf("the slot was lost: %v", err)
	}
}

func waitInFlight(t *testing.T, b *Balancer, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if in, _ := b.adm.counts(); in == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("in flight never reached %d", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A failed call is retried once, on a different endpoint: the next one in
// ring order; a second failure is returned, wrapping both causes. By
// default only a call that never reached its endpoint is retried;
// WithIdempotent retries any error, and retryIf decides when set.
func TestDoRetriesOnceElsewhere(t *testing.T) {
	b, ring := benchBalancer(t, ringhash.PolicySkipper, 5, WithRetry(time.Millisecond, nil))
	eps := b.Endpoints()
	h := ringhash.HashKey("k")
	var walk []string
	ring.Walk(h, func(i int) bool { walk = append(walk, eps[i].Addr); return len(walk) < 2 })

	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	var tried []string
	err := b.Do(context.Background(), "k", func(_ context.Context, ep Endpoint) error {
		tried = append(tried, ep.Addr)
		if len(tried) == 1 {
			return refused
		}
		return nil
	})
	if err != nil || len(tried) != 2 || tried[0] != walk[0] || tried[1] != walk[1] {
		t.Fatalf("err %v, tried %v, want the owner then the next in ring order %v", err, tried, walk)
	}

	// An error after the call reached its endpoint is not retried by
	// default: the call may have had its effect.
	boom := errors.New("boom")
	tried = nil
	err = b.Do(context.Background(), "k", func(_ context.Context, ep Endpoint) error {
		tried = append(tried, ep.Addr)
		return boom
	})
	if !errors.Is(err, boom) || len(tried) != 1 {
		t.Fatalf("err %v after %v, want boom from one attempt", err, tried)
	}

	idem, _ := benchBalancer(t, ringhash.PolicySkipper, 5, WithIdempotent(), WithRetry(time.Millisecond, nil))
	tried = nil
	first := fmt.Errorf("first: %w", ErrNotSent)
	err = idem.Do(context.Background(), "k", func(_ context.Context, ep Endpoint) error {
		tried = append(tried, ep.Addr)
		if len(tried) == 1 {
			return first
		}
		return boom
	})
	if !errors.Is(err, boom) || !errors.Is(err, ErrNotSent) || len(tried) != 2 || tried[0] == tried[1] {
		t.Fatalf("err %v after %v, want both attempts' errors from two different endpoints", err, tried)
	}
	if st := idem.Stats(); st.Retries != 1 || st.Calls != 2 || st.Failures != 2 {
		t.Fatalf("stats %+v", st)
	}

	// retryIf can refuse.
	tried = nil
	nb, _ := benchBalancer(t, ringhash.PolicySkipper, 5, WithRetry(0, func(error) bool { return false }))
	_ = nb.Do(context.Background(), "k", func(_ context.Context, ep Endpoint) error {
		tried = append(tried, ep.Addr)
		return refused
	})
	if len(tried) != 1 {
		t.Fatalf("retryIf false still retried: %v", tried)
	}
}

// The retry budget bounds retries in flight: with every call failing, at
// most the budget's minimum retry at once.
func TestRetryBudgetBoundsRetries(t *testing.T) {
	b, _ := benchBalancer(t, ringhash.PolicySkipper, 5, WithIdempotent(), WithRetry(0, nil), WithRetryBudget(0, 2), WithEjection(0, 0, 0, 0))
	release := make(chan struct{})
	var running, peak atomic.Int64
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			attempt := 0
			_ = b.Do(context.Background(), "k", func(context.Context, Endpoint) error {
				if attempt++; attempt == 1 {
					return errors.New("fail fast")
				}
				n := running.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				<-release
				running.Add(-1)
				return nil
			})
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.Stats().Retries+b.Stats().RetriesDenied < 10 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	st := b.Stats()
	if peak.Load() > 2 || st.Retries != 2 || st.RetriesDenied != 8 {
		t.Fatalf("peak %d retries in flight, stats %+v; want at most 2, 2 retried and 8 denied", peak.Load(), st)
	}
}
