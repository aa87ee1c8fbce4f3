package snapshot

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"time"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	maglevv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/ringhash"
)

// Load-balancing policy extension names and type URLs as published in
// Cluster.load_balancing_policy.
const (
	// PolicyNameRingHash is Envoy's ring_hash extension name.
	PolicyNameRingHash = "envoy.load_balancing_policies.ring_hash"
	// PolicyNameMaglev is Envoy's maglev extension name.
	PolicyNameMaglev = "envoy.load_balancing_policies.maglev"
	// PolicyNameSkipper names the custom Skipper ring policy.
	PolicyNameSkipper = "ringxds.skipper"
	// SkipperTypeURL is the TypedStruct type_url of the Skipper policy.
	// grpc-go takes the balancer name from the part after the last '/', so a
	// gRPC client with a balancer registered as "ringxds.skipper" would run it.
	SkipperTypeURL = "type.googleapis.com/ringxds.skipper"
	// PolicyNameRingHashFade names the custom policy that runs a laid-out
	// ring_hash cluster's ring and cuts each key over to a new endpoint on
	// its own during a fade-in (clientlib/grpcbalancer).
	PolicyNameRingHashFade = "ringxds.ring_hash"
	// RingHashFadeTypeURL is the TypedStruct type_url of that policy.
	RingHashFadeTypeURL = "type.googleapis.com/ringxds.ring_hash"
)

// connectTimeout is Envoy's default, set explicitly so that the published
// resource, not an Envoy default, says what applies.
const connectTimeout = 5 * time.Second

// buildCluster translates a cluster into the CDS resource served to kind.
// fade, when not nil, may replace the ring size for the current step.
//
// The kinds differ in where the policy goes (docs/grpc-clients.md):
//   - Envoy and the client library read the typed load_balancing_policy
//     list alone.
//   - KindGRPC gets the typed list and, with the same ring sizes, the
//     legacy lb_policy + ring_hash_lb_config. Clients with gRFC A52 (grpc-go
//     v1.56, C-core 1.55, grpc-java 1.47 and later) take the typed list and
//     ignore the rest; older ones and those with A52 switched off read the
//     legacy fields instead of falling back to round_robin. grpc-go checks
//     the legacy fields first (xdsresource/unmarshal_cds.go), so they are
//     always valid.
//   - KindGRPCLegacy gets the legacy fields only: grpc-js-xds NACKs a typed
//     RingHash with explicit sizes but reads the legacy ones correctly.
//   - KindGRPCRoundRobin asks for round_robin: its clients crash in
//     ring_hash.
func buildCluster(c *model.Cluster, kind Kind, fade *fadePlan) (*clusterv3.Cluster, []string, error) {
	cl := &clusterv3.Cluster{
		Name:                 c.Name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			EdsConfig: adsConfigSource(),
		},
		ConnectTimeout: durationpb.New(connectTimeout),
	}
	if kind == KindGRPCRoundRobin {
		cl.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
		return cl, nil, nil
	}
	if kind == KindGRPC || kind == KindGRPCLegacy {
		minSize, maxSize := ringSizes(c, fade)
		cl.LbPolicy = clusterv3.Cluster_RING_HASH
		cl.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{
			HashFunction:    clusterv3.Cluster_RingHashLbConfig_XX_HASH,
			MinimumRingSize: wrapperspb.UInt64(minSize),
			MaximumRingSize: wrapperspb.UInt64(maxSize),
		}}
		if kind == KindGRPCLegacy {
			return cl, nil, nil
		}
	}
	policies, notes, err := lbPolicies(c, kind, fade)
	if err != nil {
		return nil, nil, err
	}
	cl.LoadBalancingPolicy = &clusterv3.LoadBalancingPolicy{Policies: policies}
	return cl, notes, nil
}

// ringSizes are the ring_hash sizes published for the cluster: as
// configured, or, when laid out for fade-in, the step's (stepRing): a
// minimum that the EDS weights turn into exactly the planned entries, under
// the configured maximum.
func ringSizes(c *model.Cluster, fade *fadePlan) (minSize, maxSize uint64) {
	if fade != nil && fade.layout {
		return fade.ring.minRing, fade.ring.maxRing
	}
	return c.MinRingSize, c.MaxRingSize
}

// adsConfigSource points a client at the ADS stream it is already on.
func adsConfigSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

