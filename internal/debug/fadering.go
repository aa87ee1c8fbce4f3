package debug

import (
	"time"

	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/predict"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// fadeRing returns the N-ring implementation p runs on the cluster, or nil
// when it runs no fade schedule there and picks from d's ring. The ring is
// built on first use, at now, and kept with the snapshot: its picks from
// then on do not depend on when it was built (fadeschedule.Schedule.Build),
// as the client's do not, which builds it once per schedule change.
func (h *Handler) fadeRing(snap *snapshot.Snapshot, p dataplane.Implementation, cluster string, d *snapshot.Decoded, now time.Time) (*predict.FadeRing, error) {
	rc := h.cache(snap)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	k := ringKey{p.Kind, p.Dialect, cluster}
	if f, ok := rc.fades[k]; ok {
		return f, nil
	}
	f, err := predict.NewFadeRing(snap, p, cluster, d, now)
	if err != nil {
		return nil, err
	}
	rc.fades[k] = f
	return f, nil
}
