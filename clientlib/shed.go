package clientlib

import (
	"context"
	"errors"
	"sync"
)

// errAdmissionClosed ends a wait for a slot when the balancer closes.
var errAdmissionClosed = errors.New("balancer closed while waiting for a slot")

// admission caps a balancer's concurrent calls. Calls over the cap wait in
// a FIFO queue; a finishing call hands its slot straight to the head of the
// queue, so the queue drains exactly as fast as calls complete, with no
// timer or polling. Calls beyond the queue bound are refused at once.
type admission struct {
	limit, queueLimit int

	mu       sync.Mutex
	inflight int
	queue    []*waiter // FIFO; head at index 0
}

type waiter struct {
	ready   chan struct{} // closed when the slot is handed over
	granted bool          // guarded by admission.mu
}

// acquire takes a slot, waiting in line if the cap is reached. It returns
// false with the counts when the queue is full, ctx.Err() if ctx ends while
// waiting, and errAdmissionClosed if closed is closed meanwhile.
func (a *admission) acquire(ctx context.Context, closed <-chan struct{}) (ok bool, inflight, queued int, err error) {
	if a.limit <= 0 {
		return true, 0, 0, nil
	}
	a.mu.Lock()
	if a.inflight < a.limit && len(a.queue) == 0 {
		a.inflight++
		a.mu.Unlock()
		return true, 0, 0, nil
	}
	if len(a.queue) >= a.queueLimit {
		inflight, queued = a.inflight, len(a.queue)
		a.mu.Unlock()
		return false, inflight, queued, nil
	}
	w := &waiter{ready: make(chan struct{})}
	a.queue = append(a.queue, w)
	a.mu.Unlock()

	select {
	case <-w.ready:
		return true, 0, 0, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-closed:
		err = errAdmissionClosed
	}
	a.leave(w)
	return false, 0, 0, err
}

// leave takes a waiter whose wait ended out of the queue, or passes on the
// slot it was handed as the wait ended.
func (a *admission) leave(w *waiter) {
	a.mu.Lock()
	if w.granted {
		// The slot arrived as the wait ended: pass it on.
		a.mu.Unlock()
		a.release()
		return
	}
	for i, q := range a.queue {
		if q == w {
			a.queue = append(a.queue[:i], a.queue[i+1:]...)
			break
		}
	}
	a.mu.Unlock()
}

// release frees a slot, handing it to the oldest waiter if there is one.
func (a *admission) release() {
	if a.limit <= 0 {
		return
	}
	a.mu.Lock()
	if len(a.queue) > 0 {
		w := a.queue[0]
		a.queue[0] = nil
		a.queue = a.queue[1:]
		w.granted = true
		a.mu.Unlock()
		close(w.ready)
		return
	}
	a.inflight--
	a.mu.Unlock()
}

// counts returns the in-flight and queued calls.
func (a *admission) counts() (inflight, queued int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inflight, len(a.queue)
}
