package snapshot

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	maglevv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringxds/ringxds/internal/model"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// state normalizes clusters the way every source does before Build.
func state(t testing.TB, clusters ...model.Cluster) model.State {
	t.Helper()
	s := model.State{Clusters: clusters}
	if err := s.Normalize(); err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	return s
}

func build(t testing.TB, clusters ...model.Cluster) *Snapshot {
	t.Helper()
	snap, err := Build(state(t, clusters...), epoch)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return snap
}

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func assertProto(t *testing.T, what string, got types.Resource, want proto.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Errorf("%s:\ngot:\n%s\nwant:\n%s", what, prototext.Format(got), prototext.Format(want))
	}
}

func threeEndpoints() []model.Endpoint {
	return []model.Endpoint{
		{Address: "10.0.0.1", Port: 80},
		{Address: "10.0.0.2", Port: 80},
		{Address: "10.0.0.3", Port: 80},
	}
}

func TestBuildClusterPerKind(t *testing.T) {
	ringHash := func(min, max uint64) *corev3.TypedExtensionConfig {
		return &corev3.TypedExtensionConfig{
			Name: "envoy.load_balancing_policies.ring_hash",
			TypedConfig: mustAny(t, &ringhashv3.RingHash{
				HashFunction:    ringhashv3.RingHash_XX_HASH,
				MinimumRingSize: wrapperspb.UInt64(min),
				MaximumRingSize: wrapperspb.UInt64(max),
			}),
		}
	}
	maglev := func(size uint64) *corev3.TypedExtensionConfig {
		return &corev3.TypedExtensionConfig{
			Name:        "envoy.load_balancing_policies.maglev",
			TypedConfig: mustAny(t, &maglevv3.Maglev{TableSize: wrapperspb.UInt64(size)}),
		}
	}
	skipper := &corev3.TypedExtensionConfig{
		Name: "ringxds.skipper",
		TypedConfig: mustAny(t, &xdstypev3.TypedStruct{
			TypeUrl: "type.googleapis.com/ringxds.skipper",
			Value: &structpb.Struct{Fields: map[string]*structpb.Value{
				"hash_header": structpb.NewStringValue("x-hash-key"),
			}},
		}),
	}
	bare := func(name string) *clusterv3.Cluster {
		return &clusterv3.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{
				ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
				ResourceApiVersion:    corev3.ApiVersion_V3,
			}},
			ConnectTimeout: durationpb.New(5 * time.Second),
		}
	}
	cluster := func(name string, policies ...*corev3.TypedExtensionConfig) *clusterv3.Cluster {
		c := bare(name)
		c.LoadBalancingPolicy = &clusterv3.LoadBalancingPolicy{}
		for _, p := range policies {
			c.LoadBalancingPolicy.Policies = append(c.LoadBalancingPolicy.Policies, &clusterv3.LoadBalancingPolicy_Policy{TypedExtensionConfig: p})
		}
		return c
	}
	// withLegacy adds the legacy ring_hash fields every gRPC kind but
	// grpc-round-robin carries.
	withLegacy := func(c *clusterv3.Cluster, min, max uint64) *clusterv3.Cluster {
		c.LbPolicy = clusterv3.Cluster_RING_HASH
		c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{
			HashFunction:    clusterv3.Cluster_RingHashLbConfig_XX_HASH,
			MinimumRingSize: wrapperspb.UInt64(min),
			MaximumRingSize: wrapperspb.UInt64(max),
		}}
		return c
	}
	roundRobin := func(name string) *clusterv3.Cluster {
		c := bare(name)
		c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
		return c
	}

	tests := []struct {
		name  string
		in    model.Cluster
		want  map[Kind]*clusterv3.Cluster
		notes []string // substrings, each must appear in exactly one note
	}{{
		name: "ring_hash defaults",
		in:   model.Cluster{Name: "products", Endpoints: threeEndpoints()},
		want: map[Kind]*clusterv3.Cluster{
			KindEnvoy:          cluster("products", ringHash(4096, 4096)),
			KindGRPC:           withLegacy(cluster("products", ringHash(4096, 4096)), 4096, 4096),
			KindGRPCLegacy:     withLegacy(bare("products"), 4096, 4096),
			KindGRPCRoundRobin: roundRobin("products"),
			KindClientlib:      cluster("products", ringHash(4096, 4096)),
		},
	}, {
		name: "ring_hash explicit sizes",
		in:   model.Cluster{Name: "products", MinRingSize: 1024, MaxRingSize: 2048, Endpoints: threeEndpoints()},
		want: map[Kind]*clusterv3.Cluster{
			KindEnvoy:          cluster("products", ringHash(1024, 2048)),
			KindGRPC:           withLegacy(cluster("products", ringHash(1024, 2048)), 1024, 2048),
			KindGRPCLegacy:     withLegacy(bare("products"), 1024, 2048),
			KindGRPCRoundRobin: roundRobin("products"),
			KindClientlib:      cluster("products", ringHash(1024, 2048)),
		},
	}, {
		name: "maglev reaches grpc as ring_hash",
		in:   model.Cluster{Name: "carts", Policy: model.PolicyMaglev, Endpoints: threeEndpoints()},
		want: map[Kind]*clusterv3.Cluster{
			KindEnvoy:          cluster("carts", maglev(65537)),
			KindGRPC:           withLegacy(cluster("carts", ringHash(4096, 4096)), 4096, 4096),
			KindGRPCLegacy:     withLegacy(bare("carts"), 4096, 4096),
			KindGRPCRoundRobin: roundRobin("carts"),
			KindClientlib:      cluster("carts", maglev(65537)),
		},
		notes: []string{"maglev is published to grpc clients as ring_hash"},
	}, {
		name: "maglev table size",
		in:   model.Cluster{Name: "carts", Policy: model.PolicyMaglev, TableSize: 131, Endpoints: threeEndpoints()},
		want: map[Kind]*clusterv3.Cluster{
			KindEnvoy:          cluster("carts", maglev(131)),
			KindGRPC:           withLegacy(cluster("carts", ringHash(4096, 4096)), 4096, 4096),
			KindGRPCLegacy:     withLegacy(bare("carts"), 4096, 4096),
			KindGRPCRoundRobin: roundRobin("carts"),
			KindClientlib:      cluster("carts", maglev(131)),
		},
		notes: []string{"maglev is published to grpc clients as ring_hash"},
	}, {
		name: "skipper: envoy ring_hash, others custom policy then ring_hash",
		in:   model.Cluster{Name: "search", Policy: model.PolicySkipper, Endpoints: threeEndpoints()},
		want: map[Kind]*clusterv3.Cluster{
			KindEnvoy:          cluster("search", ringHash(4096, 4096)),
			KindGRPC:           withLegacy(cluster("search", skipper, ringHash(4096, 4096)), 4096, 4096),
			KindGRPCLegacy:     withLegacy(bare("search"), 4096, 4096),
			KindGRPCRoundRobin: roundRobin("search"),
			KindClientlib:      cluster("search", skipper, ringHash(4096, 4096)),
		},
		notes: []string{"skipper is published to envoy clients as ring_hash", "grpc-go runs ring_hash unless a ringxds.skipper balancer is registered"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := build(t, tt.in)
			for kind, want := range tt.want {
				got := snap.Kinds[kind][resourcev3.ClusterType][tt.in.Name]
				assertProto(t, string(kind), got, want)
			}
			if len(tt.want) != len(AllKinds()) {
				t.Errorf("the case covers %d of %d kinds", len(tt.want), len(AllKinds()))
			}
			assertNotes(t, snap.Notes[tt.in.Name], tt.notes)
		})
	}
}

