package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	udpatypev1 "github.com/cncf/xds/go/udpa/type/v1"
	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	maglevv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/ringhash"
)

// Decoded is a cluster as one kind of data plane sees it.
type Decoded struct {
	Cluster string
	// Policy is the ring the data plane runs: ringhash.PolicyRingHash,
	// PolicyMaglev or PolicySkipper.
	Policy string
	// HashHeader is the request header hashed for picks. CDS does not carry
	// it, so Decode leaves it empty; fill it with RouteHashHeader.
	HashHeader string
	// Endpoints are the endpoints on the ring, in EDS order. Ring picks are
	// indices into this slice.
	Endpoints []DecodedEndpoint
	Ring      ringhash.Ring
	// Dialect names the implementation whose ring this is (Dialect.Name).
	Dialect string
}

// DecodedEndpoint is one endpoint of a Decoded cluster.
type DecodedEndpoint struct {
	// Addr is "host:port", IPv6 bracketed.
	Addr string
	// Weight is the published EDS weight (1 when unset). For gRPC clients
	// the ring is built from grpc-go's derived weight, not this one.
	Weight  uint32
	Zone    string
	Scheme  string
	HashKey string
	// Metadata is the "ringxds" metadata namespace, shared with the
	// ClusterLoadAssignment: do not modify it.
	Metadata *structpb.Struct
	// FadeStart and FadeCurve are the endpoint's fade-in (MetadataFadeStart,
	// MetadataFadeDuration, MetadataFadeExponent); FadeStart is zero for an
	// established endpoint. Metadata that does not parse is ignored (the
	// endpoint counts as established), as Envoy and grpc-go ignore it.
	FadeStart time.Time
	FadeCurve fadein.Curve
	// RingEntries is MetadataRingEntries: the ring_hash entries the endpoint
	// holds once every fade is over, 0 when the cluster is not laid out for
	// fade-in. A client building its final ring uses it as the weight of
	// fadein.NewCountRing.
	RingEntries uint64
}

// ErrUndecodable is wrapped by every Decode error about resources that do
// not describe a ring the data plane would build.
var ErrUndecodable = errors.New("cannot decode ring")

func undecodable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUndecodable, fmt.Sprintf(format, args...))
}

// ErrNoEndpoints is wrapped by the Decode error of an assignment without a
// healthy endpoint at priority 0: there is no ring to build, although
// Envoy and grpc-go accept such an assignment (their requests fail).
var ErrNoEndpoints = errors.New("no healthy endpoints at priority 0")

// ErrNotConsistentHash is wrapped by every Decode error about a cluster the
// data plane runs with a policy that has no ring, such as round_robin:
// keys are then spread at random.
var ErrNotConsistentHash = errors.New("not a consistent hash")

func notConsistent(format string, args ...any) error {
	return fmt.Errorf("%w: %w: %s runs instead", ErrUndecodable, ErrNotConsistentHash, fmt.Sprintf(format, args...))
}

// Type URLs of the policies Decode interprets.
const (
	typeURLRingHash      = "type.googleapis.com/envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash"
	typeURLMaglev        = "type.googleapis.com/envoy.extensions.load_balancing_policies.maglev.v3.Maglev"
	typeURLTypedStructV3 = "type.googleapis.com/xds.type.v3.TypedStruct"
	typeURLTypedStructV1 = "type.googleapis.com/udpa.type.v1.TypedStruct"
)

// ringPolicy is the policy a data plane selected from a Cluster, with its
// parameters.
type ringPolicy struct {
	name               string // ringhash.Policy*
	hash               ringhash.HashFunction
	minSize, maxSize   uint64 // ring_hash; 0 means the data plane's default
	tableSize          uint64 // maglev; 0 means 65537
	minUnset, maxUnset bool
}