// lbPolicies chooses the load_balancing_policy list a kind can run for the
// cluster's policy, with a note for every substitution.
func lbPolicies(c *model.Cluster, kind Kind, fade *fadePlan) ([]*clusterv3.LoadBalancingPolicy_Policy, []string, error) {
	var notes []string
	var names []string
	switch {
	case c.Policy == model.PolicyRingHash && kind == KindGRPC && fade != nil && fade.layout:
		// A gRPC client can only follow a fade through EDS weights, whole
		// ring entries at a time, which cannot be exact for a batch
		// (docs/fade-in.md). grpc-go with clientlib/grpcbalancer cuts each
		// key over itself from the schedule in this entry; every other
		// gRPC client skips the unknown TypedStruct (grpc-go
		// convertCustomPolicy, C-core and grpc-java likewise) and runs the
		// ring_hash entry, the weight ramp. The entry is published for as
		// long as the cluster is laid out, not only mid-fade, so a fade's
		// start or end never switches a client's policy.
		names = []string{PolicyNameRingHashFade, PolicyNameRingHash}
	case c.Policy == model.PolicyRingHash:
		names = []string{PolicyNameRingHash}
	case c.Policy == model.PolicyMaglev && kind == KindGRPC:
		// grpc-go has no Maglev: a MAGLEV lb_policy is NACKed and a Maglev
		// load_balancing_policy entry has no converter (xdslbregistry), so
		// the whole Cluster would be rejected.
		names = []string{PolicyNameRingHash}
		notes = append(notes, "maglev is published to grpc clients as ring_hash: gRPC NACKs MAGLEV")
	case c.Policy == model.PolicyMaglev:
		names = []string{PolicyNameMaglev}
	case c.Policy == model.PolicySkipper && kind == KindEnvoy:
		names = []string{PolicyNameRingHash}
		notes = append(notes, "skipper is published to envoy clients as ring_hash: Envoy has no Skipper ring")
	case c.Policy == model.PolicySkipper:
		// grpc-go v1.85.0 internal/xds/xdsclient/xdslbregistry: ConvertToServiceConfig
		// walks the list "stopping at the first supported policy"; for a
		// TypedStruct, converter.convertCustomPolicy returns (nil, nil) when
		// balancer.Get of the name after the type_url's last '/' is nil, which
		// makes the walk continue to the next entry. A gRPC client without a
		// "ringxds.skipper" balancer therefore runs the ring_hash entry.
		names = []string{PolicyNameSkipper, PolicyNameRingHash}
		if kind == KindClientlib && weighted(c) {
			notes = append(notes, "skipper rings are unweighted: endpoint weights apply only where this cluster runs as ring_hash (Envoy, gRPC)")
		}
		if kind == KindGRPC {
			notes = append(notes, "skipper is published to grpc clients as ringxds.skipper then ring_hash: grpc-go runs ring_hash unless a ringxds.skipper balancer is registered")
		}
	default:
		return nil, nil, fmt.Errorf("unknown policy %q", c.Policy)
	}

	out := make([]*clusterv3.LoadBalancingPolicy_Policy, len(names))
	for i, name := range names {
		var cfg proto.Message
		switch name {
		case PolicyNameRingHash:
			minSize, maxSize := ringSizes(c, fade)
			cfg = &ringhashv3.RingHash{
				// grpc-go rejects anything but XX_HASH, DEFAULT_HASH included
				// (v1.85.0 xdslbregistry/converter: convertRingHashProtoToServiceConfig,
				// "unsupported ring_hash hash function"), although Envoy reads
				// DEFAULT_HASH as xxHash.
				HashFunction:    ringhashv3.RingHash_XX_HASH,
				MinimumRingSize: wrapperspb.UInt64(minSize),
				MaximumRingSize: wrapperspb.UInt64(maxSize),
			}
		case PolicyNameMaglev:
			cfg = &maglevv3.Maglev{TableSize: wrapperspb.UInt64(c.TableSize)}
		case PolicyNameRingHashFade:
			cfg = &xdstypev3.TypedStruct{TypeUrl: RingHashFadeTypeURL, Value: fadeSchedule(c, fade)}
		case PolicyNameSkipper:
			// grpc-go hands the Struct to a registered balancer as its JSON
			// config (clientlib/grpcbalancer). The route's hash policy
			// cannot reach that balancer (grpc-go keeps the request hash
			// under an internal context key), so the header it hashes
			// travels here.
			cfg = &xdstypev3.TypedStruct{TypeUrl: SkipperTypeURL, Value: &structpb.Struct{Fields: map[string]*structpb.Value{
				"hash_header": structpb.NewStringValue(c.HashHeader),
			}}}
		}
		a, err := marshalAny(cfg)
		if err != nil {
			return nil, nil, err
		}
		out[i] = &clusterv3.LoadBalancingPolicy_Policy{
			TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: name, TypedConfig: a},
		}
	}
	return out, notes, nil
}