func assertNotes(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("notes = %q, want %d notes matching %q", got, len(want), want)
		return
	}
	for _, w := range want {
		n := 0
		for _, g := range got {
			if strings.Contains(g, w) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("notes = %q: want exactly one containing %q", got, w)
		}
	}
}

func TestBuildLoadAssignment(t *testing.T) {
	in := model.Cluster{Name: "products", Endpoints: []model.Endpoint{
		{Address: "10.0.0.2", Port: 8080, Weight: 2, Zone: "eu-central-1a"},
		{Address: "2001:db8::1", Port: 80, Scheme: "h2c", Zone: "eu-central-1b"},
		{Address: "10.0.0.1", Port: 9090, HashKey: "zz-key", Scheme: "https"},
		{Address: "10.0.0.10", Port: 8080},
	}}
	lbEndpoint := func(addr string, port, weight uint32, scheme, zone, hashKey string) *endpointv3.LbEndpoint {
		rx := map[string]*structpb.Value{"scheme": structpb.NewStringValue(scheme)}
		if zone != "" {
			rx["zone"] = structpb.NewStringValue(zone)
		}
		md := map[string]*structpb.Struct{"ringxds": {Fields: rx}}
		if hashKey != "" {
			md["envoy.lb"] = &structpb.Struct{Fields: map[string]*structpb.Value{"hash_key": structpb.NewStringValue(hashKey)}}
		}
		return &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
				}}},
			}},
			HealthStatus:        corev3.HealthStatus_HEALTHY,
			LoadBalancingWeight: wrapperspb.UInt32(weight),
			Metadata:            &corev3.Metadata{FilterMetadata: md},
		}
	}
	// Ring keys compare as strings, the way grpc-go sorts them:
	// "10.0.0.10:8080" < "10.0.0.2:8080" < "[2001:db8::1]:80" < "zz-key".
	want := &endpointv3.ClusterLoadAssignment{
		ClusterName: "products",
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &corev3.Locality{},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints: []*endpointv3.LbEndpoint{
				lbEndpoint("10.0.0.10", 8080, 1, "http", "", ""),
				lbEndpoint("10.0.0.2", 8080, 2, "http", "eu-central-1a", ""),
				lbEndpoint("2001:db8::1", 80, 1, "h2c", "eu-central-1b", ""),
				lbEndpoint("10.0.0.1", 9090, 1, "https", "", "zz-key"),
			},
		}},
	}
	snap := build(t, in)
	clusters := map[Kind]*clusterv3.Cluster{}
	for _, kind := range AllKinds() {
		clusters[kind] = snap.Kinds[kind][resourcev3.ClusterType]["products"].(*clusterv3.Cluster)
	}
	version, err := clustersVersion(clusters, AllKinds())
	if err != nil {
		t.Fatal(err)
	}
	want.Endpoints[0].Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"ringxds": {Fields: map[string]*structpb.Value{"cluster_version": structpb.NewStringValue(version)}},
	}}
	for _, kind := range AllKinds() {
		assertProto(t, string(kind), snap.Kinds[kind][resourcev3.EndpointType]["products"], want)
	}
}