// Decode builds the ring the implementation a kind is chosen for builds
// from a published Cluster and its ClusterLoadAssignment: DecodeAs with
// kind.Dialect().
func Decode(cds *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment, kind Kind) (*Decoded, error) {
	switch kind {
	case KindEnvoy, KindGRPC, KindGRPCLegacy, KindGRPCRoundRobin, KindClientlib:
	default:
		return nil, undecodable("unknown kind %q", kind)
	}
	return DecodeAs(cds, cla, kind.Dialect())
}

// DecodeAs builds the ring that a data plane of dialect d builds from a
// published Cluster and its ClusterLoadAssignment:
//
//   - the policy is the first load_balancing_policy entry d runs (when d
//     reads that list and it is set), else the legacy lb_policy;
//   - ring_hash walks the endpoints in EDS order or sorted by key, hashes
//     hash_key or the address, and weighs them by d.Weights, within d's
//     ring size cap;
//   - Maglev and Skipper as Envoy and the client library build them.
//
// A policy that is not a consistent hash (round_robin, say) is an error
// wrapping ErrNotConsistentHash; resources d would NACK give an error
// wrapping ErrUndecodable.
//
// Only priority 0 is decoded (other priorities are failover, each with its
// own ring), and only endpoints whose health is HEALTHY or UNKNOWN, the ones
// every data plane puts on the ring while the cluster is healthy.
func DecodeAs(cds *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment, d Dialect) (*Decoded, error) {
	if cds == nil || cla == nil {
		return nil, undecodable("need both a cluster and its load assignment")
	}
	edsName := cds.GetEdsClusterConfig().GetServiceName()
	if edsName == "" {
		edsName = cds.GetName()
	}
	if cla.GetClusterName() != edsName {
		return nil, undecodable("cluster %q reads endpoints %q, given %q", cds.GetName(), edsName, cla.GetClusterName())
	}
	pol, err := selectPolicy(cds, d)
	if err != nil {
		return nil, fmt.Errorf("cluster %q, %s: %w", cds.GetName(), d.Name, err)
	}
	out := &Decoded{Cluster: cds.GetName(), Policy: pol.name, Dialect: d.Name}
	members, err := decodeEndpoints(cla, d, out)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", cds.GetName(), err)
	}
	if len(out.Endpoints) == 0 {
		return nil, fmt.Errorf("cluster %q: %w: %w", cds.GetName(), ErrUndecodable, ErrNoEndpoints)
	}
	if out.Ring, err = buildRing(pol, d, out.Endpoints, members); err != nil {
		// The ring builders refuse what the data plane refuses (duplicate
		// keys, zero or overflowing weights, sizes out of range): these
		// resources describe no ring either.
		return nil, fmt.Errorf("cluster %q: %w: %s ring: %w", cds.GetName(), ErrUndecodable, pol.name, err)
	}
	return out, nil
}

// buildRing builds the ring of the selected policy over the decoded
// endpoints, as dialect d does.
func buildRing(pol ringPolicy, d Dialect, decoded []DecodedEndpoint, members []member) (ringhash.Ring, error) {
	eps := make([]ringhash.Endpoint, len(decoded))
	for i, ep := range decoded {
		eps[i] = ringhash.Endpoint{Key: ep.HashKey, Weight: members[i].weight}
		if eps[i].Key == "" || !d.HashKey {
			addr := ep.Addr
			if d.CanonicalAddress {
				addr = canonicalHostPort(members[i].host, members[i].port)
			}
			eps[i].Key = d.KeyPrefix + addr
		}
	}
	switch pol.name {
	case ringhash.PolicyMaglev:
		return ringhash.NewMaglev(eps, pol.tableSize)
	case ringhash.PolicySkipper:
		for i, ep := range decoded {
			// Skipper's ring is unweighted; the weights published for the
			// ring_hash fallback do not apply to it.
			eps[i] = ringhash.Endpoint{Key: ringhash.SkipperIdentity(ep.Scheme, members[i].host, members[i].port)}
		}
		return ringhash.NewSkipper(eps)
	}
	opts := ringhash.RingHashOptions{Hash: pol.hash, MinRingSize: pol.minSize, MaxRingSize: pol.maxSize, SortByKey: d.SortByKey}
	if d.GRPC {
		// Every gRPC xDS client defaults unset sizes to 1024 and 8M
		// (grpc-go xdslbregistry/converter, C-core xds_cluster.cc,
		// grpc-js-xds cluster resource), then caps both at its ring size
		// cap, 4096 by default (grpc-go GRPC_RING_HASH_CAP, the
		// grpc.lb.ring_hash.ring_size_cap channel argument elsewhere).
		if pol.minUnset {
			opts.MinRingSize = ringhash.DefaultMinRingSize
		}
		if pol.maxUnset {
			opts.MaxRingSize = ringhash.DefaultMaxRingSize
		}
	}
	if d.RingCap > 0 {
		opts.MinRingSize = min(opts.MinRingSize, d.RingCap)
		opts.MaxRingSize = min(opts.MaxRingSize, d.RingCap)
	}
	return ringhash.NewRingHash(eps, opts)
}

