package clientlib

import (
	"cmp"
	"fmt"
	"net"
	"slices"
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
//
// The N-ring is built only within limits: at most maxEvents distinct fade
// events, and at most maxEntries ring entries over all its rings. Both are
// checked before any ring is built (the entries from the published ring's
// size), and the entries again as each ring is built, so a server cannot
// make the client build more than the budget. It returns the N-ring's
// entries.
func newFader(cds *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment, d *snapshot.Decoded, now time.Time, maxEvents, maxEntries int) (*fadein.NRing, int, error) {
	// Decode reads the fade metadata (snapshot.MetadataFadeStart and
	// siblings in the "ringxds" namespace); metadata that does not parse
	// leaves an endpoint established there, and so here.
	members := make([]fadein.Member, len(d.Endpoints))
	laidOut := false
	// The N-ring groups fading members into events by start and curve.
	events := map[fadeEvent]int{}
	established := 0
	for i, de := range d.Endpoints {
		members[i] = fadein.Member{
			Key:       ringhash.Endpoint{Key: de.Addr, Weight: de.Weight},
			FadeStart: de.FadeStart,
			Curve:     de.FadeCurve,
		}
		laidOut = laidOut || de.RingEntries > 0
		if !de.FadeStart.IsZero() && de.FadeCurve.Share(now.Sub(de.FadeStart)) < 1 {
			events[fadeEvent{de.FadeStart.UnixNano(), de.FadeCurve}]++
		} else {
			established++
		}
	}
	if len(events) == 0 || (d.Policy == ringhash.PolicyRingHash && laidOut) {
		return nil, 0, nil
	}
	if len(events) > maxEvents {
		return nil, 0, &budgetError{budget: budgetFadeEvents, msg: fmt.Sprintf(
			"%d fade-in events (distinct fade_start) exceed the fade-event budget of %d per cluster (WithFadeBudget)", len(events), maxEvents)}
	}
	if est := estimateEntries(d, events, established); est > maxEntries {
		return nil, 0, &budgetError{budget: budgetClusterEntries, msg: fmt.Sprintf(
			"fade-in rings of about %d entries (%d events) exceed the ring-entry budget left to the cluster, %d (WithRingBudget)", est, len(events), maxEntries)}
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
	entries := 0
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
		if entries += sd.Ring.Size(); entries > maxEntries {
			return nil, &budgetError{budget: budgetClusterEntries, msg: fmt.Sprintf(
				"fade-in rings of over %d entries exceed the ring-entry budget left to the cluster, %d (WithRingBudget)", entries, maxEntries)}
		}
		return sd.Ring, nil
	}
	n := fadein.NewNRing(build)
	if err := n.Update(members, now); err != nil {
		return nil, 0, fmt.Errorf("fade-in rings: %w", err)
	}
	return n, entries, nil
}

// fadeEvent is the N-ring's grouping of fading members.
type fadeEvent struct {
	start int64
	curve fadein.Curve
}

// estimateEntries is the size of the N-ring's rings, before building them:
// one ring for the established members and one per event, each adding the
// event's members. Skipper rings have a fixed number of entries per
// endpoint; ring_hash and Maglev rings are taken at the published ring's
// size (Maglev's table is that size whatever the members, and a ring_hash
// subset's ring is no larger than the full set's).
func estimateEntries(d *snapshot.Decoded, events map[fadeEvent]int, established int) int {
	rings := len(events) + 1
	if established == 0 {
		rings-- // the oldest event is the established ring
	}
	if d.Policy != ringhash.PolicySkipper {
		return rings * d.Ring.Size()
	}
	// Members accumulate ring by ring, events in the N-ring's order.
	keys := make([]fadeEvent, 0, len(events))
	for e := range events {
		keys = append(keys, e)
	}
	slices.SortFunc(keys, func(a, b fadeEvent) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.curve.Duration, b.curve.Duration), cmp.Compare(a.curve.Exponent, b.curve.Exponent))
	})
	total, members := 0, established
	if established > 0 {
		total = members * ringhash.SkipperVnodes
	}
	for _, e := range keys {
		members += events[e]
		total += members * ringhash.SkipperVnodes
	}
	return total
}

// joinHostPort is DecodedEndpoint.Addr's form of a socket address.
func joinHostPort(sa *corev3.SocketAddress) string {
	return net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10))
}