// A Cluster change must change its ClusterLoadAssignment too: Envoy keeps an
// updated cluster warming until a CLA arrives after it, and a client is only
// sent a CLA that changed (docs/xds.md, "Wire order"). An endpoint change
// alone leaves the Clusters as they are.
func TestClusterChangeChangesItsLoadAssignment(t *testing.T) {
	base := model.Cluster{Name: "c", Endpoints: threeEndpoints()}
	version := func(c model.Cluster) (cds, cla string) {
		snap := build(t, c)
		cv, err := Version(snap.Kinds[KindEnvoy][resourcev3.ClusterType]["c"])
		if err != nil {
			t.Fatal(err)
		}
		ev, err := Version(snap.Kinds[KindEnvoy][resourcev3.EndpointType]["c"])
		if err != nil {
			t.Fatal(err)
		}
		return cv, ev
	}
	cds0, cla0 := version(base)
	sized := base
	sized.MinRingSize, sized.MaxRingSize = 2048, 2048
	if cds1, cla1 := version(sized); cds1 == cds0 || cla1 == cla0 {
		t.Errorf("ring size change: CDS changed %v, CLA changed %v; want both", cds1 != cds0, cla1 != cla0)
	}
	// Only the gRPC and client library Clusters carry a Skipper cluster's
	// header, yet the CLA every kind shares changes too.
	skipper := base
	skipper.Policy = model.PolicySkipper
	header := skipper
	header.HashHeader = "x-other"
	_, claS := version(skipper)
	if _, claH := version(header); claH == claS {
		t.Error("a hash_header change of a skipper cluster left its CLA as it was")
	}
	moved := base
	moved.Endpoints = append(threeEndpoints(), model.Endpoint{Address: "10.0.0.4", Port: 80})
	if cds2, cla2 := version(moved); cds2 != cds0 || cla2 == cla0 {
		t.Errorf("endpoint change: CDS changed %v, CLA changed %v; want the CLA only", cds2 != cds0, cla2 != cla0)
	}
}

// TestBuildEndpointOrderIsGRPCOrder cross-checks the EDS order against the
// comparison grpc-go v1.85.0 applies (balancer/ringhash/ring.go,
// normalizeWeights): plain string order of hash keys.
func TestBuildEndpointOrderIsGRPCOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		c := randomCluster(rng, "c", 1+rng.IntN(40))
		snap := build(t, c)
		cla := snap.Kinds[KindEnvoy][resourcev3.EndpointType]["c"].(*endpointv3.ClusterLoadAssignment)
		var keys []string
		for _, lbe := range cla.GetEndpoints()[0].GetLbEndpoints() {
			keys = append(keys, edsRingKey(lbe))
		}
		if !slices.IsSorted(keys) {
			t.Fatalf("EDS ring keys not in grpc-go order: %q", keys)
		}
		if len(keys) != len(c.Endpoints) {
			t.Fatalf("%d endpoints published, want %d", len(keys), len(c.Endpoints))
		}
	}
}