// canonicalHostPort prints an IP address as inet_ntop does (lower case, the
// longest run of zero groups compressed) with its port; text that is no IP
// literal is kept.
func canonicalHostPort(host string, port uint32) string {
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.String()
	}
	return net.JoinHostPort(host, strconv.FormatUint(uint64(port), 10))
}

// selectPolicy picks the policy a data plane of dialect d runs. Each data
// plane walks load_balancing_policy in order and takes the first entry it
// supports; an entry it supports but that is no consistent hash (round
// robin, say) is an error here because it has no ring.
func selectPolicy(cds *clusterv3.Cluster, d Dialect) (ringPolicy, error) {
	if lbp := cds.GetLoadBalancingPolicy(); lbp != nil && d.LoadBalancingPolicy {
		var skipped []string
		for _, p := range lbp.GetPolicies() {
			cfg := p.GetTypedExtensionConfig().GetTypedConfig()
			pol, ok, err := decodePolicy(cfg, d)
			if err != nil {
				return ringPolicy{}, fmt.Errorf("policy %q: %w", p.GetTypedExtensionConfig().GetName(), err)
			}
			if ok {
				return pol, nil
			}
			skipped = append(skipped, p.GetTypedExtensionConfig().GetName())
		}
		return ringPolicy{}, undecodable("no load_balancing_policy entry this data plane runs (skipped %q)", skipped)
	}

	switch cds.GetLbPolicy() {
	case clusterv3.Cluster_RING_HASH:
		rh := cds.GetRingHashLbConfig()
		pol := ringHashPolicy(rh.GetMinimumRingSize(), rh.GetMaximumRingSize())
		switch rh.GetHashFunction() {
		case clusterv3.Cluster_RingHashLbConfig_XX_HASH:
		case clusterv3.Cluster_RingHashLbConfig_MURMUR_HASH_2:
			if d.GRPC {
				return ringPolicy{}, undecodable("gRPC clients require hash_function XX_HASH, got MURMUR_HASH_2")
			}
			pol.hash = ringhash.MurmurHash2
		default:
			return ringPolicy{}, undecodable("unknown ring_hash hash_function %v", rh.GetHashFunction())
		}
		return pol, nil
	case clusterv3.Cluster_MAGLEV:
		if !d.Maglev {
			return ringPolicy{}, undecodable("%s NACKs lb_policy MAGLEV", d.Name)
		}
		return ringPolicy{name: ringhash.PolicyMaglev, tableSize: cds.GetMaglevLbConfig().GetTableSize().GetValue()}, nil
	default:
		return ringPolicy{}, notConsistent("lb_policy %v", cds.GetLbPolicy())
	}
}

// ringHashPolicy reads the ring sizes the legacy RingHashLbConfig and the
// typed RingHash extension both carry; unset sizes take the data plane's
// defaults later.
func ringHashPolicy(minSize, maxSize *wrapperspb.UInt64Value) ringPolicy {
	return ringPolicy{
		name:     ringhash.PolicyRingHash,
		minSize:  minSize.GetValue(),
		maxSize:  maxSize.GetValue(),
		minUnset: minSize == nil,
		maxUnset: maxSize == nil,
	}
}

