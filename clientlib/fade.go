package clientlib

import (
	"fmt"
	"net"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// newFader returns the N-ring for a cluster with endpoints fading in at
// now, or nil when there is nothing to fade or the published ring already
// fades.
//
// A ring_hash cluster whose ring the server lays out for fade-in (its
// endpoints carry ring_entries) ramps through its EDS weights: the decoded
// ring is then, step by step, the ring Envoy and grpc-go build, and a new
// endpoint only ever holds entries it keeps. Fading it again here would
// fade twice. Skipper (which ignores weights) and Maglev (whose server
// keeps weights) fade in here, with one ring per scale-up event.
func newFader(cds *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment, d *snapshot.Decoded, now time.Time) (*fadein.NRing, error) {
	// Decode reads the fade metadata (snapshot.MetadataFadeStart and
	// siblings in the "ringxds" namespace); metadata that does not parse
	// leaves an endpoint established there, and so here.
	members := make([]fadein.Member, len(d.Endpoints))
	fading, laidOut := false, false
	for i, de := range d.Endpoints {
		members[i] = fadein.Member{
			Key:       ringhash.Endpoint{Key: de.Addr, Weight: de.Weight},
			FadeStart: de.FadeStart,
			Curve:     de.FadeCurve,
		}
		laidOut = laidOut || de.RingEntries > 0
		if !de.FadeStart.IsZero() && de.FadeCurve.Share(now.Sub(de.FadeStart)) < 1 {
			fading = true
		}
	}
	if !fading || (d.Policy == ringhash.PolicyRingHash && laidOut) {
		return nil, nil
	}

	// Each ring of the N-ring is decoded from the published resources cut
	// down to its members, so it is exactly the ring the dialect builds
	// for that endpoint set. Members are keyed by address.
	byAddr := make(map[string]*endpointv3.LbEndpoint, len(d.Endpoints))
	for _, loc := range cla.GetEndpoints() {
		if loc.GetPriority() != 0 {
			continue
		}
		for _, lbe := range loc.GetLbEndpoints() {
			sa := lbe.GetEndpoint().GetAddress().GetSocketAddress()
			byAddr[joinHostPort(sa)] = lbe
		}
	}
	build := func(eps []ringhash.Endpoint) (ringhash.Ring, error) {
		lbes := make([]*endpointv3.LbEndpoint, len(eps))
		for i, ep := range eps {
			lbes[i] = byAddr[ep.Key]
		}
		sub := &endpointv3.ClusterLoadAssignment{
			ClusterName: cla.GetClusterName(),
			Endpoints:   []*endpointv3.LocalityLbEndpoints{{Locality: &corev3.Locality{}, LbEndpoints: lbes}},
		}
		sd, err := snapshot.Decode(cds, sub, snapshot.KindClientlib)
		if err != nil {
			return nil, err
		}
		return sd.Ring, nil
	}
	n := fadein.NewNRing(build)
	if err := n.Update(members, now); err != nil {
		return nil, fmt.Errorf("fade-in rings: %w", err)
	}
	return n, nil
}

// joinHostPort is DecodedEndpoint.Addr's form of a socket address.
func joinHostPort(sa *corev3.SocketAddress) string {
	return net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10))
}