// edsRingKey derives the ring key from the published endpoint the way Envoy
// and grpc-go do, independently of RingKey.
func edsRingKey(lbe *endpointv3.LbEndpoint) string {
	if hk := lbe.GetMetadata().GetFilterMetadata()["envoy.lb"].GetFields()["hash_key"].GetStringValue(); hk != "" {
		return hk
	}
	sa := lbe.GetEndpoint().GetAddress().GetSocketAddress()
	if strings.Contains(sa.GetAddress(), ":") {
		return fmt.Sprintf("[%s]:%d", sa.GetAddress(), sa.GetPortValue())
	}
	return fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue())
}

func TestBuildListenerAndRoute(t *testing.T) {
	in := model.Cluster{Name: "products", HashHeader: "x-product-id", Endpoints: threeEndpoints()}
	wantListener := &listenerv3.Listener{
		Name: "products",
		ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(t, &hcmv3.HttpConnectionManager{
			StatPrefix: "products",
			RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
				ConfigSource: &corev3.ConfigSource{
					ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
					ResourceApiVersion:    corev3.ApiVersion_V3,
				},
				RouteConfigName: "products",
			}},
			HttpFilters: []*hcmv3.HttpFilter{{
				Name:       "envoy.filters.http.router",
				ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})},
			}},
		})},
	}
	wantRoute := &routev3.RouteConfiguration{
		Name: "products",
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "products",
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "products"},
					HashPolicy: []*routev3.RouteAction_HashPolicy{{
						PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
							Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: "x-product-id"},
						},
					}},
				}},
			}},
		}},
	}
	snap := build(t, in)
	for _, kind := range []Kind{KindGRPC, KindClientlib} {
		assertProto(t, string(kind)+" LDS", snap.Kinds[kind][resourcev3.ListenerType]["products"], wantListener)
		assertProto(t, string(kind)+" RDS", snap.Kinds[kind][resourcev3.RouteType]["products"], wantRoute)
	}
	if n := len(snap.Kinds[KindEnvoy][resourcev3.ListenerType]) + len(snap.Kinds[KindEnvoy][resourcev3.RouteType]); n != 0 {
		t.Errorf("envoy is served %d listeners and routes, want none (they live in its bootstrap)", n)
	}
}

// TestBuildValidateAll runs Envoy's own validation rules on every resource
// of every kind, for every policy, IPv6, hash keys, zones and schemes.
func TestBuildValidateAll(t *testing.T) {
	var clusters []model.Cluster
	for _, p := range model.Policies {
		clusters = append(clusters, model.Cluster{
			Name:   "c-" + string(p),
			Policy: p,
			Endpoints: []model.Endpoint{
				{Address: "10.0.0.1", Port: 80, Weight: 3, Zone: "a"},
				{Address: "fd00::1", Port: 8443, Scheme: "https", HashKey: "pod-1"},
				{Address: "::ffff:10.0.0.2", Port: 65535, Scheme: "h2c"},
			},
		})
	}
	snap := build(t, clusters...)
	n := 0
	for _, kind := range AllKinds() {
		for typ, byName := range snap.Kinds[kind] {
			for name, res := range byName {
				n++
				if err := res.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
					t.Errorf("%s %s %q: %v", kind, typ, name, err)
				}
			}
		}
	}
	// 3 clusters x (envoy CDS+EDS, each of 4 proxyless kinds CDS+EDS+LDS+RDS).
	if want := 3 * (2 + 4*4); n != want {
		t.Errorf("validated %d resources, want %d", n, want)
	}
}

func randomCluster(rng *rand.Rand, name string, n int) model.Cluster {
	c := model.Cluster{Name: name, Policy: model.Policies[rng.IntN(len(model.Policies))]}
	for i := range n {
		ep := model.Endpoint{Port: uint32(1 + rng.IntN(65535)), Weight: uint32(1 + rng.IntN(8))}
		if rng.IntN(3) == 0 {
			ep.Address = fmt.Sprintf("fd00::%x", i+1)
		} else {
			ep.Address = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		}
		if rng.IntN(4) == 0 {
			ep.HashKey = fmt.Sprintf("pod-%d", i)
		}
		if rng.IntN(2) == 0 {
			ep.Zone = fmt.Sprintf("zone-%d", rng.IntN(3))
		}
		c.Endpoints = append(c.Endpoints, ep)
	}
	return c
}