// decodePolicy interprets one load_balancing_policy entry. ok is false when
// a data plane of dialect d skips the entry.
func decodePolicy(cfg *anypb.Any, d Dialect) (pol ringPolicy, ok bool, err error) {
	switch cfg.GetTypeUrl() {
	case typeURLRingHash:
		rh := &ringhashv3.RingHash{}
		if err := cfg.UnmarshalTo(rh); err != nil {
			return ringPolicy{}, false, fmt.Errorf("%w: %w", ErrUndecodable, err)
		}
		if d.TypedRingSizesRejected && (rh.GetMinimumRingSize() != nil || rh.GetMaximumRingSize() != nil) {
			return ringPolicy{}, false, undecodable("%s NACKs a typed RingHash with explicit ring sizes (\"min_ring_size must be a number\")", d.Name)
		}
		pol = ringHashPolicy(rh.GetMinimumRingSize(), rh.GetMaximumRingSize())
		switch rh.GetHashFunction() {
		case ringhashv3.RingHash_XX_HASH:
		case ringhashv3.RingHash_DEFAULT_HASH:
			// Envoy reads DEFAULT_HASH as xxHash; grpc-go, grpc-js and
			// grpc-java NACK it (grpc-go xdslbregistry/converter
			// convertRingHashProtoToServiceConfig).
			if d.GRPC {
				return ringPolicy{}, false, undecodable("gRPC clients require hash_function XX_HASH, got DEFAULT_HASH")
			}
		case ringhashv3.RingHash_MURMUR_HASH_2:
			if d.GRPC {
				return ringPolicy{}, false, undecodable("gRPC clients require hash_function XX_HASH, got MURMUR_HASH_2")
			}
			pol.hash = ringhash.MurmurHash2
		default:
			return ringPolicy{}, false, undecodable("unknown ring_hash hash_function %v", rh.GetHashFunction())
		}
		return pol, true, nil
	case typeURLMaglev:
		if !d.Maglev {
			// gRPC clients register no converter for Maglev and move on.
			return ringPolicy{}, false, nil
		}
		m := &maglevv3.Maglev{}
		if err := cfg.UnmarshalTo(m); err != nil {
			return ringPolicy{}, false, fmt.Errorf("%w: %w", ErrUndecodable, err)
		}
		return ringPolicy{name: ringhash.PolicyMaglev, tableSize: m.GetTableSize().GetValue()}, true, nil
	case typeURLTypedStructV3, typeURLTypedStructV1:
		typeURL, _, err := typedStruct(cfg)
		if err != nil {
			return ringPolicy{}, false, err
		}
		// Every data plane names a custom policy by the part of type_url
		// after the last '/' and skips it when nothing by that name exists.
		if d.Skipper && customPolicyName(typeURL) == PolicyNameSkipper {
			return ringPolicy{name: ringhash.PolicySkipper}, true, nil
		}
		return ringPolicy{}, false, nil
	default:
		if strings.HasPrefix(cfg.GetTypeUrl(), "type.googleapis.com/envoy.extensions.load_balancing_policies.") {
			// A policy every data plane here runs (round robin, least
			// request, ...), but not one with a ring.
			return ringPolicy{}, false, notConsistent("%s", cfg.GetTypeUrl())
		}
		return ringPolicy{}, false, nil
	}
}

// PolicySize returns the ring or table size a load_balancing_policy entry
// asks for (the larger ring size, or the Maglev table size), 0 for any
// other entry or one that does not parse.
func PolicySize(cfg *anypb.Any) uint64 {
	switch cfg.GetTypeUrl() {
	case typeURLRingHash:
		rh := &ringhashv3.RingHash{}
		if cfg.UnmarshalTo(rh) == nil {
			return max(rh.GetMinimumRingSize().GetValue(), rh.GetMaximumRingSize().GetValue())
		}
	case typeURLMaglev:
		m := &maglevv3.Maglev{}
		if cfg.UnmarshalTo(m) == nil {
			return m.GetTableSize().GetValue()
		}
	}
	return 0
}

