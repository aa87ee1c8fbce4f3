package snapshot

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	maglevv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/ringhash"
)

// published returns what Build serves kind for cluster name.
func published(snap *Snapshot, kind Kind, name string) (*clusterv3.Cluster, *endpointv3.ClusterLoadAssignment) {
	r := snap.Kinds[kind]
	return r[resourcev3.ClusterType][name].(*clusterv3.Cluster), r[resourcev3.EndpointType][name].(*endpointv3.ClusterLoadAssignment)
}

func decode(t *testing.T, snap *Snapshot, kind Kind, name string) *Decoded {
	t.Helper()
	cds, cla := published(snap, kind, name)
	d, err := Decode(cds, cla, kind)
	if err != nil {
		t.Fatalf("Decode %s: %v", kind, err)
	}
	return d
}

// modelRing builds a ring straight from the model, without xDS: the
// reference the decoded rings are compared with. ring_hash uses grpc-go's
// key order, which is what Build publishes as EDS order.
func modelRing(t *testing.T, c *model.Cluster, policy string) ringhash.Ring {
	t.Helper()
	eps := make([]ringhash.Endpoint, len(c.Endpoints))
	var (
		r   ringhash.Ring
		err error
	)
	switch policy {
	case ringhash.PolicyRingHash:
		for i, ep := range c.Endpoints {
			eps[i] = ringhash.Endpoint{Key: RingKey(&ep), Weight: ep.Weight}
		}
		r, err = ringhash.NewRingHash(eps, ringhash.RingHashOptions{MinRingSize: c.MinRingSize, MaxRingSize: c.MaxRingSize, SortByKey: true})
	case ringhash.PolicyMaglev:
		for i, ep := range c.Endpoints {
			eps[i] = ringhash.Endpoint{Key: RingKey(&ep), Weight: ep.Weight}
		}
		r, err = ringhash.NewMaglev(eps, c.TableSize)
	case ringhash.PolicySkipper:
		for i, ep := range c.Endpoints {
			eps[i] = ringhash.Endpoint{Key: ringhash.SkipperIdentity(ep.Scheme, ep.Address, ep.Port)}
		}
		r, err = ringhash.NewSkipper(eps)
	}
	if err != nil {
		t.Fatalf("model ring: %v", err)
	}
	return r
}

// probes are request hashes spread over the whole hash space plus the
// hashes of realistic keys.
func probes() []uint64 {
	var hs []uint64
	const n = 4000
	for i := range uint64(n) {
		hs = append(hs, i*(^uint64(0)/n))
	}
	for i := range 1000 {
		hs = append(hs, ringhash.HashKey(fmt.Sprintf("product-%d", i)))
	}
	return hs
}

// assertSamePicks compares two rings by the address each pick lands on.
func assertSamePicks(t *testing.T, what string, got ringhash.Ring, gotAddr func(int) string, want ringhash.Ring, wantAddr func(int) string) {
	t.Helper()
	if got.Policy() != want.Policy() || got.Size() != want.Size() {
		t.Errorf("%s: %s ring of %d, want %s ring of %d", what, got.Policy(), got.Size(), want.Policy(), want.Size())
		return
	}
	for _, h := range probes() {
		if g, w := gotAddr(got.Pick(h)), wantAddr(want.Pick(h)); g != w {
			t.Errorf("%s: hash %d picks %s, want %s", what, h, g, w)
			return
		}
	}
}