// TestBuildDeterministic builds the same state twice, with endpoints listed
// in a different order the second time, and wants byte-identical resources.
func TestBuildDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var a, b []model.Cluster
	for i := range 20 {
		c := randomCluster(rng, fmt.Sprintf("svc-%02d", i), 1+rng.IntN(30))
		a = append(a, c)
		shuffled := c
		shuffled.Endpoints = slices.Clone(c.Endpoints)
		rng.Shuffle(len(shuffled.Endpoints), func(i, j int) {
			shuffled.Endpoints[i], shuffled.Endpoints[j] = shuffled.Endpoints[j], shuffled.Endpoints[i]
		})
		b = append(b, shuffled)
	}
	slices.Reverse(b) // cluster order is normalized too
	snapA, snapB := build(t, a...), build(t, b...)

	for _, kind := range AllKinds() {
		for typ, byName := range snapA.Kinds[kind] {
			if len(byName) != len(snapB.Kinds[kind][typ]) {
				t.Fatalf("%s %s: %d vs %d resources", kind, typ, len(byName), len(snapB.Kinds[kind][typ]))
			}
			for name, ra := range byName {
				rb := snapB.Kinds[kind][typ][name]
				ba, err := proto.MarshalOptions{Deterministic: true}.Marshal(ra)
				if err != nil {
					t.Fatal(err)
				}
				bb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(rb)
				if string(ba) != string(bb) {
					t.Errorf("%s %s %q: marshalled resources differ", kind, typ, name)
				}
				va, _ := Version(ra)
				vb, _ := Version(rb)
				if va != vb || len(va) != 16 {
					t.Errorf("%s %s %q: versions %q and %q", kind, typ, name, va, vb)
				}
			}
		}
	}
	if fmt.Sprint(snapA.Notes) != fmt.Sprint(snapB.Notes) {
		t.Errorf("notes differ:\n%v\n%v", snapA.Notes, snapB.Notes)
	}
}

func TestVersionTracksContent(t *testing.T) {
	c := model.Cluster{Name: "products", Endpoints: threeEndpoints()}
	before := build(t, c).Kinds[KindEnvoy][resourcev3.EndpointType]["products"]
	c.Endpoints = threeEndpoints()
	c.Endpoints[1].Weight = 2
	after := build(t, c).Kinds[KindEnvoy][resourcev3.EndpointType]["products"]
	vb, err := Version(before)
	if err != nil {
		t.Fatal(err)
	}
	va, err := Version(after)
	if err != nil {
		t.Fatal(err)
	}
	if va == vb {
		t.Errorf("a weight change kept version %s", va)
	}
}

func TestBuildNotes(t *testing.T) {
	weighted := func(ws ...uint32) []model.Endpoint {
		var eps []model.Endpoint
		for i, w := range ws {
			eps = append(eps, model.Endpoint{Address: fmt.Sprintf("10.0.0.%d", i+1), Port: 80, Weight: w})
		}
		return eps
	}
	tests := []struct {
		name  string
		in    model.Cluster
		notes []string
	}{
		{"equal weights", model.Cluster{Endpoints: weighted(3, 3, 3)}, nil},
		{"weights summing to a power of two", model.Cluster{Endpoints: weighted(1, 1, 2, 4)}, nil},
		{"other weights", model.Cluster{Endpoints: weighted(1, 2)}, []string{"weights sum to 3"}},
		{"power-of-two sum above the minimum", model.Cluster{MinRingSize: 4, MaxRingSize: 4096, Endpoints: weighted(4, 4, 8)}, []string{"weights sum to 16"}},
		{"minimum not a power of two", model.Cluster{MinRingSize: 1000, MaxRingSize: 4096, Endpoints: weighted(1, 3)}, []string{"minimum_ring_size is 1000"}},
		{"ring above the grpc cap", model.Cluster{MinRingSize: 8192, MaxRingSize: 8192, Endpoints: weighted(1, 1)}, []string{"exceeds the gRPC clients' cap of 4096"}},
		{"maglev has no ring to agree on", model.Cluster{Policy: model.PolicyMaglev, Endpoints: weighted(1, 2)}, []string{"maglev is published to grpc clients as ring_hash"}},
		{"weighted skipper", model.Cluster{Policy: model.PolicySkipper, Endpoints: weighted(1, 1, 2)}, []string{
			"skipper rings are unweighted", "published to envoy clients as ring_hash", "published to grpc clients as ringxds.skipper",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Name = "c"
			assertNotes(t, build(t, tt.in).Notes["c"], tt.notes)
		})
	}
}