// typedStruct returns the type_url and value inside a TypedStruct of
// either version.
func typedStruct(cfg *anypb.Any) (string, *structpb.Struct, error) {
	if cfg.GetTypeUrl() == typeURLTypedStructV3 {
		ts := &xdstypev3.TypedStruct{}
		if err := cfg.UnmarshalTo(ts); err != nil {
			return "", nil, fmt.Errorf("%w: %w", ErrUndecodable, err)
		}
		return ts.GetTypeUrl(), ts.GetValue(), nil
	}
	ts := &udpatypev1.TypedStruct{}
	if err := cfg.UnmarshalTo(ts); err != nil {
		return "", nil, fmt.Errorf("%w: %w", ErrUndecodable, err)
	}
	return ts.GetTypeUrl(), ts.GetValue(), nil
}

// customPolicyName is the name every data plane gives a TypedStruct
// policy: the part of its type_url after the last '/'.
func customPolicyName(typeURL string) string { return typeURL[strings.LastIndex(typeURL, "/")+1:] }

// RingHashFadeConfig returns the config of the cluster's ringxds.ring_hash
// entry when a data plane of dialect d that has a balancer by that name
// (grpc-go with clientlib/grpcbalancer) runs it: d reads
// load_balancing_policy and runs no entry before it. The config is the
// JSON grpc-go hands the balancer (converter.convertCustomPolicy marshals
// the TypedStruct's value with encoding/json), which
// internal/fadeschedule reads. ok is false when the data plane runs
// another entry; DecodeAs decodes that one.
func RingHashFadeConfig(cds *clusterv3.Cluster, d Dialect) (js []byte, ok bool, err error) {
	if !d.LoadBalancingPolicy {
		return nil, false, nil
	}
	for _, p := range cds.GetLoadBalancingPolicy().GetPolicies() {
		cfg := p.GetTypedExtensionConfig().GetTypedConfig()
		if u := cfg.GetTypeUrl(); u == typeURLTypedStructV3 || u == typeURLTypedStructV1 {
			typeURL, value, err := typedStruct(cfg)
			if err != nil {
				return nil, false, err
			}
			if customPolicyName(typeURL) == PolicyNameRingHashFade {
				js, err := json.Marshal(value)
				return js, err == nil, err
			}
		}
		// An entry d rejects fails DecodeAs, which says why.
		if _, runs, err := decodePolicy(cfg, d); runs || err != nil {
			return nil, false, nil
		}
	}
	return nil, false, nil
}

// member is what a ring needs of an endpoint beyond DecodedEndpoint.
type member struct {
	host   string
	port   uint32
	weight uint32 // the weight this kind's ring uses
}

