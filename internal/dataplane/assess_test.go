package dataplane

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/snapshot"
)

func build(t *testing.T, clusters ...model.Cluster) *snapshot.Snapshot {
	t.Helper()
	st := model.State{Clusters: clusters}
	if err := st.Normalize(); err != nil {
		t.Fatal(err)
	}
	snap, err := snapshot.Build(st, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func endpoints(weights ...uint32) []model.Endpoint {
	var eps []model.Endpoint
	for i, w := range weights {
		eps = append(eps, model.Endpoint{Address: fmt.Sprintf("10.0.0.%d", i+1), Port: 8080, Weight: w})
	}
	return eps
}

func client(impl string, major, minor int) Client {
	c := Client{Implementation: impl, Version: Version{major, minor, 0}}
	c.Kind = c.defaultKind()
	return c
}

func TestAssess(t *testing.T) {
	withKeys := endpoints(1, 1, 2)
	for i := range withKeys {
		withKeys[i].HashKey = fmt.Sprintf("pod-%d", i)
	}
	snap := build(t,
		model.Cluster{Name: "products", Endpoints: endpoints(1, 1, 2)},
		model.Cluster{Name: "keyed", Endpoints: withKeys},
		model.Cluster{Name: "inventory", Policy: model.PolicyMaglev, Endpoints: endpoints(1, 1, 1)},
		model.Cluster{Name: "catalog", Policy: model.PolicySkipper, Endpoints: endpoints(1, 1, 1)},
		model.Cluster{Name: "big", MinRingSize: 8192, MaxRingSize: 8192, Endpoints: endpoints(1, 1, 1)},
		model.Cluster{Name: "huge", MinRingSize: 2 << 20, MaxRingSize: 2 << 20, Endpoints: endpoints(1, 1, 1)},
	)
	forced := func(c Client, kind snapshot.Kind) Client { c.Kind, c.KindFromMetadata = kind, true; return c }
	withPackage := func(c Client) Client { c.GRPCBalancer = true; return c }
	for _, tc := range []struct {
		name    string
		client  Client
		cluster string
		state   string
		reason  string // substring
	}{
		{"envoy is the reference", client(Envoy, 1, 37), "products", StateOK, ""},
		{"grpc-go", client(GRPCGo, 1, 85), "products", StateOK, ""},
		{"grpc-go on maglev served as ring_hash", client(GRPCGo, 1, 85), "inventory", StateRingDiffers, "Envoy runs maglev on this cluster, which grpc-go cannot"},
		{"grpc-go on skipper served as ring_hash", client(GRPCGo, 1, 85), "catalog", StateOK, ""},
		{"grpc-go with grpcbalancer runs skipper", withPackage(client(GRPCGo, 1, 85)), "catalog", StateRingDiffers, "Skipper ring (clientlib/grpcbalancer)"},
		{"grpc-go with grpcbalancer on ring_hash", withPackage(client(GRPCGo, 1, 85)), "products", StateOK, ""},
		{"grpc-go with hash keys", client(GRPCGo, 1, 85), "keyed", StateOK, ""},
		{"grpc-go before A76 ignores hash keys", client(GRPCGo, 1, 78), "keyed", StateRingDiffers, "ignores the envoy.lb hash_key"},
		{"grpc-go before A52 reads the legacy fields", client(GRPCGo, 1, 50), "products", StateOK, ""},
		{"grpc-go caps the ring", client(GRPCGo, 1, 85), "big", StateRingDiffers, "its ring has 4096 entries, Envoy's 8192"},
		{"grpc-js", client(GRPCJS, 1, 14), "products", StateOK, ""},
		{"grpc-js on maglev", client(GRPCJS, 1, 14), "inventory", StateRingDiffers, "about"},
		{"a huge ring is not built", client(GRPCJS, 1, 14), "huge", StateUnverified, "too many to compare"},
		{"an Envoy served round_robin by its metadata", forced(client(Envoy, 1, 37), snapshot.KindGRPCRoundRobin), "products", StateIncompatible, "without a ring"},
		{"an Envoy served the grpc kind", forced(client(Envoy, 1, 37), snapshot.KindGRPC), "products", StateOK, ""},
		{"grpc-js hashes addresses", client(GRPCJS, 1, 14), "keyed", StateRingDiffers, "ignores the envoy.lb hash_key"},
		{"grpc-js given the typed sizes NACKs", forced(client(GRPCJS, 1, 14), snapshot.KindGRPC), "products", StateIncompatible, "min_ring_size must be a number"},
		{"c-core 1.53", client(CCore, 1, 53), "products", StateOK, ""},
		{"c-core 1.51 crashes in ring_hash", client(CCore, 1, 51), "products", StateIncompatible, "serves it round_robin"},
		{"c-core 1.51 asked for ring_hash", forced(client(CCore, 1, 51), snapshot.KindGRPC), "products", StateIncompatible, "expect it to crash"},
		{"c-core 1.54 given only the typed list", forced(client(CCore, 1, 54), snapshot.KindEnvoy), "products", StateIncompatible, "runs round_robin"},
		{"grpc-java", client(GRPCJava, 1, 83), "products", StateRingDiffers, `hashes each endpoint as "/ip:port"`},
		{"an unknown gRPC", client(GRPCOther, 0, 9), "products", StateUnverified, "does not know"},
	} {
		v := Assess(snap, tc.client, tc.cluster)
		if v.State != tc.state || !strings.Contains(v.Reason, tc.reason) {
			t.Errorf("%s: %s %q, want %s with %q", tc.name, v.State, v.Reason, tc.state, tc.reason)
		}
		if (v.State == StateRingDiffers) != (v.Elsewhere > 0) {
			t.Errorf("%s: state %s with %g of keys elsewhere", tc.name, v.State, v.Elsewhere)
		}
	}
	if v := Assess(snap, client(GRPCJava, 1, 83), "products"); !strings.Contains(v.Reason, "about") || v.Elsewhere < 0.3 {
		t.Errorf("grpc-java: %+v, want about half or more of the keys elsewhere", v)
	}
}

func TestAssessorReusesVerdictsOfUnchangedClusters(t *testing.T) {
	b := snapshot.NewBuilder()
	st := model.State{Clusters: []model.Cluster{
		{Name: "a", Endpoints: endpoints(1, 1)},
		{Name: "b", Endpoints: endpoints(1, 1)},
	}}
	if err := st.Normalize(); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	snap1, err := b.Build(st, now)
	if err != nil {
		t.Fatal(err)
	}
	var a Assessor
	java := client(GRPCJava, 1, 83)
	first := a.Assess(snap1, java, []string{"a", "b"})
	// Change b only; a's resources are reused by the builder.
	st.Clusters[1].Endpoints = endpoints(1, 1, 1)
	if err := st.Normalize(); err != nil {
		t.Fatal(err)
	}
	snap2, err := b.Build(st, now)
	if err != nil {
		t.Fatal(err)
	}
	second := a.Assess(snap2, java, []string{"a", "b"})
	if len(a.verdicts) != 2 {
		t.Fatalf("%d cached verdicts, want 2", len(a.verdicts))
	}
	if first[0] != second[0] {
		t.Errorf("unchanged cluster a: %+v then %+v", first[0], second[0])
	}
	if first[1].Elsewhere == second[1].Elsewhere {
		t.Errorf("cluster b changed from 2 to 3 endpoints, yet its verdict did not: %+v", second[1])
	}
	if want := Assess(snap2, java, "b"); second[1] != want {
		t.Errorf("cached %+v, computed %+v", second[1], want)
	}
	// A cluster deleted from the published state is forgotten.
	st.Clusters = st.Clusters[:1]
	snap3, err := b.Build(st, now)
	if err != nil {
		t.Fatal(err)
	}
	a.Assess(snap3, java, []string{"a"})
	if len(a.verdicts) != 1 {
		t.Fatalf("%d cached verdicts after cluster b was deleted, want 1", len(a.verdicts))
	}
}

// BenchmarkAssessorWarm is the cost of judging a gRPC client holding 100
// clusters on an ACK once the verdicts are cached: what every ACK of a
// thousand clients costs after a change has been judged once.
func BenchmarkAssessorWarm(b *testing.B) {
	var clusters []model.Cluster
	var names []string
	for i := range 100 {
		name := fmt.Sprintf("svc-%03d", i)
		clusters = append(clusters, model.Cluster{Name: name, Endpoints: endpoints(1, 1, 2, 1, 3)})
		names = append(names, name)
	}
	snap := buildB(b, clusters...)
	var a Assessor
	c := client(GRPCGo, 1, 85)
	a.Assess(snap, c, names)
	b.ReportAllocs()
	for b.Loop() {
		a.Assess(snap, c, names)
	}
}

// BenchmarkAssessorCold is the cost of judging one cluster after it
// changed: Envoy's ring and the client's are decoded and compared.
func BenchmarkAssessorCold(b *testing.B) {
	snap := buildB(b, model.Cluster{Name: "products", Endpoints: endpoints(1, 1, 2, 1, 3)})
	c := client(GRPCJS, 1, 14)
	b.ReportAllocs()
	for b.Loop() {
		var a Assessor
		a.Assess(snap, c, []string{"products"})
	}
}

func buildB(b *testing.B, clusters ...model.Cluster) *snapshot.Snapshot {
	st := model.State{Clusters: clusters}
	if err := st.Normalize(); err != nil {
		b.Fatal(err)
	}
	snap, err := snapshot.Build(st, time.Unix(0, 0))
	if err != nil {
		b.Fatal(err)
	}
	return snap
}

// A grpc-go client running clientlib/grpcbalancer follows the published
// weight ramp's rings before and after a fade; mid-fade its verdict says
// that it cuts keys over on its own.
func TestAssessGRPCBalancerMidFade(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	eps := endpoints(1, 1, 1, 1, 1)
	eps[4].FirstSeen = now.Add(-5 * time.Second)
	st := model.State{Clusters: []model.Cluster{{Name: "products", FadeIn: &model.FadeIn{Duration: 10 * time.Second, Exponent: 2.5}, Endpoints: eps}}}
	if err := st.Normalize(); err != nil {
		t.Fatal(err)
	}
	snap, err := snapshot.Build(st, now)
	if err != nil {
		t.Fatal(err)
	}
	c := client(GRPCGo, 1, 85)
	if v := Assess(snap, c, "products"); v.State != StateOK || v.Reason != "" {
		t.Errorf("without the package: %+v", v)
	}
	c.GRPCBalancer = true
	if v := Assess(snap, c, "products"); v.State != StateOK || !strings.Contains(v.Reason, "cuts each key over") {
		t.Errorf("with the package mid-fade: %+v", v)
	}
	later, err := snapshot.Build(st, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if v := Assess(later, c, "products"); v.State != StateOK || v.Reason != "" {
		t.Errorf("with the package after the fade: %+v", v)
	}
}
