package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/testcp"
)

// sotwACK asks for names of one type on a SotW stream, receives the
// response and ACKs it, as every gRPC implementation does.
func sotwACK(t *testing.T, st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, n *core.Node, typeURL string, names []string) *discovery.DiscoveryResponse {
	t.Helper()
	if err := st.Send(&discovery.DiscoveryRequest{Node: n, TypeUrl: typeURL, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("%s: %v", typeURL, err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	return resp
}

// A raw ADS client announcing itself as grpc-java, which hashes endpoints
// as "/ip:port": the server must not let it pass as agreeing. It shows up
// as ring_differs on /debug/clients, in the compatibility metric and in a
// warning naming the cluster.
func TestGRPCJavaIsReportedAsRingDiffers(t *testing.T) {
	backends := testcp.StartBackends(t, 3)
	cp := testcp.Start(t, testcp.TempFile(t, endpointsYAML("products", "ring_hash", "x-product-id", "", backends, []int{1, 1, 2})))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := adsClient(t, cp.XDSAddr).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	java := &core.Node{Id: "java-1", UserAgentName: "gRPC Java", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.83.1"}}
	cds := sotwACK(t, st, java, resource.ClusterType, []string{"products"})
	var c clusterv3.Cluster
	if err := cds.GetResources()[0].UnmarshalTo(&c); err != nil {
		t.Fatal(err)
	}
	if c.GetLoadBalancingPolicy() == nil || c.GetLbPolicy() != clusterv3.Cluster_RING_HASH {
		t.Fatalf("grpc-java got lb_policy %v and load_balancing_policy %v; want the grpc translation with both", c.GetLbPolicy(), c.GetLoadBalancingPolicy())
	}
	sotwACK(t, st, java, resource.EndpointType, []string{"products"})

	var got server.ClientStatus
	testcp.WaitFor(t, 5*time.Second, "grpc-java to be assessed", func() bool {
		var body struct{ Clients []server.ClientStatus }
		cp.GetJSON("/debug/clients", &body)
		for _, s := range body.Clients {
			if s.NodeID == "java-1" && len(s.Verdicts) == 1 {
				got = s
				return true
			}
		}
		return false
	})
	v := got.Verdicts[0]
	if got.Implementation.Implementation != dataplane.GRPCJava || got.Implementation.Version.String() != "1.83.1" ||
		got.Compatibility != dataplane.StateRingDiffers || v.Cluster != "products" || v.Elsewhere < 0.3 || !strings.Contains(v.Reason, `"/ip:port"`) {
		t.Fatalf("/debug/clients: %+v, compatibility %s, verdict %+v; want grpc-java 1.83.1, ring_differs on products with most keys elsewhere", got.Implementation, got.Compatibility, v)
	}
	if n := testutil.ToFloat64(counter(t, cp, "ringxds_xds_client_compatibility", map[string]string{"implementation": "grpc-java", "state": dataplane.StateRingDiffers})); n != 1 {
		t.Fatalf("ringxds_xds_client_compatibility{grpc-java, ring_differs} = %v, want 1", n)
	}
	warned := cp.Logs.FilterMessageSnippet("does not send some keys where Envoy does").All()
	if len(warned) != 1 || !strings.Contains(fmt.Sprint(warned[0].ContextMap()["verdicts"]), "products: ring_differs") {
		t.Fatalf("warnings %+v, want one naming products", warned)
	}
	t.Logf("/debug/clients: %s", v.Reason)

	// The page says it too.
	page := getPage(t, cp.DebugURL+"/")
	if !strings.Contains(page, "ring_differs") || !strings.Contains(page, "grpc-java 1.83.1") {
		t.Fatal("the debug page does not show grpc-java's ring_differs verdict")
	}

	// Gone with the stream.
	cancel()
	testcp.WaitFor(t, 5*time.Second, "the stream to close", func() bool {
		return testutil.ToFloat64(counter(t, cp, "ringxds_xds_client_compatibility", map[string]string{"implementation": "grpc-java", "state": dataplane.StateRingDiffers})) == 0
	})
}

func getPage(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// Verdicts follow the published resources: a grpc-js client is ok until the
// cluster's endpoints get hash keys (which grpc-js ignores), is reported
// from its next ACK on, and is ok again when they go.
func TestVerdictFollowsPushes(t *testing.T) {
	backends := testcp.StartBackends(t, 3)
	plain := endpointsYAML("products", "ring_hash", "x-product-id", "", backends, nil)
	keyed := strings.NewReplacer("weight: 1}", "weight: 1, hash_key: pod-ADDR}").Replace(plain)
	for _, b := range backends {
		keyed = strings.Replace(keyed, "pod-ADDR", "pod-"+b.Addr[strings.LastIndexByte(b.Addr, ':')+1:], 1)
	}
	cp := testcp.Start(t, testcp.TempFile(t, plain))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := adsClient(t, cp.XDSAddr).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	js := &core.Node{Id: "js-1", UserAgentName: "gRPC Node Pure JS", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.14.1"}}
	sotwACK(t, st, js, resource.ClusterType, []string{"products"})
	sotwACK(t, st, js, resource.EndpointType, []string{"products"})
	compat := func() string {
		var body struct{ Clients []server.ClientStatus }
		cp.GetJSON("/debug/clients", &body)
		for _, s := range body.Clients {
			if s.NodeID == "js-1" && len(s.Verdicts) == 1 {
				return s.Compatibility
			}
		}
		return ""
	}
	testcp.WaitFor(t, 5*time.Second, "grpc-js judged ok", func() bool { return compat() == dataplane.StateOK })

	// ackNext receives the next push and ACKs it, as the client would.
	ackNext := func() {
		t.Helper()
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResourceNames: []string{"products"}, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	testcp.WriteFile(t, cp.File, keyed)
	ackNext()
	testcp.WaitFor(t, 5*time.Second, "grpc-js judged ring_differs", func() bool { return compat() == dataplane.StateRingDiffers })
	testcp.WriteFile(t, cp.File, plain)
	ackNext()
	testcp.WaitFor(t, 5*time.Second, "grpc-js judged ok again", func() bool { return compat() == dataplane.StateOK })
	if n := cp.Logs.FilterMessageSnippet("does not send some keys").Len(); n != 1 {
		t.Errorf("%d warnings, want 1 (for the change to ring_differs)", n)
	}
	if n := cp.Logs.FilterMessageSnippet("now agrees with Envoy").Len(); n != 1 {
		t.Errorf("%d recovery logs, want 1", n)
	}
}

// clientStatus returns the /debug/clients entry of a node, or false.
func clientStatus(cp *testcp.ControlPlane, nodeID string) (server.ClientStatus, bool) {
	var body struct{ Clients []server.ClientStatus }
	cp.GetJSON("/debug/clients", &body)
	for _, s := range body.Clients {
		if s.NodeID == nodeID {
			return s, true
		}
	}
	return server.ClientStatus{}, false
}

// A client that rejects its cluster runs whatever it held before, or
// nothing: it is incompatible until it accepts one again, and the verdict
// carries its error.
func TestNACKingClientIsIncompatible(t *testing.T) {
	backends := testcp.StartBackends(t, 3)
	cp := testcp.Start(t, testcp.TempFile(t, endpointsYAML("products", "ring_hash", "x-product-id", "", backends, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := adsClient(t, cp.XDSAddr).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	js := &core.Node{Id: "js-nack", UserAgentName: "gRPC Node Pure JS", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.14.1"}}
	if err := st.Send(&discovery.DiscoveryRequest{Node: js, TypeUrl: resource.ClusterType, ResourceNames: []string{"products"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	// NACK the first response, as grpc-js does with a Cluster it cannot parse.
	const why = "load_balancing_policy parsing failed"
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNames: []string{"products"},
		ResponseNonce: resp.GetNonce(), ErrorDetail: &status.Status{Code: 3, Message: why}}); err != nil {
		t.Fatal(err)
	}
	var got server.ClientStatus
	testcp.WaitFor(t, 5*time.Second, "the NACK to be judged", func() bool {
		var ok bool
		got, ok = clientStatus(cp, "js-nack")
		return ok && got.Compatibility == dataplane.StateIncompatible
	})
	if len(got.Verdicts) != 1 || !strings.Contains(got.Verdicts[0].Reason, why) {
		t.Fatalf("verdicts %+v, want products incompatible with the client's error", got.Verdicts)
	}
}

// Unsubscribing takes the cluster out of the verdicts: a SotW request with
// no names after named ones is "none", not a wildcard.
func TestUnsubscribedClusterLeavesTheVerdicts(t *testing.T) {
	backends := testcp.StartBackends(t, 3)
	cp := testcp.Start(t, testcp.TempFile(t, endpointsYAML("products", "ring_hash", "x-product-id", "", backends, nil)+
		"  - name: keyed\n    endpoints:\n      - {address: 127.0.0.1, port: 1, hash_key: a}\n      - {address: 127.0.0.1, port: 2, hash_key: b}\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := adsClient(t, cp.XDSAddr).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	js := &core.Node{Id: "js-unsub", UserAgentName: "gRPC Node Pure JS", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.14.1"}}
	cds := sotwACK(t, st, js, resource.ClusterType, []string{"products"})
	sotwACK(t, st, js, resource.EndpointType, []string{"products"})
	testcp.WaitFor(t, 5*time.Second, "products judged", func() bool {
		s, ok := clientStatus(cp, "js-unsub")
		return ok && len(s.Verdicts) == 1
	})
	// grpc-js closing its only channel: CDS with no names, answering the
	// last response as every request does.
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: cds.GetVersionInfo(), ResponseNonce: cds.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	testcp.WaitFor(t, 5*time.Second, "no verdicts left", func() bool {
		s, ok := clientStatus(cp, "js-unsub")
		return ok && len(s.Verdicts) == 0 && s.Compatibility == dataplane.StateOK
	})
	if n := cp.Logs.FilterMessageSnippet("does not send some keys").Len(); n != 0 {
		t.Fatalf("%d warnings about clusters the client never held (keyed differs for grpc-js)", n)
	}
}

// A stream whose later requests name another node is judged as that node:
// go-control-plane serves each request by the node it carries.
func TestStreamReidentifiedWhenItsNodeChanges(t *testing.T) {
	backends := testcp.StartBackends(t, 3)
	cp := testcp.Start(t, testcp.TempFile(t, endpointsYAML("products", "ring_hash", "x-product-id", "", backends, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := adsClient(t, cp.XDSAddr).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	goNode := &core.Node{Id: "switch", UserAgentName: "gRPC Go", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.85.0"}}
	sotwACK(t, st, goNode, resource.ClusterType, []string{"products"})
	py := &core.Node{Id: "switch", UserAgentName: "gRPC C-core linux Python", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "C-core 29.0.0 Python 1.51.1"}}
	sotwACK(t, st, py, resource.EndpointType, []string{"products"})
	testcp.WaitFor(t, 5*time.Second, "the stream judged as C-core 1.51", func() bool {
		s, ok := clientStatus(cp, "switch")
		return ok && s.Implementation.Implementation == dataplane.CCore && s.Compatibility == dataplane.StateIncompatible
	})
	for _, impl := range []string{"grpc-go", "c-core"} {
		want := map[string]float64{"grpc-go": 0, "c-core": 1}[impl]
		var sum float64
		for _, state := range dataplane.States() {
			if m := counterOrZero(t, cp, "ringxds_xds_client_compatibility", map[string]string{"implementation": impl, "state": state}); m != nil {
				sum += testutil.ToFloat64(m)
			}
		}
		if sum != want {
			t.Errorf("ringxds_xds_client_compatibility counts %v %s streams, want %v", sum, impl, want)
		}
	}
}

// holdFlip connects a raw grpc-go-shaped client holding CDS and EDS of
// cluster "flip", acknowledged, and returns its stream.
func holdFlip(t *testing.T, cp *testcp.ControlPlane, id string) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := adsClient(t, cp.XDSAddr).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := &core.Node{Id: id, UserAgentName: "gRPC Go", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.85.0"}}
	sotwACK(t, st, n, resource.ClusterType, []string{"flip"})
	sotwACK(t, st, n, resource.EndpointType, []string{"flip"})
	return st
}

func flipFile(policy string, extra string) string {
	return fmt.Sprintf("clusters:\n  - name: flip\n    lb_policy: %s\n%s    endpoints:\n      - {address: 127.0.0.1, port: 1}\n      - {address: 127.0.0.1, port: 2}\n      - {address: 127.0.0.1, port: 3}\n", policy, extra)
}

func waitCompat(t *testing.T, cp *testcp.ControlPlane, id, state, what string) server.ClientStatus {
	t.Helper()
	var got server.ClientStatus
	testcp.WaitFor(t, 5*time.Second, what, func() bool {
		var ok bool
		got, ok = clientStatus(cp, id)
		return ok && got.Compatibility == state && len(got.Verdicts) > 0
	})
	return got
}

// When only Envoy's side of a cluster changes (ring_hash to Maglev: the
// gRPC translation stays the same), a client that acknowledges nothing is
// judged again anyway.
func TestVerdictFollowsEnvoyOnlyChanges(t *testing.T) {
	cp := testcp.Start(t, testcp.TempFile(t, flipFile("ring_hash", "")))
	holdFlip(t, cp, "flip")
	waitCompat(t, cp, "flip", dataplane.StateOK, "ok on ring_hash")
	testcp.WriteFile(t, cp.File, flipFile("maglev", ""))
	waitCompat(t, cp, "flip", dataplane.StateRingDiffers, "ring_differs once Envoy runs Maglev")
	testcp.WriteFile(t, cp.File, flipFile("ring_hash", ""))
	waitCompat(t, cp, "flip", dataplane.StateOK, "ok again on ring_hash")
}

// A client that rejected a CDS response stays incompatible until it
// accepts a CDS response, whatever EDS it accepts meanwhile; only the
// clusters its error names are marked; its error is kept short.
func TestNACKVerdictLastsUntilTheTypeIsAccepted(t *testing.T) {
	cp := testcp.Start(t, testcp.TempFile(t, flipFile("ring_hash", "")+"  - name: other\n    endpoints:\n      - {address: 127.0.0.2, port: 1}\n"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := adsClient(t, cp.XDSAddr).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := &core.Node{Id: "nack-eds", UserAgentName: "gRPC Go", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.85.0"}}
	names := []string{"flip", "other"}
	cds := sotwACK(t, st, n, resource.ClusterType, names)
	sotwACK(t, st, n, resource.EndpointType, names)
	waitCompat(t, cp, "nack-eds", dataplane.StateOK, "ok")

	// A ring size change of flip: CDS, then EDS (its CLA names the new
	// Cluster). The client rejects the CDS, naming flip, at length, and
	// accepts the EDS.
	testcp.WriteFile(t, cp.File, flipFile("ring_hash", "    minimum_ring_size: 2048\n    maximum_ring_size: 2048\n")+"  - name: other\n    endpoints:\n      - {address: 127.0.0.2, port: 1}\n")
	var newCDS, newEDS *discovery.DiscoveryResponse
	for newCDS == nil || newEDS == nil {
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		switch r.GetTypeUrl() {
		case resource.ClusterType:
			newCDS = r
		case resource.EndpointType:
			newEDS = r
		}
	}
	long := `resource "flip": ring size rejected; ` + strings.Repeat("x", 100000)
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNames: names, VersionInfo: cds.GetVersionInfo(),
		ResponseNonce: newCDS.GetNonce(), ErrorDetail: &status.Status{Code: 3, Message: long}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names, VersionInfo: newEDS.GetVersionInfo(), ResponseNonce: newEDS.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	got := waitCompat(t, cp, "nack-eds", dataplane.StateIncompatible, "incompatible after the CDS NACK")
	time.Sleep(300 * time.Millisecond) // the EDS ACK has been judged too
	got, _ = clientStatus(cp, "nack-eds")
	states := map[string]string{}
	for _, v := range got.Verdicts {
		states[v.Cluster] = v.State
		if len(v.Reason) > 1024 {
			t.Errorf("%s: a verdict reason of %d bytes", v.Cluster, len(v.Reason))
		}
	}
	if states["flip"] != dataplane.StateIncompatible || states["other"] != dataplane.StateOK {
		t.Fatalf("verdicts %v after a CDS NACK naming flip and an EDS ACK; want flip incompatible, other ok", states)
	}
	if m := got.Types["cds"].LastNack.Message; len(m) > 1024 {
		t.Errorf("the NACK message is kept at %d bytes", len(m))
	}
	for _, e := range cp.Logs.All() {
		if len(fmt.Sprint(e.ContextMap())) > 8192 {
			t.Fatalf("a log line of %d bytes: %s", len(fmt.Sprint(e.ContextMap())), e.Message)
		}
	}
	// Accepting the next Cluster clears it.
	testcp.WriteFile(t, cp.File, flipFile("ring_hash", "")+"  - name: other\n    endpoints:\n      - {address: 127.0.0.2, port: 1}\n")
	for {
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResourceNames: names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if r.GetTypeUrl() == resource.ClusterType {
			break
		}
	}
	waitCompat(t, cp, "nack-eds", dataplane.StateOK, "ok once a Cluster is accepted")
}

// A gRPC client whose node metadata asks for Envoy's translation gets no
// listeners and resolves nothing: that is reported, though it holds no
// cluster.
func TestGRPCClientServedEnvoyIsIncompatible(t *testing.T) {
	cp := testcp.Start(t, testcp.TempFile(t, flipFile("ring_hash", "")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := adsClient(t, cp.XDSAddr).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md := map[string]any{"ringxds.io/client": "envoy"}
	n := &core.Node{Id: "go-as-envoy", UserAgentName: "gRPC Go", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.85.0"}}
	n.Metadata, _ = structpb.NewStruct(md)
	if err := st.Send(&discovery.DiscoveryRequest{Node: n, TypeUrl: resource.ListenerType, ResourceNames: []string{"flip"}}); err != nil {
		t.Fatal(err)
	}
	got := waitCompat(t, cp, "go-as-envoy", dataplane.StateIncompatible, "the client reported")
	if !strings.Contains(got.Verdicts[0].Reason, "no listeners") {
		t.Fatalf("verdict %+v", got.Verdicts)
	}
}

// An explicit wildcard followed by a request naming nothing unsubscribes
// from everything, as go-control-plane reads it.
func TestExplicitWildcardThenNothingHoldsNothing(t *testing.T) {
	cp := testcp.Start(t, testcp.TempFile(t, flipFile("ring_hash", "")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := adsClient(t, cp.XDSAddr).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := &core.Node{Id: "star", UserAgentName: "gRPC Node Pure JS", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.14.1"}}
	resp := sotwACK(t, st, n, resource.ClusterType, []string{"*"})
	waitCompat(t, cp, "star", dataplane.StateOK, "judged on the wildcard")
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	testcp.WaitFor(t, 5*time.Second, "no clusters held", func() bool {
		s, ok := clientStatus(cp, "star")
		return ok && len(s.Verdicts) == 0 && !s.Types["cds"].Wildcard
	})
}