// decodeEndpoints fills out.Endpoints from the priority-0 healthy endpoints
// and returns their ring members, index for index, weighted as dialect d
// weighs them.
func decodeEndpoints(cla *endpointv3.ClusterLoadAssignment, d Dialect, out *Decoded) ([]member, error) {
	var localityWeightSum uint64
	for _, loc := range cla.GetEndpoints() {
		if loc.GetPriority() == 0 {
			localityWeightSum += uint64(loc.GetLoadBalancingWeight().GetValue())
		}
	}
	var members []member
	for li, loc := range cla.GetEndpoints() {
		if loc.GetPriority() != 0 {
			continue
		}
		lw := loc.GetLoadBalancingWeight().GetValue()
		if d.Weights != WeightsEndpoint && lw == 0 {
			// gRPC clients drop localities without a weight (grpc-go
			// unmarshal_eds.go, C-core xds_endpoint.cc, grpc-js-xds).
			continue
		}
		// A113 normalizes by the weight of every endpoint of the locality,
		// unhealthy ones included.
		var sum uint64
		first := len(members)
		for ei, lbe := range loc.GetLbEndpoints() {
			ep, m, err := decodeEndpoint(lbe)
			if err != nil {
				return nil, fmt.Errorf("locality %d, endpoint %d: %w", li, ei, err)
			}
			sum += uint64(ep.Weight)
			switch lbe.GetHealthStatus() {
			case corev3.HealthStatus_HEALTHY, corev3.HealthStatus_UNKNOWN:
				out.Endpoints = append(out.Endpoints, ep)
				members = append(members, m)
			}
		}
		switch d.Weights {
		case WeightsA113:
			// gRFC A113 as grpc-go v1.85.0 computes it
			// (internal/xds/balancer/cdsbalancer/configbuilder.go,
			// priorityLocalitiesToEndpoints): UQ1.31 fixed-point
			// fp(ew / sum ew) x fp(lw / sum lw), floored at 1. With one
			// locality of any weight this is floor(ew * 2^31 / sum ew).
			lfp := fixedPoint(uint64(lw), localityWeightSum)
			for i := first; i < len(members); i++ {
				w := uint32(uint64(fixedPoint(uint64(members[i].weight), sum)) * uint64(lfp) >> 31)
				members[i].weight = max(w, 1)
			}
		case WeightsLocalityProduct:
			// C-core multiplies in uint32 and lets it wrap
			// (xds_cluster_resolver.cc, cds.cc PriorityEndpointIterator).
			for i := first; i < len(members); i++ {
				members[i].weight *= lw
			}
		}
	}
	return members, nil
}

func fixedPoint(num, den uint64) uint32 { return uint32(num << 31 / den) }

func decodeEndpoint(lbe *endpointv3.LbEndpoint) (DecodedEndpoint, member, error) {
	sa := lbe.GetEndpoint().GetAddress().GetSocketAddress()
	if sa == nil {
		return DecodedEndpoint{}, member{}, undecodable("no socket address")
	}
	if _, named := sa.GetPortSpecifier().(*corev3.SocketAddress_NamedPort); named || sa.GetPortValue() == 0 {
		return DecodedEndpoint{}, member{}, undecodable("address %q has no numeric port", sa.GetAddress())
	}
	ep := DecodedEndpoint{
		Addr:   net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10)),
		Weight: 1,
		Scheme: model.DefaultScheme,
	}
	if w := lbe.GetLoadBalancingWeight(); w != nil {
		if w.GetValue() == 0 {
			return DecodedEndpoint{}, member{}, undecodable("endpoint %s has weight 0", ep.Addr)
		}
		ep.Weight = w.GetValue()
	}
	fm := lbe.GetMetadata().GetFilterMetadata()
	// Envoy and grpc-go honour hash_key only as a non-empty string.
	ep.HashKey = fm[MetadataEnvoyLB].GetFields()[MetadataHashKey].GetStringValue()
	if rx := fm[MetadataRingxds]; rx != nil {
		ep.Metadata = rx
		ep.Zone = rx.GetFields()[MetadataZone].GetStringValue()
		if s := rx.GetFields()[MetadataScheme].GetStringValue(); s != "" {
			ep.Scheme = s
		}
		decodeFade(rx, &ep)
	}
	return ep, member{host: sa.GetAddress(), port: sa.GetPortValue(), weight: ep.Weight}, nil
}

// decodeFade reads the fade-in fields of the ringxds metadata namespace.
func decodeFade(rx *structpb.Struct, ep *DecodedEndpoint) {
	f := rx.GetFields()
	if n := f[MetadataRingEntries].GetNumberValue(); n >= 1 && n <= ringhash.MaxRingSizeLimit {
		ep.RingEntries = uint64(n)
	}
	start, err := time.Parse(time.RFC3339Nano, f[MetadataFadeStart].GetStringValue())
	if err != nil {
		return
	}
	d, err := time.ParseDuration(f[MetadataFadeDuration].GetStringValue())
	if err != nil || d <= 0 {
		return
	}
	e := f[MetadataFadeExponent].GetNumberValue()
	if !(e > 0) {
		return
	}
	ep.FadeStart, ep.FadeCurve = start, fadein.Curve{Duration: d, Exponent: e}
}

