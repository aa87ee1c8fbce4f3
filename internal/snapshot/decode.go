package snapshot

import (
	"errors"
	"fmt"
	"net"
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

// Decode builds the ring that a data plane of the given kind builds from a
// published Cluster and its ClusterLoadAssignment:
//
//   - KindEnvoy: the first load_balancing_policy entry Envoy supports (or the
//     legacy lb_policy), ring_hash walking hosts in EDS order, or Maglev.
//   - KindGRPC: grpc-go v1.85.0's rules: custom TypedStruct and Maglev
//     entries are skipped, ring_hash must use XX_HASH, endpoints are sorted
//     by key, the ring is capped at ringhash.GRPCRingHashCap and weights are the
//     gRFC A113 fixed-point products.
//   - KindClientlib: Maglev, Skipper through the ringxds.skipper TypedStruct,
//     else ring_hash as Envoy builds it.
//
// Only priority 0 is decoded (other priorities are failover, each with its
// own ring), and only endpoints whose health is HEALTHY or UNKNOWN, the ones
// both Envoy and grpc-go put on the ring while the cluster is healthy.
func Decode(cds *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment, kind Kind) (*Decoded, error) {
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
	switch kind {
	case KindEnvoy, KindGRPC, KindClientlib:
	default:
		return nil, undecodable("unknown kind %q", kind)
	}

	pol, err := selectPolicy(cds, kind)
	if err != nil {
		return nil, fmt.Errorf("cluster %q, %s: %w", cds.GetName(), kind, err)
	}
	d := &Decoded{Cluster: cds.GetName(), Policy: pol.name}
	members, err := decodeEndpoints(cla, kind, d)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", cds.GetName(), err)
	}
	if len(d.Endpoints) == 0 {
		return nil, fmt.Errorf("cluster %q: %w", cds.GetName(), undecodable("no healthy endpoints at priority 0"))
	}

	eps := make([]ringhash.Endpoint, len(d.Endpoints))
	for i, ep := range d.Endpoints {
		eps[i] = ringhash.Endpoint{Key: ep.HashKey, Weight: members[i].weight}
		if eps[i].Key == "" {
			eps[i].Key = ep.Addr
		}
	}
	switch pol.name {
	case ringhash.PolicyRingHash:
		opts := ringhash.RingHashOptions{Hash: pol.hash, MinRingSize: pol.minSize, MaxRingSize: pol.maxSize}
		if kind == KindGRPC {
			// grpc-go: balancer/ringhash/ring.go sorts by key; its xDS
			// converter defaults unset sizes to 1024 and 8M
			// (xdslbregistry/converter), then balancer/ringhash/config.go
			// caps both at GRPC_RING_HASH_CAP, 4096 by default.
			opts.SortByKey = true
			if pol.minUnset {
				opts.MinRingSize = ringhash.DefaultMinRingSize
			}
			if pol.maxUnset {
				opts.MaxRingSize = ringhash.DefaultMaxRingSize
			}
			opts.MinRingSize = min(opts.MinRingSize, ringhash.GRPCRingHashCap)
			opts.MaxRingSize = min(opts.MaxRingSize, ringhash.GRPCRingHashCap)
		}
		d.Ring, err = ringhash.NewRingHash(eps, opts)
	case ringhash.PolicyMaglev:
		d.Ring, err = ringhash.NewMaglev(eps, pol.tableSize)
	case ringhash.PolicySkipper:
		for i, ep := range d.Endpoints {
			// Skipper's ring is unweighted; the weights published for the
			// ring_hash fallback do not apply to it.
			eps[i] = ringhash.Endpoint{Key: ringhash.SkipperIdentity(ep.Scheme, members[i].host, members[i].port)}
		}
		d.Ring, err = ringhash.NewSkipper(eps)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %s ring: %w", cds.GetName(), pol.name, err)
	}
	return d, nil
}

