package server

import (
	"context"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// An Envoy-shaped delta client reconnects (to this or another replica)
// with initial_resource_versions for what it accepted on its previous
// stream. go-control-plane sends none of them again while they are
// current, so CSDS must report them accepted at the client's versions, not
// as never sent.
func TestCSDSDeltaReconnectKeepsWhatTheClientHolds(t *testing.T) {
	f := startCSDS(t, DefaultLimits())
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ads := discovery.NewAggregatedDiscoveryServiceClient(f.cc)
	csc := statusv3.NewClientStatusDiscoveryServiceClient(f.cc)
	sctx, scancel := context.WithCancel(ctx)
	d1, err := ads.DeltaAggregatedResources(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.Send(&discovery.DeltaDiscoveryRequest{Node: testNode("envoy-d"), TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"catalog", "products.shop"}}); err != nil {
		t.Fatal(err)
	}
	r1, err := d1.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: r1.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	vers := map[string]string{}
	for _, r := range r1.GetResources() {
		vers[r.GetName()] = r.GetVersion()
	}
	t.Logf("first stream got %v (system version %q)", vers, r1.GetSystemVersionInfo())
	time.Sleep(200 * time.Millisecond)
	resp, _ := csc.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{ExcludeResourceContents: true})
	t.Logf("before reconnect: %v", statesOf(configFor(resp, "envoy-d")))
	scancel()

	d2, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Send(&discovery.DeltaDiscoveryRequest{Node: testNode("envoy-d"), TypeUrl: resource.ClusterType,
		ResourceNamesSubscribe: []string{"catalog", "products.shop"}, InitialResourceVersions: vers}); err != nil {
		t.Fatal(err)
	}
	got := make(chan *discovery.DeltaDiscoveryResponse, 1)
	go func() {
		r, err := d2.Recv()
		if err == nil {
			got <- r
		}
	}()
	select {
	case r := <-got:
		t.Logf("second stream got a response with %d resources", len(r.GetResources()))
		_ = d2.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: r.GetNonce()})
	case <-time.After(time.Second):
		t.Logf("second stream: nothing sent (client already holds the versions)")
	}
	time.Sleep(200 * time.Millisecond)
	resp, _ = csc.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{ExcludeResourceContents: true})
	st := statesOf(configFor(resp, "envoy-d"))
	t.Logf("after reconnect: %v", st)
	if len(st) != 2 {
		t.Fatalf("after reconnect CSDS lists %d resources, want the 2 the client holds: %v", len(st), st)
	}
	for k, s := range st {
		if s.client.String() != "ACKED" {
			t.Errorf("%s: %v; the client holds and accepted it (initial_resource_versions)", k, s)
		}
	}
}
