package debug

import (
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/fadeschedule"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// fadeRing is the N-ring clientlib/grpcbalancer runs on a cluster from the
// schedule published to it.
type fadeRing struct {
	ring *fadein.NRing
	// addrs maps the ring's member indices to endpoints.
	addrs []string
}

// pick is the endpoint the ring sends request hash h to at now: at the
// fade step in force, as the package's picker reads it.
func (f *fadeRing) pick(h uint64, now time.Time) string {
	return f.addrs[f.ring.Pick(h, fadein.StepTime(now))]
}

// fadeRing returns the N-ring implementation p runs on the cluster, or nil
// when it runs no fade schedule there and picks from d's ring. The ring is
// built on first use, at now, and kept with the snapshot: its picks from
// then on do not depend on when it was built (fadeschedule.Schedule.Build),
// as the client's do not, which builds it once per schedule change.
func (h *Handler) fadeRing(snap *snapshot.Snapshot, p dataplane.Implementation, cluster string, d *snapshot.Decoded, now time.Time) (*fadeRing, error) {
	rc := h.cache(snap)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	k := ringKey{p.Kind, p.Dialect, cluster}
	if f, ok := rc.fades[k]; ok {
		return f, nil
	}
	cds, _ := snap.Kinds[p.Kind][resource.ClusterType][cluster].(*clusterv3.Cluster)
	js, ok, err := snapshot.RingHashFadeConfig(cds, p.Dialect)
	if err != nil {
		return nil, err
	}
	var f *fadeRing
	if ok {
		if f, err = buildFadeRing(js, d, now); err != nil {
			return nil, err
		}
	}
	rc.fades[k] = f
	return f, nil
}

// buildFadeRing builds the N-ring of a published schedule over the
// endpoints the client holds: d's, the priority-0 healthy endpoints
// grpc-go hands the policy.
func buildFadeRing(js []byte, d *snapshot.Decoded, now time.Time) (*fadeRing, error) {
	sched, err := fadeschedule.Parse(js)
	if err != nil {
		return nil, err
	}
	inEDS := make(map[string]bool, len(d.Endpoints))
	for _, ep := range d.Endpoints {
		inEDS[ep.Addr] = true
	}
	n, index, err := sched.Build(func(addr string) bool { return inEDS[addr] }, now)
	if err != nil {
		return nil, err
	}
	f := &fadeRing{ring: n, addrs: make([]string, len(index))}
	for i, m := range index {
		f.addrs[i] = sched.Members[m].Address
	}
	return f, nil
}