// selectPolicy picks the policy the kind of data plane runs. Each data
// plane walks load_balancing_policy in order and takes the first entry it
// supports; an entry it supports but that is no consistent hash (round
// robin, say) is an error here because it has no ring.
func selectPolicy(cds *clusterv3.Cluster, kind Kind) (ringPolicy, error) {
	if lbp := cds.GetLoadBalancingPolicy(); lbp != nil {
		var skipped []string
		for _, p := range lbp.GetPolicies() {
			cfg := p.GetTypedExtensionConfig().GetTypedConfig()
			pol, ok, err := decodePolicy(cfg, kind)
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
			if kind == KindGRPC {
				return ringPolicy{}, undecodable("grpc-go requires hash_function XX_HASH, got MURMUR_HASH_2")
			}
			pol.hash = ringhash.MurmurHash2
		default:
			return ringPolicy{}, undecodable("unknown ring_hash hash_function %v", rh.GetHashFunction())
		}
		return pol, nil
	case clusterv3.Cluster_MAGLEV:
		if kind == KindGRPC {
			return ringPolicy{}, undecodable("grpc-go NACKs lb_policy MAGLEV")
		}
		return ringPolicy{name: ringhash.PolicyMaglev, tableSize: cds.GetMaglevLbConfig().GetTableSize().GetValue()}, nil
	default:
		return ringPolicy{}, undecodable("lb_policy %v is not a consistent hash", cds.GetLbPolicy())
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
// the kind of data plane skips the entry.
func decodePolicy(cfg *anypb.Any, kind Kind) (pol ringPolicy, ok bool, err error) {
	switch cfg.GetTypeUrl() {
	case typeURLRingHash:
		rh := &ringhashv3.RingHash{}
		if err := cfg.UnmarshalTo(rh); err != nil {
			return ringPolicy{}, false, fmt.Errorf("%w: %w", ErrUndecodable, err)
		}
		pol = ringHashPolicy(rh.GetMinimumRingSize(), rh.GetMaximumRingSize())
		switch rh.GetHashFunction() {
		case ringhashv3.RingHash_XX_HASH:
		case ringhashv3.RingHash_DEFAULT_HASH:
			// Envoy reads DEFAULT_HASH as xxHash; grpc-go NACKs it
			// (xdslbregistry/converter convertRingHashProtoToServiceConfig).
			if kind == KindGRPC {
				return ringPolicy{}, false, undecodable("grpc-go requires hash_function XX_HASH, got DEFAULT_HASH")
			}
		case ringhashv3.RingHash_MURMUR_HASH_2:
			if kind == KindGRPC {
				return ringPolicy{}, false, undecodable("grpc-go requires hash_function XX_HASH, got MURMUR_HASH_2")
			}
			pol.hash = ringhash.MurmurHash2
		default:
			return ringPolicy{}, false, undecodable("unknown ring_hash hash_function %v", rh.GetHashFunction())
		}
		return pol, true, nil
	case typeURLMaglev:
		if kind == KindGRPC {
			// grpc-go registers no converter for Maglev and moves on.
			return ringPolicy{}, false, nil
		}
		m := &maglevv3.Maglev{}
		if err := cfg.UnmarshalTo(m); err != nil {
			return ringPolicy{}, false, fmt.Errorf("%w: %w", ErrUndecodable, err)
		}
		return ringPolicy{name: ringhash.PolicyMaglev, tableSize: m.GetTableSize().GetValue()}, true, nil
	case typeURLTypedStructV3, typeURLTypedStructV1:
		var typeURL string
		if cfg.GetTypeUrl() == typeURLTypedStructV3 {
			ts := &xdstypev3.TypedStruct{}
			if err := cfg.UnmarshalTo(ts); err != nil {
				return ringPolicy{}, false, fmt.Errorf("%w: %w", ErrUndecodable, err)
			}
			typeURL = ts.GetTypeUrl()
		} else {
			ts := &udpatypev1.TypedStruct{}
			if err := cfg.UnmarshalTo(ts); err != nil {
				return ringPolicy{}, false, fmt.Errorf("%w: %w", ErrUndecodable, err)
			}
			typeURL = ts.GetTypeUrl()
		}
		// grpc-go and Envoy name a custom policy by the part of type_url
		// after the last '/' and skip it when nothing by that name exists.
		// Only the client library has ringxds.skipper.
		if kind == KindClientlib && typeURL[strings.LastIndex(typeURL, "/")+1:] == PolicyNameSkipper {
			return ringPolicy{name: ringhash.PolicySkipper}, true, nil
		}
		return ringPolicy{}, false, nil
	default:
		if strings.HasPrefix(cfg.GetTypeUrl(), "type.googleapis.com/envoy.extensions.load_balancing_policies.") {
			// A policy every data plane here runs (round robin, least
			// request, ...), but not one with a ring.
			return ringPolicy{}, false, undecodable("%s is not a consistent hash", cfg.GetTypeUrl())
		}
		return ringPolicy{}, false, nil
	}
}

// member is what a ring needs of an endpoint beyond DecodedEndpoint.
type member struct {
	host   string
	port   uint32
	weight uint32 // the weight this kind's ring uses
}

// decodeEndpoints fills d.Endpoints from the priority-0 healthy endpoints
// and returns their ring members, index for index.
func decodeEndpoints(cla *endpointv3.ClusterLoadAssignment, kind Kind, d *Decoded) ([]member, error) {
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
		if kind == KindGRPC && lw == 0 {
			// grpc-go ignores localities of weight 0 (unmarshal_eds.go).
			continue
		}
		// grpc-go normalizes by the weight of every endpoint of the
		// locality, unhealthy ones included.
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
				d.Endpoints = append(d.Endpoints, ep)
				members = append(members, m)
			}
		}
		if kind == KindGRPC {
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

// PairConsistent reports whether cds and cla belong to the same fade-in
// step. A step of a laid-out cluster changes the ring size in CDS and the
// weights in EDS; a client that builds a ring from one step's size and
// another step's weights moves keys between old endpoints for a moment.
// Assignments without a step ring size (no fade-in layout) always pair.
func PairConsistent(cds *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) bool {
	var step uint64
	for _, loc := range cla.GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			if n := lb.GetMetadata().GetFilterMetadata()[MetadataRingxds].GetFields()[MetadataRingSize].GetNumberValue(); n >= 1 {
				step = uint64(n)
				break
			}
		}
		if step != 0 {
			break
		}
	}
	if step == 0 {
		return true
	}
	for _, p := range cds.GetLoadBalancingPolicy().GetPolicies() {
		cfg := p.GetTypedExtensionConfig().GetTypedConfig()
		if cfg.GetTypeUrl() != typeURLRingHash {
			continue
		}
		rh := &ringhashv3.RingHash{}
		if err := cfg.UnmarshalTo(rh); err != nil {
			return false
		}
		return rh.GetMinimumRingSize().GetValue() == step && rh.GetMaximumRingSize().GetValue() == step
	}
	return true
}