func TestBuildRejectsUnnormalizedState(t *testing.T) {
	ok := model.Cluster{Name: "a", Endpoints: threeEndpoints()}
	ok.ApplyDefaults()
	if _, err := Build(model.State{Clusters: []model.Cluster{ok, ok}}, epoch); err == nil {
		t.Error("a cluster defined twice: Build succeeded")
	}
	if _, err := Build(model.State{Clusters: []model.Cluster{ok}}, epoch); err != nil {
		t.Errorf("normalized state: %v", err)
	}
}

// A cluster that cannot be translated must not hold back the others: it
// is left out if it never was published, and keeps its last good
// resources if it was, while every other cluster's change is published.
func TestBuildIsolatesAClusterThatFails(t *testing.T) {
	good := func(name string, port uint32) model.Cluster {
		c := model.Cluster{Name: name, Endpoints: threeEndpoints()}
		c.Endpoints[0].Port = port
		c.ApplyDefaults()
		return c
	}
	broken := func(c model.Cluster) model.Cluster {
		c = c.Clone()
		c.Endpoints[1].Weight = 0 // not normalized: Validate refuses it
		return c
	}
	b := NewBuilder()
	first, err := b.Build(model.State{Clusters: []model.Cluster{good("a", 1), good("b", 1), broken(good("new", 1))}}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := first.Kinds[KindEnvoy][resourcev3.ClusterType]["new"]; ok || first.Failed["new"] == "" {
		t.Fatalf("a cluster never built is published (failed: %q)", first.Failed["new"])
	}
	if want := epoch.Add(time.Second); !first.NextStep.Equal(want) {
		t.Errorf("next step %v, want a retry of the unpublished cluster at %v", first.NextStep, want)
	}
	second, err := b.Build(model.State{Clusters: []model.Cluster{broken(good("a", 2)), good("b", 2)}}, epoch.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range AllKinds() {
		for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType} {
			if second.Kinds[k][typ]["a"] != first.Kinds[k][typ]["a"] {
				t.Errorf("%s %s: the failing cluster's last good resource was replaced", k, typ)
			}
		}
	}
	if first.Kinds[KindEnvoy][resourcev3.EndpointType]["b"] == second.Kinds[KindEnvoy][resourcev3.EndpointType]["b"] {
		t.Error("the healthy cluster's change was held back")
	}
	if second.Failed["a"] == "" || !strings.Contains(strings.Join(second.Notes["a"], "\n"), "last good") {
		t.Errorf("the failure is not reported: failed %q, notes %q", second.Failed["a"], second.Notes["a"])
	}
	if want := epoch.Add(2 * time.Second); !second.NextStep.Equal(want) {
		t.Errorf("next step %v, want a retry at %v", second.NextStep, want)
	}
	// Failing again, it is retried later each time: most failures last
	// until the input changes.
	again, err := b.Build(model.State{Clusters: []model.Cluster{broken(good("a", 2)), good("b", 2)}}, epoch.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if want := epoch.Add(4 * time.Second); !again.NextStep.Equal(want) {
		t.Errorf("second failure in a row: next step %v, want %v", again.NextStep, want)
	}
	third, err := b.Build(model.State{Clusters: []model.Cluster{good("a", 3), good("b", 2)}}, epoch.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(third.Failed) != 0 || first.Kinds[KindEnvoy][resourcev3.EndpointType]["a"] == third.Kinds[KindEnvoy][resourcev3.EndpointType]["a"] {
		t.Errorf("a fixed cluster is not published again (failed %v)", third.Failed)
	}
	if !third.NextStep.IsZero() {
		t.Errorf("next step %v with nothing failing or fading", third.NextStep)
	}
}

func TestBuildEmptyState(t *testing.T) {
	snap, err := Build(model.State{}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range AllKinds() {
		for typ, byName := range snap.Kinds[kind] {
			if len(byName) != 0 {
				t.Errorf("%s %s: %d resources from an empty state", kind, typ, len(byName))
			}
		}
	}
}

func BenchmarkBuild(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	var clusters []model.Cluster
	for i := range 100 {
		clusters = append(clusters, randomCluster(rng, fmt.Sprintf("svc-%03d", i), 100))
	}
	s := state(b, clusters...)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(s, epoch); err != nil {
			b.Fatal(err)
		}
	}
}