// TestDecodeRoundTrip builds random clusters, decodes them as every kind and
// compares the picks with rings built straight from the model.
func TestDecodeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	compared := map[Kind]int{}
	for i := range 60 {
		c := randomCluster(rng, fmt.Sprintf("c%d", i), 1+rng.IntN(25))
		switch rng.IntN(3) {
		case 0:
			c.MinRingSize, c.MaxRingSize = 1024, 4096
		case 1:
			c.MinRingSize, c.MaxRingSize = 512, 512
		}
		if c.Policy == model.PolicyMaglev && rng.IntN(2) == 0 {
			c.TableSize = 1031
		}
		if rng.IntN(2) == 0 {
			// No hash keys: grpc-js's ring must match too.
			for j := range c.Endpoints {
				c.Endpoints[j].HashKey = ""
			}
		}
		if rng.IntN(2) == 0 {
			// Equal weights: grpc-go's ring must match too.
			for j := range c.Endpoints {
				c.Endpoints[j].Weight = 3
			}
		}
		snap := build(t, c)
		c = snap.State.Clusters[0] // with defaults
		modelAddr := func(i int) string { return c.Endpoints[i].HostPort() }

		want := map[Kind]string{}
		switch c.Policy {
		case model.PolicyRingHash:
			want = map[Kind]string{KindEnvoy: ringhash.PolicyRingHash, KindGRPC: ringhash.PolicyRingHash, KindGRPCLegacy: ringhash.PolicyRingHash, KindClientlib: ringhash.PolicyRingHash}
		case model.PolicyMaglev:
			want = map[Kind]string{KindEnvoy: ringhash.PolicyMaglev, KindGRPC: ringhash.PolicyRingHash, KindGRPCLegacy: ringhash.PolicyRingHash, KindClientlib: ringhash.PolicyMaglev}
		case model.PolicySkipper:
			want = map[Kind]string{KindEnvoy: ringhash.PolicyRingHash, KindGRPC: ringhash.PolicyRingHash, KindGRPCLegacy: ringhash.PolicyRingHash, KindClientlib: ringhash.PolicySkipper}
		}
		for kind, policy := range want {
			d := decode(t, snap, kind, c.Name)
			if d.Policy != policy {
				t.Fatalf("%s %s: decoded policy %s, want %s", c.Name, kind, d.Policy, policy)
			}
			if len(d.Endpoints) != len(c.Endpoints) {
				t.Fatalf("%s %s: %d endpoints decoded, want %d", c.Name, kind, len(d.Endpoints), len(c.Endpoints))
			}
			if kind == KindGRPC && ringsDiffer(&c) != "" {
				// grpc-go's weights may legitimately round differently
				// (a note says so for ring_hash and skipper clusters).
				// TestDecodeNotesPredictIdentity covers the rest.
				continue
			}
			if kind == KindGRPCLegacy && hasHashKey(&c) {
				// grpc-js hashes addresses, never hash_key: its ring is
				// Envoy's only without hash keys (docs/grpc-clients.md).
				continue
			}
			decodedAddr := func(i int) string { return d.Endpoints[i].Addr }
			assertSamePicks(t, fmt.Sprintf("%s %s (%s)", c.Name, kind, policy), d.Ring, decodedAddr, modelRing(t, &c, policy), modelAddr)
			compared[kind]++
		}
	}
	for _, kind := range RingKinds() {
		if compared[kind] < 10 {
			t.Errorf("only %d %s rings compared: the sample is too weak", compared[kind], kind)
		}
	}
	t.Logf("rings compared per kind: %v", compared)
}

func hasHashKey(c *model.Cluster) bool {
	for i := range c.Endpoints {
		if c.Endpoints[i].HashKey != "" {
			return true
		}
	}
	return false
}

// entries lists a ring's (hash, endpoint address) pairs in order.
func entries(d *Decoded) []string {
	var out []string
	d.Ring.(ringhash.Drawable).Entries(func(h uint64, ep int) {
		out = append(out, fmt.Sprintf("%d %s", h, d.Endpoints[ep].Addr))
	})
	return out
}