// ringNotes explains when Envoy and grpc-go, both given this cluster as
// ring_hash, can build different rings (docs/ring-sizes.md).
func ringNotes(c *model.Cluster, fade *fadePlan) []string {
	if c.Policy == model.PolicyMaglev {
		// Envoy runs Maglev; only gRPC clients get a ring, with nothing to
		// agree with.
		return nil
	}
	if fade != nil && fade.layout {
		// The step's weights make every walk exact (stepRing); only the
		// gRPC clients' ring size cap can still make them differ.
		if fade.ring.total > ringhash.GRPCRingHashCap {
			return []string{fmt.Sprintf("fade-in ring of %d entries exceeds the gRPC clients' cap of %d (grpc-go GRPC_RING_HASH_CAP, grpc.lb.ring_hash.ring_size_cap in grpc-js and C-core): gRPC clients build a smaller ring than Envoy and pick differently", fade.ring.total, ringhash.GRPCRingHashCap)}
		}
		return nil
	}
	if why := ringsDiffer(c); why != "" {
		return []string{why}
	}
	return nil
}

// ringsDiffer returns why Envoy's and grpc-go's ring_hash rings for the
// cluster can differ, or "" when they are identical entry for entry.
func ringsDiffer(c *model.Cluster) string {
	if c.MinRingSize > ringhash.GRPCRingHashCap || c.MaxRingSize > ringhash.GRPCRingHashCap {
		return fmt.Sprintf("ring size %d..%d exceeds the gRPC clients' cap of %d (grpc-go GRPC_RING_HASH_CAP, grpc.lb.ring_hash.ring_size_cap in grpc-js and C-core): gRPC clients build a smaller ring than Envoy and pick differently", c.MinRingSize, c.MaxRingSize, ringhash.GRPCRingHashCap)
	}
	var sum uint64
	equal := true
	for i := range c.Endpoints {
		sum += uint64(c.Endpoints[i].Weight)
		equal = equal && c.Endpoints[i].Weight == c.Endpoints[0].Weight
	}
	if equal {
		return ""
	}
	// Section 5 of the ring dialects: with integer weights summing to a
	// power of two S and minimum_ring_size 2^m >= S, every float operation
	// of both ring walks is exact and the rings are identical.
	if bits.OnesCount64(sum) == 1 && bits.OnesCount64(c.MinRingSize) == 1 && sum <= c.MinRingSize {
		return ""
	}
	return fmt.Sprintf("endpoint weights sum to %d and minimum_ring_size is %d: unless the sum is a power of two no larger than a power-of-two minimum_ring_size, Envoy and grpc-go can round ring shares differently (docs/ring-sizes.md)", sum, c.MinRingSize)
}

func weighted(c *model.Cluster) bool {
	for i := range c.Endpoints {
		if c.Endpoints[i].Weight != 1 {
			return true
		}
	}
	return false
}

// fadeSchedule is the config of the ringxds.ring_hash policy: the hash
// header, the fade curve, and every endpoint's address, ring key, final
// ring entries and, while it fades, its fade start. grpc-go passes
// balancers no endpoint metadata (v1.85.0 cdsbalancer/configbuilder.go
// reads it only for the HTTP CONNECT proxy address), so what the client
// library reads from EDS travels here. Nothing in it changes from one fade
// step to the next: only a scale event, or a fade's end, changes it.
func fadeSchedule(c *model.Cluster, fade *fadePlan) *structpb.Struct {
	eps := make([]*model.Endpoint, len(c.Endpoints))
	for i := range c.Endpoints {
		eps[i] = &c.Endpoints[i]
	}
	// EDS order, so that a schedule and the endpoints it lists read alike.
	slices.SortFunc(eps, func(a, b *model.Endpoint) int {
		return cmp.Or(cmp.Compare(RingKey(a), RingKey(b)), cmp.Compare(a.HostPort(), b.HostPort()))
	})
	list := make([]*structpb.Value, 0, len(eps))
	for _, ep := range eps {
		fe := fade.byHostPort[ep.HostPort()]
		f := map[string]*structpb.Value{
			"address":      structpb.NewStringValue(ep.HostPort()),
			"key":          structpb.NewStringValue(RingKey(ep)),
			"ring_entries": structpb.NewNumberValue(float64(fe.entries)),
		}
		if fe.fading {
			f["fade_start"] = structpb.NewStringValue(fe.start.UTC().Format(time.RFC3339Nano))
		}
		list = append(list, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"hash_header":   structpb.NewStringValue(c.HashHeader),
		"fade_duration": structpb.NewStringValue(fade.curve.Duration.String()),
		"fade_exponent": structpb.NewNumberValue(fade.curve.Exponent),
		"endpoints":     structpb.NewListValue(&structpb.ListValue{Values: list}),
	}}
}
