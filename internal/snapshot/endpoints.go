package snapshot

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringxds/ringxds/internal/model"
)

// Endpoint metadata namespaces and keys ringxds publishes.
const (
	// MetadataEnvoyLB is the namespace Envoy and grpc-go read hash_key from.
	MetadataEnvoyLB = "envoy.lb"
	// MetadataHashKey replaces the address as the endpoint's ring key.
	MetadataHashKey = "hash_key"
	// MetadataRingxds is the namespace of ringxds' own endpoint fields.
	MetadataRingxds = "ringxds"
	// MetadataZone is the endpoint's zone (in MetadataRingxds), when known.
	MetadataZone = "zone"
	// MetadataScheme is the endpoint's scheme (in MetadataRingxds), part of
	// its Skipper ring identity.
	MetadataScheme = "scheme"
)

// RingKey is the string an endpoint is hashed under on a ring_hash ring:
// its HashKey if set, else "host:port" (IPv6 bracketed). Envoy and grpc-go
// both derive it this way from the published metadata and address.
func RingKey(ep *model.Endpoint) string {
	if ep.HashKey != "" {
		return ep.HashKey
	}
	return ep.HostPort()
}

// buildLoadAssignment translates a cluster's endpoints into the one
// ClusterLoadAssignment every kind is served.
func buildLoadAssignment(c *model.Cluster) (*endpointv3.ClusterLoadAssignment, []string) {
	var notes []string

	type keyed struct {
		key, hostPort string
		ep            *model.Endpoint
	}
	eps := make([]keyed, len(c.Endpoints))
	for i := range c.Endpoints {
		ep := &c.Endpoints[i]
		eps[i] = keyed{key: RingKey(ep), hostPort: ep.HostPort(), ep: ep}
	}
	// grpc-go sorts endpoints by hash key before its ring walk
	// (balancer/ringhash/ring.go, normalizeWeights in v1.85.0:
	// sort.Slice(ret, func(i, j int) bool { return ret[i].hashKey < ret[j].hashKey })),
	// while Envoy walks hosts in EDS order (ring_hash_lb.cc). Publishing EDS
	// already in that order makes both walks, and so both rings, identical.
	// Ties only arise from duplicate hash keys; host:port breaks them so the
	// output stays deterministic.
	slices.SortFunc(eps, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.hostPort, b.hostPort))
	})

	lbEndpoints := make([]*endpointv3.LbEndpoint, len(eps))
	for i, k := range eps {
		if i > 0 && eps[i-1].key == k.key {
			// The two endpoints get the same ring entries; which one wins a
			// pick then depends on each data plane's unstable sort.
			notes = append(notes, fmt.Sprintf("endpoints %s and %s share the ring key %q: picks between them are ambiguous and differ between data planes", eps[i-1].hostPort, k.hostPort, k.key))
		}
		if _, err := netip.ParseAddr(k.ep.Address); err != nil {
			notes = append(notes, fmt.Sprintf("endpoint %s is a DNS name: Envoy accepts only IP addresses in EDS and rejects this cluster's endpoints", k.hostPort))
		}
		lbEndpoints[i] = buildLbEndpoint(k.ep)
	}

	return &endpointv3.ClusterLoadAssignment{
		ClusterName: c.Name,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			// grpc-go rejects a locality without an ID (unmarshal_eds.go), so
			// the single locality has an empty one rather than none.
			Locality:            &corev3.Locality{},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			Priority:            0,
			LbEndpoints:         lbEndpoints,
		}},
	}, notes
}

func buildLbEndpoint(ep *model.Endpoint) *endpointv3.LbEndpoint {
	fm := make(map[string]*structpb.Struct, 2)
	if ep.HashKey != "" {
		fm[MetadataEnvoyLB] = &structpb.Struct{Fields: map[string]*structpb.Value{
			MetadataHashKey: structpb.NewStringValue(ep.HashKey),
		}}
	}
	rx := &structpb.Struct{Fields: make(map[string]*structpb.Value, 2)}
	rx.Fields[MetadataScheme] = structpb.NewStringValue(ep.Scheme)
	if ep.Zone != "" {
		rx.Fields[MetadataZone] = structpb.NewStringValue(ep.Zone)
	}
	fm[MetadataRingxds] = rx

	return &endpointv3.LbEndpoint{
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Protocol:      corev3.SocketAddress_TCP,
				Address:       ep.Address,
				PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: ep.Port},
			}}},
		}},
		HealthStatus:        corev3.HealthStatus_HEALTHY,
		LoadBalancingWeight: wrapperspb.UInt32(ep.Weight),
		Metadata:            &corev3.Metadata{FilterMetadata: fm},
	}
}
