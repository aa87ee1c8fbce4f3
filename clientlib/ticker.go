package clientlib

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// runTicker closes a bucket every 30 ms while the balancer has traffic, an
// endpoint fading in or one ejected, and parks while it has none.
func (b *balancer) runTicker(ctx context.Context) {
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
			b.endEjections(now)
			if s.fade != nil {
				b.refreshShares(now)
			}
			if active || s.fade != nil || b.ejected.Load() != 0 {
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

// endEjections returns endpoints whose ejection time is over to the picks,
// with a clean failure count, and lets an endpoint healthy for a base
// ejection time forget one earlier ejection, so its next one is shorter
// (Envoy's outlier detection does the same). It works on the current ring,
// under mu, so a ring update cannot interleave.
func (b *balancer) endEjections(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.state.Load()
	if s == nil {
		return
	}
	nowNanos := now.UnixNano()
	ended := false
	for i, st := range s.stats {
		switch {
		case st.ejected.Load():
			if nowNanos < st.ejectedUntil.Load() {
				continue
			}
			st.failures.Store(0)
			st.failing.Store(false)
			st.unejectedAt = nowNanos
			st.ejected.Store(false)
			ended = true
			b.log.Info("ejected endpoint back in picks", zap.String("cluster", b.cluster), zap.String("endpoint", s.eps[i].Addr))
		case st.ejections.Load() > 0 && nowNanos-st.unejectedAt > int64(b.opts.ejectBase):
			st.ejections.Add(-1)
			st.unejectedAt = nowNanos
		}
	}
	if ended {
		b.recountEjected()
	}
}

// refreshShares recomputes the shares of a fading ring as time moves its
// endpoints in. It works on the current ring, under mu: a ring installed
// since the tick began has shares of its own.
func (b *balancer) refreshShares(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.state.Load(); s != nil && s.fade != nil {
		b.setShares(s, now)
	}
}
