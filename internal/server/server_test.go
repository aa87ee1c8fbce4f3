package server

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// The caches return resources in map order, so the content version must
// not depend on order, and must change with any byte of content.
func TestContentVersionDependsOnContentOnly(t *testing.T) {
	a := &anypb.Any{TypeUrl: resource.ClusterType, Value: []byte("cluster a")}
	b := &anypb.Any{TypeUrl: resource.ClusterType, Value: []byte("cluster b")}
	b2 := &anypb.Any{TypeUrl: resource.ClusterType, Value: []byte("cluster B")}
	if contentVersion([]*anypb.Any{a, b}) != contentVersion([]*anypb.Any{b, a}) {
		t.Fatal("version depends on resource order")
	}
	if contentVersion([]*anypb.Any{a, b}) == contentVersion([]*anypb.Any{a, b2}) {
		t.Fatal("version ignores a content change")
	}
	if contentVersion([]*anypb.Any{a, a}) == contentVersion(nil) {
		t.Fatal("two equal resources cancel out")
	}
	if contentVersion([]*anypb.Any{a}) == contentVersion([]*anypb.Any{a, b}) {
		t.Fatal("version ignores an added resource")
	}
	withRemoval := &discovery.DeltaDiscoveryResponse{RemovedResources: []string{"a"}}
	if deltaContentVersion(withRemoval) == deltaContentVersion(&discovery.DeltaDiscoveryResponse{}) {
		t.Fatal("delta version ignores removals")
	}
}

// Kinds share a cache exactly where their translations are identical by
// construction, and never otherwise.
func TestCacheGroups(t *testing.T) {
	for _, tc := range []struct {
		kind    snapshot.Kind
		typeURL string
		want    string
	}{
		{snapshot.KindEnvoy, resource.EndpointType, "all/eds"},
		{snapshot.KindGRPC, resource.EndpointType, "all/eds"},
		{snapshot.KindEnvoy, resource.ClusterType, "envoy/cds"},
		{snapshot.KindGRPC, resource.ClusterType, "grpc/cds"},
		{snapshot.KindClientlib, resource.ClusterType, "clientlib/cds"},
		{snapshot.KindGRPC, resource.ListenerType, "proxyless/lds"},
		{snapshot.KindClientlib, resource.RouteType, "proxyless/rds"},
		{snapshot.KindEnvoy, resource.RouteType, "envoy/rds"},
	} {
		if got := cacheGroup(tc.kind, tc.typeURL); got != tc.want {
			t.Errorf("cacheGroup(%s, %s) = %s, want %s", tc.kind, shortType(tc.typeURL), got, tc.want)
		}
	}
	if got := classify(&core.Node{UserAgentName: "envoy"}, resource.SecretType); got != unservedGroup {
		t.Errorf("secrets classified to %q, want the unserved cache", got)
	}
}

// BenchmarkApplyOneClusterChanged is the common push: one of 100 clusters of
// 100 endpoints changes; the rest must cost (almost) nothing.
func BenchmarkApplyOneClusterChanged(b *testing.B) {
	var states [2]model.State
	for v := range states {
		for c := range 100 {
			cl := model.Cluster{Name: fmt.Sprintf("svc-%03d", c)}
			for e := range 100 {
				if c == 42 && v == 1 && e == 0 {
					continue
				}
				cl.Endpoints = append(cl.Endpoints, model.Endpoint{Address: fmt.Sprintf("10.%d.%d.1", c, e), Port: 8080})
			}
			states[v].Clusters = append(states[v].Clusters, cl)
		}
		if err := states[v].Normalize(); err != nil {
			b.Fatal(err)
		}
	}
	s := New(b.Context(), Options{})
	if err := s.Apply(states[0]); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if err := s.Apply(states[i%2]); err != nil {
			b.Fatal(err)
		}
	}
}

// A cluster the builder cannot translate is logged once, shown in the
// gauge, and does not hold back the other clusters' updates; when it is
// fixed the gauge clears.
func TestApplyPublishesAroundAClusterThatFails(t *testing.T) {
	obs, logs := observer.New(zap.InfoLevel)
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := New(ctx, Options{Logger: zap.New(obs), Registerer: reg, Now: func() time.Time { return now }})
	cluster := func(name string, port uint32, weight uint32) model.Cluster {
		c := model.Cluster{Name: name, Endpoints: []model.Endpoint{{Address: "10.0.0.1", Port: port}, {Address: "10.0.0.2", Port: port}}}
		c.ApplyDefaults()
		c.Endpoints[1].Weight = weight // 0: not normalized, refused by the builder
		return c
	}
	apply := func(clusters ...model.Cluster) {
		t.Helper()
		if err := s.Apply(model.State{Clusters: clusters}); err != nil {
			t.Fatal(err)
		}
	}
	failed := func() float64 {
		t.Helper()
		return testutil.ToFloat64(s.metrics.failedClusters.WithLabelValues("a"))
	}
	apply(cluster("a", 80, 1), cluster("b", 80, 1))
	apply(cluster("a", 81, 0), cluster("b", 81, 1))
	apply(cluster("a", 82, 0), cluster("b", 82, 1))
	cla := s.Current().Kinds[snapshot.KindEnvoy][resource.EndpointType]
	if got := cla["b"].(*endpointv3.ClusterLoadAssignment).GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); got != 82 {
		t.Errorf("healthy cluster b serves port %d, want 82", got)
	}
	if got := cla["a"].(*endpointv3.ClusterLoadAssignment).GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); got != 80 {
		t.Errorf("failing cluster a serves port %d, want its last good 80", got)
	}
	if failed() != 1 {
		t.Errorf("gauge %v, want 1", failed())
	}
	if n := logs.FilterMessageSnippet("cannot be translated").Len(); n != 1 {
		t.Errorf("the failure was logged %d times, want once", n)
	}
	apply(cluster("a", 83, 1), cluster("b", 83, 1))
	if failed() != 0 {
		t.Errorf("gauge %v after the fix, want 0", failed())
	}
}

// The caches serve the encodings diff made to version the resources
// rather than encoding them again; those must be the bytes the cache
// would have made itself, for every kind and type, metadata included.
func TestCachesServeTheEncodingsDiffMade(t *testing.T) {
	st := model.State{Clusters: []model.Cluster{{Name: "products", Endpoints: []model.Endpoint{
		{Address: "10.0.0.1", Port: 8080, Zone: "a"}, {Address: "10.0.0.2", Port: 8080, HashKey: "b-key"},
	}}}}
	if err := st.Normalize(); err != nil {
		t.Fatal(err)
	}
	s := New(t.Context(), Options{})
	if err := s.Apply(st); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, t2 := range resourceTypes {
		for _, g := range s.groups[t2] {
			held := s.caches[g.name].Resources()
			for name, r := range s.Current().Kinds[g.kind][t2] {
				want, err := cache.MarshalResource(r)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(held[name], want) {
					t.Errorf("%s %s: the cache serves other bytes than the resource's encoding", g.name, name)
				}
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("no resources compared")
	}
}
