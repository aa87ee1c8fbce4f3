// Package predict answers where a data plane sends a key, from the
// resources a snapshot publishes to it: the ring the implementation decodes
// from them (snapshot.DecodeAs in its dialect) or, for one that runs the
// fade schedule ringxds publishes (grpc-go with clientlib/grpcbalancer),
// the N-ring of that schedule. /debug/pick and ringxdsctl both answer
// through it, so an offline answer is the server's.
package predict

import (
	"errors"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/fadeschedule"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// ErrNotPublished is returned for a cluster whose Cluster or
// ClusterLoadAssignment the snapshot does not publish to the kind.
var ErrNotPublished = errors.New("cluster or endpoints not published")

// Decode returns the ring a data plane of dialect d builds from the
// resources snap publishes to kind for cluster.
func Decode(snap *snapshot.Snapshot, kind snapshot.Kind, d snapshot.Dialect, cluster string) (*snapshot.Decoded, error) {
	res := snap.Kinds[kind]
	cds, _ := res[resource.ClusterType][cluster].(*clusterv3.Cluster)
	cla, _ := res[resource.EndpointType][cluster].(*endpointv3.ClusterLoadAssignment)
	if cds == nil || cla == nil {
		return nil, ErrNotPublished
	}
	return snapshot.DecodeAs(cds, cla, d)
}

// FadeRing is the N-ring clientlib/grpcbalancer runs on a cluster from the
// schedule published to it.
type FadeRing struct {
	// NRing is the package's ring, read as the package reads it.
	NRing *fadein.NRing
	// Addrs maps the ring's member indices to endpoints.
	Addrs []string
}

// Pick is the endpoint the ring sends request hash h to at now: at the
// fade step in force, as the package's picker reads it.
func (f *FadeRing) Pick(h uint64, now time.Time) string {
	return f.Addrs[f.NRing.Pick(h, fadein.StepTime(now))]
}

// NewFadeRing returns the N-ring implementation p runs on the cluster, or
// nil when it runs no fade schedule there and picks from d's ring (d is
// the ring Decode gives for p). The ring is built at now; its picks from
// then on do not depend on when it was built (fadeschedule.Schedule.Build),
// as the client's do not, which builds it once per schedule change.
func NewFadeRing(snap *snapshot.Snapshot, p dataplane.Implementation, cluster string, d *snapshot.Decoded, now time.Time) (*FadeRing, error) {
	if !p.FadeSchedule {
		return nil, nil
	}
	cds, _ := snap.Kinds[p.Kind][resource.ClusterType][cluster].(*clusterv3.Cluster)
	js, ok, err := snapshot.RingHashFadeConfig(cds, p.Dialect)
	if err != nil || !ok {
		return nil, err
	}
	sched, err := fadeschedule.Parse(js)
	if err != nil {
		return nil, err
	}
	// The client holds the priority-0 healthy endpoints grpc-go hands the
	// policy: d's.
	inEDS := make(map[string]bool, len(d.Endpoints))
	for _, ep := range d.Endpoints {
		inEDS[ep.Addr] = true
	}
	n, index, err := sched.Build(func(addr string) bool { return inEDS[addr] }, now)
	if err != nil {
		return nil, err
	}
	f := &FadeRing{NRing: n, Addrs: make([]string, len(index))}
	for i, m := range index {
		f.Addrs[i] = sched.Members[m].Address
	}
	return f, nil
}

// Ring is what one implementation picks from on one cluster.
type Ring struct {
	Decoded *snapshot.Decoded
	// Fade is nil unless the implementation runs a fade schedule there.
	Fade *FadeRing
}

// Build returns the ring p picks from on cluster, as published in snap, at
// now.
func Build(snap *snapshot.Snapshot, p dataplane.Implementation, cluster string, now time.Time) (*Ring, error) {
	d, err := Decode(snap, p.Kind, p.Dialect, cluster)
	if err != nil {
		return nil, err
	}
	f, err := NewFadeRing(snap, p, cluster, d, now)
	if err != nil {
		return nil, err
	}
	return &Ring{Decoded: d, Fade: f}, nil
}

// Pick returns the policy the implementation runs and the endpoint it sends
// request hash h to at now.
func (r *Ring) Pick(h uint64, now time.Time) (policy, endpoint string) {
	if r.Fade != nil {
		return ringhash.PolicyRingHash, r.Fade.Pick(h, now)
	}
	return r.Decoded.Ring.Policy(), r.Decoded.Endpoints[r.Decoded.Ring.Pick(h)].Addr
}
