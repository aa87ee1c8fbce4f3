package clientlib

import (
	"fmt"
	"net"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// Fade-in metadata in the "ringxds" endpoint metadata namespace, as the
// server publishes it (internal/snapshot, MetadataFadeStart and siblings).
const (
	metaFadeStart       = "fade_start"    // RFC 3339, nanoseconds
	metaFadeDuration    = "fade_duration" // Go duration, "30s"
	metaFadeExponent    = "fade_exponent" // number
	metaRingEntries     = "ring_entries"  // set when ring_hash is laid out for a weight ramp
	defaultFadeExponent = 1.0
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
func newFader(cds *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment, d *snapshot.Decoded, now time.Time) (fader, error) {
	members := make([]fadein.Member, len(d.Endpoints))
	fading, laidOut := false, false
	for i, de := range d.Endpoints {
		members[i].Key = ringhash.Endpoint{Key: de.Addr, Weight: de.Weight}
		f := de.Metadata.GetFields()
		if _, ok := f[metaRingEntries]; ok {
			laidOut = true
		}
		start, ok := f[metaFadeStart]
		if !ok {
			continue
		}
		m, ok := fadeMember(start, f)
		if !ok {
			// As Decode and the data planes do: fade metadata that does
			// not parse leaves the endpoint established.
			continue
		}
		m.Key = members[i].Key
		members[i] = m
		if m.Curve.Share(now.Sub(m.FadeStart)) < 1 {
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

func fadeMember(start *structpb.Value, f map[string]*structpb.Value) (fadein.Member, bool) {
	var m fadein.Member
	t, err := time.Parse(time.RFC3339Nano, start.GetStringValue())
	if err != nil {
		return m, false
	}
	d, err := time.ParseDuration(f[metaFadeDuration].GetStringValue())
	if err != nil || d <= 0 {
		return m, false
	}
	exp := defaultFadeExponent
	if v, ok := f[metaFadeExponent]; ok {
		if exp = v.GetNumberValue(); !(exp > 0) {
			return m, false
		}
	}
	m.FadeStart, m.Curve = t, fadein.Curve{Duration: d, Exponent: exp}
	return m, true
}

// joinHostPort is DecodedEndpoint.Addr's form of a socket address.
func joinHostPort(sa *corev3.SocketAddress) string {
	return net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10))
}
