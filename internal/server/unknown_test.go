package server

import (
	"context"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ringxds/ringxds/internal/model"
)

// A misspelled cluster looks like a silent server to the client: the
// server names it on /debug/clients with the published names a typo away,
// and logs it once; a client that leaves is logged once too.
func TestUnknownClusterIsShownAndLoggedOnce(t *testing.T) {
	obs, logs := observer.New(zap.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := New(ctx, Options{Logger: zap.New(obs), Now: func() time.Time { return now }})
	c := model.Cluster{Name: "products", Endpoints: []model.Endpoint{{Address: "10.0.0.1", Port: 80}}}
	c.ApplyDefaults()
	if err := s.Apply(model.State{Clusters: []model.Cluster{c}}); err != nil {
		t.Fatal(err)
	}
	cb := callbacks{s.registry}
	if err := cb.OnStreamOpen(ctx, 1, ""); err != nil {
		t.Fatal(err)
	}
	req := &discovery.DiscoveryRequest{
		Node:    &core.Node{Id: "checkout-1", UserAgentName: "ringxds-clientlib"},
		TypeUrl: resource.ClusterType, ResourceNames: []string{"product", "products"},
	}
	for range 3 { // SotW restates the subscription with every request
		if err := cb.OnStreamRequest(1, req); err != nil {
			t.Fatal(err)
		}
	}
	cs := s.Clients()
	if len(cs) != 1 {
		t.Fatalf("%d clients", len(cs))
	}
	u := cs[0].UnknownClusters
	if len(u) != 1 || u[0].Name != "product" || !slices.Equal(u[0].DidYouMean, []string{"products"}) {
		t.Fatalf("unknown clusters %+v, want product (did you mean products)", u)
	}
	warned := logs.FilterMessageSnippet("does not publish")
	if warned.Len() != 1 || warned.All()[0].ContextMap()["cluster"] != "product" || warned.All()[0].ContextMap()["node"] != "checkout-1" {
		t.Fatalf("logged %d times: %v", warned.Len(), warned.All())
	}

	// Publishing the name clears it.
	c2 := c
	c2.Name = "product"
	if err := s.Apply(model.State{Clusters: []model.Cluster{c2, c}}); err != nil {
		t.Fatal(err)
	}
	if u := s.Clients()[0].UnknownClusters; len(u) != 0 {
		t.Errorf("unknown clusters %+v after the cluster was published", u)
	}

	now = now.Add(90 * time.Second)
	cb.OnStreamClosed(1, nil)
	gone := logs.FilterMessage("xDS client disconnected")
	if gone.Len() != 1 {
		t.Fatalf("disconnect logged %d times", gone.Len())
	}
	f := gone.All()[0].ContextMap()
	if f["node"] != "checkout-1" || f["connected_for"] != 90*time.Second {
		t.Errorf("disconnect logged with %v, want the node and 1m30s", f)
	}
}
