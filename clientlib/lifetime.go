package clientlib

import (
	"context"
	"errors"
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

	mu    sync.Mutex
	owner *Client
	cause error     // why the cluster has no ring yet, when known
	seen  bool      // the cluster's CDS resource has been accepted
	stale time.Time // when the server stopped publishing the cluster
	// server says why the server cannot be heard, nil when it can, and
	// since when it could, for as long as it has had to answer.
	server func() (since time.Time, err error)
	asked  time.Time // when the cluster was subscribed to
	// suggested: the server was asked for the names it publishes
	// (Client.suggestFor); didYouMean holds the ones a typo away.
	suggested  bool
	didYouMean []string
}

// unknownAfter is how long a reached server may stay silent about a
// cluster before the client calls the cluster unknown. A server answers a
// subscription in milliseconds when it has the cluster and not at all when
// it does not, so silence is the only sign; below a second it can as well
// be a slow server.
const unknownAfter = time.Second

func (l *lifetime) init() { l.done = make(chan struct{}) }

func (l *lifetime) isClosed() bool { return l.closed.Load() }

// setCause records why the cluster has no ring, nil once it has one.
func (l *lifetime) setCause(err error) {
	l.mu.Lock()
	l.cause = err
	l.mu.Unlock()
}

// setUnknown records that the server answered without the cluster, and
// reports whether the server is still to be asked for the names it does
// publish (startSuggest).
func (l *lifetime) setUnknown(cluster string) (ask bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cause = unknownCause(cluster, "", l.didYouMean)
	ask = !l.suggested
	l.suggested = true
	return ask
}

// startSuggest reports whether the server is still to be asked for the
// names it publishes, for a cluster with no ring, and marks it asked.
func (l *lifetime) startSuggest() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.suggested || l.seen {
		return false
	}
	l.suggested = true
	return true
}

// setSeen records that the cluster's CDS resource was accepted.
func (l *lifetime) setSeen() {
	l.mu.Lock()
	l.seen = true
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
func (b *balancer) notReady(ctxErr error) error {
	b.life.mu.Lock()
	cause, server, seen, asked, didYouMean := b.life.cause, b.life.server, b.life.seen, b.life.asked, b.life.didYouMean
	b.life.mu.Unlock()
	var heardSince time.Time
	if cause == nil && server != nil {
		heardSince, cause = server()
	}
	if cause == nil && ctxErr != nil {
		// The server can be heard and has said nothing against the
		// cluster. It answers a subscription with what it has, so long
		// silence about a name means it has no such cluster (or, once the
		// cluster came, no endpoints for it).
		silent := time.Since(maxTime(asked, heardSince))
		switch {
		case seen:
			cause = errors.New("the management server sent the cluster but not its endpoints")
		case heardSince.IsZero():
			// Connected, but nothing has come on the stream: a server
			// that answers nothing says nothing of this cluster either.
			cause = errors.New("the management server has not answered on its stream yet")
		case !asked.IsZero() && silent >= unknownAfter:
			cause = unknownCause(b.cluster, fmt.Sprintf("it sent nothing for it in %v", silent.Round(time.Millisecond)), didYouMean)
		}
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

// shutdown ends the balancer for good: its ticker stops, waiters in
// Client.Balancer return ErrClosed, and picks find no ring.
func (b *balancer) shutdown() {
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

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