// TestDecodeNotesPredictIdentity checks the claim behind ringNotes: when a
// ring_hash cluster gets no note, Envoy and grpc-go build entry-for-entry
// identical rings; and that the notes are not vacuous, since arbitrary
// weights do make the two differ.
func TestDecodeNotesPredictIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var quiet, differed int
	for i := range 300 {
		c := model.Cluster{Name: "c", MinRingSize: 1 << (4 + rng.IntN(9)), MaxRingSize: 4096}
		n := 1 + rng.IntN(12)
		for j := range n {
			c.Endpoints = append(c.Endpoints, model.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", i/256, i%256, j), Port: 80, Weight: uint32(1 + rng.IntN(7))})
		}
		if i%2 == 0 {
			// Make the weights sum to a power of two.
			var sum uint32
			for _, ep := range c.Endpoints {
				sum += ep.Weight
			}
			for p := uint32(1); ; p <<= 1 {
				if p >= sum {
					c.Endpoints[0].Weight += p - sum
					break
				}
			}
		}
		snap := build(t, c)
		envoy, grpc := entries(decode(t, snap, KindEnvoy, "c")), entries(decode(t, snap, KindGRPC, "c"))
		same := strings.Join(envoy, "\n") == strings.Join(grpc, "\n")
		if len(snap.Notes["c"]) == 0 {
			quiet++
			if !same {
				t.Errorf("no note for %+v, yet Envoy and grpc-go rings differ", c)
			}
		} else if !same {
			differed++
		}
	}
	t.Logf("%d configurations without a note, %d with different rings", quiet, differed)
	if quiet < 50 || differed == 0 {
		t.Errorf("weak sample: %d configurations without a note, %d with different rings", quiet, differed)
	}
}

// TestDecodeEnvoyVectors decodes Envoy's own ring_hash_lb_test.cc and
// maglev_lb_test.cc cases (see the reference vectors) after a trip through
// Build.
func TestDecodeEnvoyVectors(t *testing.T) {
	hosts := func(weights ...uint32) []model.Endpoint {
		var eps []model.Endpoint
		for i, w := range weights {
			eps = append(eps, model.Endpoint{Address: "127.0.0.1", Port: uint32(90 + i), Weight: w})
		}
		return eps
	}
	t.Run("HostWeightedTinyRing", func(t *testing.T) {
		snap := build(t, model.Cluster{Name: "c", MinRingSize: 6, MaxRingSize: 6, Endpoints: hosts(1, 2, 3)})
		want := []string{
			"928266305478181108 127.0.0.1:92", "4443673547860492590 127.0.0.1:92",
			"5583722120771150861 127.0.0.1:91", "6311230543546372928 127.0.0.1:91",
			"13444792449719432967 127.0.0.1:92", "16117243373044804889 127.0.0.1:90",
		}
		if got := entries(decode(t, snap, KindEnvoy, "c")); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("ring = %q, want %q", got, want)
		}
	})
	t.Run("Basic picks", func(t *testing.T) {
		snap := build(t, model.Cluster{Name: "c", MinRingSize: 12, MaxRingSize: 12, Endpoints: hosts(1, 1, 1, 1, 1, 1)})
		for _, kind := range RingKinds() {
			d := decode(t, snap, kind, "c")
			for h, want := range map[uint64]string{
				0: "127.0.0.1:94", ^uint64(0): "127.0.0.1:94", 3551244743356806947: "127.0.0.1:95",
				3551244743356806948: "127.0.0.1:93", 16117243373044804880: "127.0.0.1:90",
			} {
				if got := d.Endpoints[d.Ring.Pick(h)].Addr; got != want {
					t.Errorf("%s: Pick(%d) = %s, want %s", kind, h, got, want)
				}
			}
		}
	})
	t.Run("Maglev Basic", func(t *testing.T) {
		snap := build(t, model.Cluster{Name: "c", Policy: model.PolicyMaglev, TableSize: 7, Endpoints: hosts(1, 1, 1, 1, 1, 1)})
		want := []int{2, 4, 0, 1, 5, 0, 3}
		for _, kind := range []Kind{KindEnvoy, KindClientlib} {
			d := decode(t, snap, kind, "c")
			for slot, host := range want {
				if got, w := d.Endpoints[d.Ring.Pick(uint64(slot))].Addr, fmt.Sprintf("127.0.0.1:%d", 90+host); got != w {
					t.Errorf("%s: slot %d = %s, want %s", kind, slot, got, w)
				}
			}
		}
	})
}

