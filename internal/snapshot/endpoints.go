package snapshot

import (
	"cmp"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringxds/ringxds/internal/fadein"
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
	// MetadataClusterVersion is, in the locality's MetadataRingxds
	// namespace, the content version of the cluster's CDS resources: a
	// Cluster change always changes its ClusterLoadAssignment too, so every
	// client receives the CLA again after the Cluster, which is what
	// completes Envoy's cluster warming (docs/xds.md, "Wire order").
	MetadataClusterVersion = "cluster_version"
)

// RingKey is the string an endpoint is hashed under on a ring_hash ring
// (model.Endpoint.RingKey).
func RingKey(ep *model.Endpoint) string { return ep.RingKey() }

// buildLoadAssignment translates a cluster's endpoints into the one
// ClusterLoadAssignment every kind is served. fade, when not nil, supplies
// the weights and fade-in metadata of the current step. clusterVersion,
// the content version of the cluster's CDS resources, goes into the
// locality's metadata, so the CLA changes whenever the Cluster does.
func buildLoadAssignment(c *model.Cluster, fade *fadePlan, clusterVersion string) *endpointv3.ClusterLoadAssignment {
	type keyed struct {
		key, hostPort string
		ep            *model.Endpoint
	}
	eps := make([]keyed, len(c.Endpoints))
	for i := range c.Endpoints {
		ep := &c.Endpoints[i]
		k := keyed{hostPort: ep.HostPort(), ep: ep}
		k.key = k.hostPort
		if ep.HashKey != "" {
			k.key = ep.HashKey // as RingKey
		}
		eps[i] = k
	}
	// grpc-go sorts endpoints by hash key before its ring walk
	// (balancer/ringhash/ring.go, normalizeWeights in v1.85.0:
	// sort.Slice(ret, func(i, j int) bool { return ret[i].hashKey < ret[j].hashKey })),
	// while Envoy walks hosts in EDS order (ring_hash_lb.cc). Publishing EDS
	// already in that order makes both walks, and so both rings, identical.
	// Ring keys are unique (model.Validate refuses a clash), so there are
	// no ties; host:port would break one deterministically.
	slices.SortFunc(eps, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.hostPort, b.hostPort))
	})

	var ringSizes *structpb.Value
	if fade != nil && fade.ring != nil {
		// One list shared by every endpoint: the messages are read only.
		pairs := make([]*structpb.Value, len(fade.ring.pairs))
		for i, p := range fade.ring.pairs {
			pairs[i] = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
				structpb.NewNumberValue(float64(p[0])), structpb.NewNumberValue(float64(p[1])),
			}})
		}
		ringSizes = structpb.NewListValue(&structpb.ListValue{Values: pairs})
	}
	lbEndpoints := make([]*endpointv3.LbEndpoint, len(eps))
	arena := newEndpointArena(len(eps))
	for i, k := range eps {
		lbEndpoints[i] = arena.lbEndpoint(i, k.ep)
		if fade != nil {
			arena.applyFade(i, fade.byHostPort[k.hostPort], fade.curve, ringSizes)
		}
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
			Metadata: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
				MetadataRingxds: {Fields: map[string]*structpb.Value{MetadataClusterVersion: structpb.NewStringValue(clusterVersion)}},
			}},
		}},
	}
}

// applyFade overrides endpoint i's weight with the fade plan's and adds the
// fade-in metadata: the final ring entries in a laid-out cluster, and the
// start and curve while the endpoint fades.
func (a *endpointArena) applyFade(i int, fe fadeEndpoint, curve fadein.Curve, ringSizes *structpb.Value) {
	a.weights[i].Value = fe.weight
	rx := a.ringxds[i].Fields
	if fe.entries > 0 {
		rx[MetadataRingEntries] = structpb.NewNumberValue(float64(fe.entries))
		if ringSizes != nil {
			rx[MetadataRingSizes] = ringSizes
		}
	}
	if fe.fading {
		rx[MetadataFadeStart] = structpb.NewStringValue(fe.start.UTC().Format(time.RFC3339Nano))
		rx[MetadataFadeDuration] = structpb.NewStringValue(curve.Duration.String())
		rx[MetadataFadeExponent] = structpb.NewNumberValue(curve.Exponent)
	}
}

// endpointArena allocates the fixed-shape messages of n endpoints in one
// slice per type rather than one allocation per message: a cluster of a
// hundred endpoints would otherwise cost a thousand small allocations.
type endpointArena struct {
	lbEndpoints []endpointv3.LbEndpoint
	hostIDs     []endpointv3.LbEndpoint_Endpoint
	endpoints   []endpointv3.Endpoint
	addresses   []corev3.Address
	sockAddrs   []corev3.Address_SocketAddress
	sockets     []corev3.SocketAddress
	ports       []corev3.SocketAddress_PortValue
	weights     []wrapperspb.UInt32Value
	metadata    []corev3.Metadata
	ringxds     []structpb.Struct
}

func newEndpointArena(n int) *endpointArena {
	return &endpointArena{
		lbEndpoints: make([]endpointv3.LbEndpoint, n),
		hostIDs:     make([]endpointv3.LbEndpoint_Endpoint, n),
		endpoints:   make([]endpointv3.Endpoint, n),
		addresses:   make([]corev3.Address, n),
		sockAddrs:   make([]corev3.Address_SocketAddress, n),
		sockets:     make([]corev3.SocketAddress, n),
		ports:       make([]corev3.SocketAddress_PortValue, n),
		weights:     make([]wrapperspb.UInt32Value, n),
		metadata:    make([]corev3.Metadata, n),
		ringxds:     make([]structpb.Struct, n),
	}
}

// lbEndpoint builds endpoint i of the arena.
func (a *endpointArena) lbEndpoint(i int, ep *model.Endpoint) *endpointv3.LbEndpoint {
	fm := make(map[string]*structpb.Struct, 2)
	if ep.HashKey != "" {
		fm[MetadataEnvoyLB] = &structpb.Struct{Fields: map[string]*structpb.Value{
			MetadataHashKey: structpb.NewStringValue(ep.HashKey),
		}}
	}
	rx := &a.ringxds[i]
	rx.Fields = make(map[string]*structpb.Value, 2)
	rx.Fields[MetadataScheme] = structpb.NewStringValue(ep.Scheme)
	if ep.Zone != "" {
		rx.Fields[MetadataZone] = structpb.NewStringValue(ep.Zone)
	}
	fm[MetadataRingxds] = rx
	md := &a.metadata[i]
	md.FilterMetadata = fm

	sock := &a.sockets[i]
	sock.Protocol = corev3.SocketAddress_TCP
	sock.Address = ep.Address
	a.ports[i].PortValue = ep.Port
	sock.PortSpecifier = &a.ports[i]
	a.sockAddrs[i].SocketAddress = sock
	a.addresses[i].Address = &a.sockAddrs[i]
	a.endpoints[i].Address = &a.addresses[i]
	a.hostIDs[i].Endpoint = &a.endpoints[i]
	a.weights[i].Value = ep.Weight

	lbe := &a.lbEndpoints[i]
	lbe.HostIdentifier = &a.hostIDs[i]
	lbe.HealthStatus = corev3.HealthStatus_HEALTHY
	lbe.LoadBalancingWeight = &a.weights[i]
	lbe.Metadata = md
	return lbe
}
