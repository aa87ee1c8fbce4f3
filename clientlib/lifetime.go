package clientlib

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// lifetime is a balancer's life: the references handed out, its end, and
// what the client knows of why the cluster has no ring.
type lifetime struct {
	refs   int // guarded by the Client's mu
	cancel context.CancelFunc
	done   chan struct{} // closed when the balancer is closed
	closed atomic.Bool

	mu     sync.Mutex
	owner  *Client
	cause  error     // why the cluster has no ring yet, when known
	stale  time.Time // when the server stopped publishing the cluster
	server func() error
}

func (l *lifetime) init() { l.done = make(chan struct{}) }

func (l *lifetime) isClosed() bool { return l.closed.Load() }

// setCause records why the cluster has no ring, nil once it has one.
func (l *lifetime) setCause(err error) {
	l.mu.Lock()
	l.cause = err
	l.mu.Unlock()
}

// setStale records when the cluster left the server's responses (zero when
// it is back), and reports whether that changed.
func (l *lifetime) setStale(since time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	changed := l.stale.IsZero() != since.IsZero()
	if changed {
		l.stale = since
	}
	return changed
}

func (l *lifetime) staleSince() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stale
}

// notReady is the error of a balancer without a ring: ErrNotReady wrapping
// why, when the client knows (the server does not publish the cluster, it
// was rejected, the server is unreachable), and ctxErr, if the wait ended.
func (b *Balancer) notReady(ctxErr error) error {
	b.life.mu.Lock()
	cause, server := b.life.cause, b.life.server
	b.life.mu.Unlock()
	if cause == nil && server != nil {
		cause = server()
	}
	switch {
	case cause != nil && ctxErr != nil:
		return fmt.Errorf("%w: %s: %w (%w)", ErrNotReady, b.cluster, cause, ctxErr)
	case cause != nil:
		return fmt.Errorf("%w: %s: %w", ErrNotReady, b.cluster, cause)
	case ctxErr != nil:
		return fmt.Errorf("%w: %s: %w", ErrNotReady, b.cluster, ctxErr)
	}
	return fmt.Errorf("%w: %s", ErrNotReady, b.cluster)
}

// Close releases this reference to the balancer. When every Balancer call
// that returned it has been closed, the client unsubscribes from the
// cluster and stops its background work; Pick and Do then return ErrClosed.
// Closing more often than the balancer was returned is a no-op.
func (b *Balancer) Close() error {
	if c := b.life.client(); c != nil {
		c.release(b)
	}
	return nil
}

// shutdown ends the balancer for good: its ticker stops, waiters in
// Client.Balancer return ErrClosed, and picks find no ring.
func (b *Balancer) shutdown() {
	if !b.life.closed.CompareAndSwap(false, true) {
		return
	}
	if b.life.cancel != nil {
		b.life.cancel()
	}
	b.state.Store(nil)
	close(b.life.done)
}

// client is the Client the balancer belongs to.
func (l *lifetime) client() *Client {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owner
}