func TestDecodeSkipperVectors(t *testing.T) {
	snap := build(t, model.Cluster{Name: "c", Policy: model.PolicySkipper, Endpoints: []model.Endpoint{
		{Address: "127.0.0.1", Port: 8080}, {Address: "127.0.0.2", Port: 8080}, {Address: "127.0.0.3", Port: 8080},
	}})
	d := decode(t, snap, KindClientlib, "c")
	if d.Ring.Size() != 300 {
		t.Fatalf("Skipper ring of %d entries, want 300", d.Ring.Size())
	}
	for key, want := range map[string]string{
		"192.168.0.1": "127.0.0.3:8080", "10.0.0.1": "127.0.0.2:8080", "product-1": "127.0.0.3:8080",
		"product-2": "127.0.0.1:8080", "AB123C00D-E11": "127.0.0.2:8080", "": "127.0.0.1:8080",
	} {
		if got := d.Endpoints[d.Ring.Pick(ringhash.HashKey(key))].Addr; got != want {
			t.Errorf("key %q picks %s, want %s", key, got, want)
		}
	}
}

func TestDecodeGRPCRingCap(t *testing.T) {
	snap := build(t, model.Cluster{Name: "c", MinRingSize: 8192, MaxRingSize: 16384, Endpoints: threeEndpoints()})
	if got := decode(t, snap, KindEnvoy, "c").Ring.Size(); got != 8193 {
		t.Errorf("Envoy ring of %d entries, want 8193 (three hosts, min 8192)", got)
	}
	if got := decode(t, snap, KindGRPC, "c").Ring.Size(); got != ringhash.GRPCRingHashCap {
		t.Errorf("grpc ring of %d entries, want the cap %d", got, ringhash.GRPCRingHashCap)
	}
}

func TestDecodeEndpoints(t *testing.T) {
	snap := build(t, model.Cluster{Name: "c", Endpoints: []model.Endpoint{
		{Address: "fd00::2", Port: 443, Scheme: "https", Zone: "z1", Weight: 4},
		{Address: "10.0.0.1", Port: 80, HashKey: "pod-a"},
	}})
	cds, cla := published(snap, KindGRPC, "c")
	cla = proto.Clone(cla).(*endpointv3.ClusterLoadAssignment)
	cla.Endpoints[0].LbEndpoints = append(cla.Endpoints[0].LbEndpoints, &endpointv3.LbEndpoint{
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{
			Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "10.0.0.9", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 80}}},
		}}},
		HealthStatus: corev3.HealthStatus_UNHEALTHY,
	})
	d, err := Decode(cds, cla, KindGRPC)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ep := range d.Endpoints {
		got = append(got, fmt.Sprintf("%s w%d zone=%q scheme=%s key=%q md=%v", ep.Addr, ep.Weight, ep.Zone, ep.Scheme, ep.HashKey, ep.Metadata != nil))
	}
	want := []string{
		`[fd00::2]:443 w4 zone="z1" scheme=https key="" md=true`,
		`10.0.0.1:80 w1 zone="" scheme=http key="pod-a" md=true`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("endpoints:\n%s\nwant (EDS order, unhealthy left out):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if d.Ring.NumEndpoints() != 2 {
		t.Errorf("ring over %d endpoints, want 2", d.Ring.NumEndpoints())
	}
}

func TestRouteHashHeader(t *testing.T) {
	snap := build(t, model.Cluster{Name: "c", HashHeader: "x-user", Endpoints: threeEndpoints()})
	rc := snap.Kinds[KindGRPC][resourcev3.RouteType][RouteName("c")].(*routev3.RouteConfiguration)
	if h, ok := RouteHashHeader(rc, "c"); !ok || h != "x-user" {
		t.Errorf("RouteHashHeader = %q, %v; want x-user", h, ok)
	}
	if _, ok := RouteHashHeader(rc, "other"); ok {
		t.Error("found a hash header for a cluster the route does not name")
	}
}