// RouteHashHeader returns the header the route configuration hashes for
// requests to cluster: the first header hash_policy of the first route
// sending traffic to it.
func RouteHashHeader(rc *routev3.RouteConfiguration, cluster string) (string, bool) {
	for _, vh := range rc.GetVirtualHosts() {
		for _, rt := range vh.GetRoutes() {
			if rt.GetRoute().GetCluster() != cluster {
				continue
			}
			for _, hp := range rt.GetRoute().GetHashPolicy() {
				if h := hp.GetHeader().GetHeaderName(); h != "" {
					return h, true
				}
			}
		}
	}
	return "", false
}

// PairConsistent reports whether cds and cla build the ring planned for
// the fade-in step of cla. A laid-out cluster's step publishes ring sizes
// in CDS and weights in EDS, which reach a client as separate responses;
// the weights list the ring sizes they are exact under (MetadataRingSizes:
// their own step's, and a neighbouring step's where the arithmetic allows),
// and any other Cluster with them moves keys between old endpoints for a
// moment. Assignments without that list (no fade-in layout) always pair.
func PairConsistent(cds *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) bool {
	pairs, legacy := claRingSizes(cla)
	if pairs == nil && legacy == 0 {
		return true
	}
	minSize, maxSize, ok, err := publishedRingSizes(cds)
	switch {
	case err != nil:
		return false
	case !ok:
		return true // no ring_hash: the weights build no ring
	case pairs == nil:
		// A server from before ring_sizes published minimum = maximum =
		// ring_size, and its weights build their ring under that alone.
		return minSize == legacy && maxSize == legacy
	}
	for _, p := range pairs.GetValues() {
		v := p.GetListValue().GetValues()
		if len(v) == 2 && v[0].GetNumberValue() == float64(minSize) && v[1].GetNumberValue() == float64(maxSize) {
			return true
		}
	}
	return false
}

// claRingSizes reads the ring sizes a laid-out CLA's weights build their
// ring under: the ring_sizes pairs, or an older server's single
// ring_size (legacyRingSize), whichever the first endpoint carrying one
// has.
func claRingSizes(cla *endpointv3.ClusterLoadAssignment) (pairs *structpb.ListValue, legacy uint64) {
	for _, loc := range cla.GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			fields := lb.GetMetadata().GetFilterMetadata()[MetadataRingxds].GetFields()
			if l := fields[MetadataRingSizes].GetListValue(); l != nil {
				return l, 0
			}
			if n := fields[legacyRingSize].GetNumberValue(); n >= 1 {
				return nil, uint64(n)
			}
		}
	}
	return nil, 0
}

// publishedRingSizes reads the ring sizes of a Cluster's ring_hash policy:
// the first typed RingHash entry, else the legacy fields (KindGRPCLegacy).
// ok is false when the Cluster has neither.
func publishedRingSizes(cds *clusterv3.Cluster) (minSize, maxSize uint64, ok bool, err error) {
	for _, p := range cds.GetLoadBalancingPolicy().GetPolicies() {
		cfg := p.GetTypedExtensionConfig().GetTypedConfig()
		if cfg.GetTypeUrl() != typeURLRingHash {
			continue
		}
		rh := &ringhashv3.RingHash{}
		if err := cfg.UnmarshalTo(rh); err != nil {
			return 0, 0, false, err
		}
		return rh.GetMinimumRingSize().GetValue(), rh.GetMaximumRingSize().GetValue(), true, nil
	}
	if cds.GetLbPolicy() == clusterv3.Cluster_RING_HASH {
		rh := cds.GetRingHashLbConfig()
		return rh.GetMinimumRingSize().GetValue(), rh.GetMaximumRingSize().GetValue(), true, nil
	}
	return 0, 0, false, nil
}