// TestDecodePolicySelection feeds Decode clusters Build never publishes, to
// pin how each data plane walks load_balancing_policy.
func TestDecodePolicySelection(t *testing.T) {
	snap := build(t, model.Cluster{Name: "c", Endpoints: threeEndpoints()})
	_, cla := published(snap, KindEnvoy, "c")

	entry := func(name string, m proto.Message) *clusterv3.LoadBalancingPolicy_Policy {
		return &clusterv3.LoadBalancingPolicy_Policy{TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: name, TypedConfig: mustAny(t, m)}}
	}
	ringHash := func(f ringhashv3.RingHash_HashFunction) *clusterv3.LoadBalancingPolicy_Policy {
		return entry("rh", &ringhashv3.RingHash{HashFunction: f, MinimumRingSize: wrapperspb.UInt64(64), MaximumRingSize: wrapperspb.UInt64(64)})
	}
	maglev := entry("mg", &maglevv3.Maglev{TableSize: wrapperspb.UInt64(131)})
	custom := func(typeURL string) *clusterv3.LoadBalancingPolicy_Policy {
		return entry("custom", &xdstypev3.TypedStruct{TypeUrl: typeURL, Value: &structpb.Struct{}})
	}
	roundRobin := entry("rr", &roundrobinv3.RoundRobin{})
	withPolicies := func(ps ...*clusterv3.LoadBalancingPolicy_Policy) *clusterv3.Cluster {
		return &clusterv3.Cluster{Name: "c", LoadBalancingPolicy: &clusterv3.LoadBalancingPolicy{Policies: ps}}
	}
	legacy := func(p clusterv3.Cluster_LbPolicy, f clusterv3.Cluster_RingHashLbConfig_HashFunction) *clusterv3.Cluster {
		return &clusterv3.Cluster{Name: "c", LbPolicy: p, LbConfig: &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{HashFunction: f}}}
	}

	tests := []struct {
		name    string
		cds     *clusterv3.Cluster
		kind    Kind
		policy  string
		size    int
		wantErr string
	}{
		{"grpc skips maglev", withPolicies(maglev, ringHash(ringhashv3.RingHash_XX_HASH)), KindGRPC, "ring_hash", 64, ""},
		{"envoy takes maglev", withPolicies(maglev, ringHash(ringhashv3.RingHash_XX_HASH)), KindEnvoy, "maglev", 131, ""},
		{"grpc with maglev alone", withPolicies(maglev), KindGRPC, "", 0, "no load_balancing_policy entry"},
		{"grpc rejects DEFAULT_HASH", withPolicies(ringHash(ringhashv3.RingHash_DEFAULT_HASH)), KindGRPC, "", 0, "XX_HASH"},
		{"envoy reads DEFAULT_HASH as xxHash", withPolicies(ringHash(ringhashv3.RingHash_DEFAULT_HASH)), KindEnvoy, "ring_hash", 64, ""},
		{"grpc rejects MURMUR_HASH_2", withPolicies(ringHash(ringhashv3.RingHash_MURMUR_HASH_2)), KindGRPC, "", 0, "XX_HASH"},
		{"clientlib runs skipper", withPolicies(custom(SkipperTypeURL), ringHash(ringhashv3.RingHash_XX_HASH)), KindClientlib, "skipper", 300, ""},
		{"grpc falls back from skipper", withPolicies(custom(SkipperTypeURL), ringHash(ringhashv3.RingHash_XX_HASH)), KindGRPC, "ring_hash", 64, ""},
		{"envoy skips unknown custom policy", withPolicies(custom("type.googleapis.com/acme.lb"), maglev), KindEnvoy, "maglev", 131, ""},
		{"round robin is no ring", withPolicies(roundRobin, ringHash(ringhashv3.RingHash_XX_HASH)), KindClientlib, "", 0, "not a consistent hash"},
		{"legacy RING_HASH", legacy(clusterv3.Cluster_RING_HASH, clusterv3.Cluster_RingHashLbConfig_XX_HASH), KindGRPC, "ring_hash", 1026, ""},
		{"legacy MAGLEV on grpc", &clusterv3.Cluster{Name: "c", LbPolicy: clusterv3.Cluster_MAGLEV}, KindGRPC, "", 0, "MAGLEV"},
		{"legacy MAGLEV on envoy", &clusterv3.Cluster{Name: "c", LbPolicy: clusterv3.Cluster_MAGLEV}, KindEnvoy, "maglev", 65537, ""},
		{"legacy round robin", &clusterv3.Cluster{Name: "c"}, KindEnvoy, "", 0, "not a consistent hash"},
		{"unknown kind", withPolicies(ringHash(ringhashv3.RingHash_XX_HASH)), Kind("nginx"), "", 0, "unknown kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Decode(tt.cds, cla, tt.kind)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrUndecodable) {
					t.Fatalf("Decode error = %v, want ErrUndecodable containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Policy != tt.policy || d.Ring.Size() != tt.size {
				t.Errorf("decoded %s ring of %d, want %s of %d", d.Policy, d.Ring.Size(), tt.policy, tt.size)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	snap := build(t, model.Cluster{Name: "c", Endpoints: threeEndpoints()})
	cds, cla := published(snap, KindEnvoy, "c")
	allUnhealthy := proto.Clone(cla).(*endpointv3.ClusterLoadAssignment)
	for _, lbe := range allUnhealthy.Endpoints[0].LbEndpoints {
		lbe.HealthStatus = corev3.HealthStatus_DRAINING
	}
	other := proto.Clone(cla).(*endpointv3.ClusterLoadAssignment)
	other.ClusterName = "d"
	zeroWeight := proto.Clone(cla).(*endpointv3.ClusterLoadAssignment)
	zeroWeight.Endpoints[0].LbEndpoints[1].LoadBalancingWeight = wrapperspb.UInt32(0)

	for name, in := range map[string]*endpointv3.ClusterLoadAssignment{
		"no healthy endpoints": allUnhealthy,
		"other cluster":        other,
		"zero weight":          zeroWeight,
		"nil assignment":       nil,
		"empty assignment":     {ClusterName: "c"},
	} {
		if _, err := Decode(cds, in, KindEnvoy); !errors.Is(err, ErrUndecodable) {
			t.Errorf("%s: Decode error = %v, want ErrUndecodable", name, err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	rng := rand.New(rand.NewPCG(11, 12))
	c := randomCluster(rng, "c", 100)
	c.Policy = model.PolicyRingHash
	snap := build(b, c)
	cds, cla := published(snap, KindGRPC, "c")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(cds, cla, KindGRPC); err != nil {
			b.Fatal(err)
		}
	}
}

// A CLA from a server before ring_sizes carries ring_size only, with the
// Cluster at minimum = maximum = ring_size; a neighbouring step's Cluster
// must not pair with it (the new client library used to accept any).
func TestPairConsistentReadsAnOlderServersRingSize(t *testing.T) {
	cla := &endpointv3.ClusterLoadAssignment{Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
		Metadata: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			MetadataRingxds: {Fields: map[string]*structpb.Value{legacyRingSize: structpb.NewNumberValue(2563)}},
		}},
	}}}}}
	sized := func(minSize, maxSize uint64) *clusterv3.Cluster {
		cfg, err := anypb.New(&ringhashv3.RingHash{HashFunction: ringhashv3.RingHash_XX_HASH,
			MinimumRingSize: wrapperspb.UInt64(minSize), MaximumRingSize: wrapperspb.UInt64(maxSize)})
		if err != nil {
			t.Fatal(err)
		}
		return &clusterv3.Cluster{LoadBalancingPolicy: &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{{
			TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: PolicyNameRingHash, TypedConfig: cfg},
		}}}}
	}
	if !PairConsistent(sized(2563, 2563), cla) {
		t.Error("the step's own Cluster does not pair")
	}
	if PairConsistent(sized(2571, 2571), cla) {
		t.Error("the next step's Cluster pairs with an older server's weights")
	}
}
