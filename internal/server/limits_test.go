package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringxds/ringxds/internal/model"
)

// limitsServer serves two clusters on loopback with the given limits, as
// cmd/xds-server wires them.
type limitsServer struct {
	s    *Server
	reg  *prometheus.Registry
	addr string
}

func startLimited(t testing.TB, lim Limits) *limitsServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	reg := prometheus.NewRegistry()
	s := New(ctx, Options{Registerer: reg, Limits: &lim})
	st := model.State{}
	for _, name := range []string{"products", "orders"} {
		st.Clusters = append(st.Clusters, model.Cluster{Name: name,
			Endpoints: []model.Endpoint{{Address: "10.0.0.1", Port: 8080}, {Address: "10.0.0.2", Port: 8080}}})
	}
	if err := st.Normalize(); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return &limitsServer{s: s, reg: reg, addr: serveLoopback(t, s)}
}

func (ls *limitsServer) dial(t testing.TB) *grpc.ClientConn {
	t.Helper()
	return dialLoopback(t, ls.addr, grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
}

func (ls *limitsServer) hits(limit string) float64 {
	return testutil.ToFloat64(ls.s.metrics.limitHits.WithLabelValues(limit))
}

func testNode(id string) *core.Node {
	return &core.Node{Id: id, UserAgentName: "envoy", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.37.0"}}
}

// adsStream opens a SotW ADS stream and subscribes it to names of typeURL.
func adsStream(t testing.TB, cc *grpc.ClientConn, id, typeURL string, names ...string) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// io.EOF means the server already ended the stream (a refusal can
	// beat the first request); as gRPC documents, Recv then gives the
	// status, which the caller checks.
	if err := st.Send(&discovery.DiscoveryRequest{Node: testNode(id), TypeUrl: typeURL, ResourceNames: names}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return st
}

// wantRefused reads st until it ends and checks the status names flag.
func wantRefused(t testing.TB, st interface {
	Recv() (*discovery.DiscoveryResponse, error)
}, code codes.Code, flag string) {
	t.Helper()
	for range 100 {
		_, err := st.Recv()
		if err == nil {
			continue
		}
		s := status.Convert(err)
		if s.Code() != code || !strings.Contains(s.Message(), flag) {
			t.Fatalf("stream ended with %v %q, want %v naming %s", s.Code(), s.Message(), code, flag)
		}
		return
	}
	t.Fatalf("stream not refused (want %v naming %s)", code, flag)
}

// wantServed checks st still gets a response to a fresh subscription.
func wantServed(t testing.TB, st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, typeURL string, names ...string) {
	t.Helper()
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names}); err != nil {
		t.Fatalf("send: %v", err)
	}
	for range 10 {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("a stream within the limits failed: %v", err)
		}
		if resp.GetTypeUrl() == typeURL {
			return
		}
	}
	t.Fatal("no response")
}

func recvType(t testing.TB, st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, typeURL string) *discovery.DiscoveryResponse {
	t.Helper()
	for range 10 {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if resp.GetTypeUrl() == typeURL {
			return resp
		}
	}
	t.Fatal("no response of the type")
	return nil
}

// hitOnClients finds limit among the limit hits /debug/clients shows.
func hitOnClients(s *Server, limit string) bool {
	for _, c := range s.Clients() {
		for _, h := range c.LimitHits {
			if h.Limit == limit && h.Count > 0 {
				return true
			}
		}
	}
	return false
}

func noLimits() Limits { return Limits{} }

func TestStreamsPerConnectionLimit(t *testing.T) {
	lim := noLimits()
	lim.StreamsPerConnection = 5
	ls := startLimited(t, lim)
	cc := ls.dial(t)
	var open []discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	for i := range 5 {
		st := adsStream(t, cc, fmt.Sprint("n", i), resource.ClusterType)
		recvType(t, st, resource.ClusterType)
		open = append(open, st)
	}
	wantRefused(t, adsStream(t, cc, "n5", resource.ClusterType), codes.ResourceExhausted, "--max-streams-per-connection")
	for _, st := range open {
		wantServed(t, st, resource.EndpointType, "products")
	}
	other := adsStream(t, ls.dial(t), "other", resource.ClusterType)
	recvType(t, other, resource.ClusterType)
	if ls.hits(LimitStreamsPerConnection) != 1 {
		t.Errorf("limit hits = %v, want 1", ls.hits(LimitStreamsPerConnection))
	}
	if !hitOnClients(ls.s, LimitStreamsPerConnection) {
		t.Error("/debug/clients does not show the refused stream on its connection")
	}
	// Closing a stream frees its place.
	_ = open[0].CloseSend()
	for _, err := open[0].Recv(); err == nil; _, err = open[0].Recv() {
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := adsStream(t, cc, "again", resource.ClusterType)
		if _, err := st.Recv(); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no stream accepted after one closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%06d", prefix, i)
	}
	return out
}

func TestNamesPerStreamLimit(t *testing.T) {
	lim := noLimits()
	lim.NamesPerStream = 100
	ls := startLimited(t, lim)
	cc := ls.dial(t)
	good := adsStream(t, cc, "good", resource.EndpointType, "products")
	recvType(t, good, resource.EndpointType)

	// SotW: one request naming too many.
	wantRefused(t, adsStream(t, cc, "sotw", resource.EndpointType, names("made-up", 101)...), codes.ResourceExhausted, "--max-names-per-stream")

	// Delta: names added a few at a time, and over all types.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Send(&discovery.DeltaDiscoveryRequest{Node: testNode("delta"), TypeUrl: resource.ClusterType, ResourceNamesSubscribe: names("c", 60)}); err != nil {
		t.Fatal(err)
	}
	var derr error
	for i := 0; i < 20 && derr == nil; i++ {
		derr = d.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: names(fmt.Sprint("e", i), 5)})
	}
	if errors.Is(derr, io.EOF) {
		derr = nil // the server ended the stream already: Recv gives its status
	}
	for derr == nil {
		_, derr = d.Recv()
	}
	if s := status.Convert(derr); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "--max-names-per-stream") {
		t.Fatalf("delta stream ended with %v", derr)
	}
	wantServed(t, good, resource.ClusterType)
	if ls.hits(LimitNamesPerStream) != 2 {
		t.Errorf("limit hits = %v, want 2", ls.hits(LimitNamesPerStream))
	}
	if !hitOnClients(ls.s, LimitNamesPerStream) {
		t.Error("/debug/clients does not show the hit")
	}
}

func TestNamesPerConnectionLimit(t *testing.T) {
	lim := noLimits()
	lim.NamesPerConnection = 150
	ls := startLimited(t, lim)
	cc := ls.dial(t)
	a := adsStream(t, cc, "a", resource.EndpointType, append(names("a", 99), "products")...)
	recvType(t, a, resource.EndpointType)
	wantRefused(t, adsStream(t, cc, "b", resource.EndpointType, names("b", 60)...), codes.ResourceExhausted, "--max-names-per-connection")
	wantServed(t, a, resource.ClusterType)
	// Another connection has its own budget.
	other := adsStream(t, ls.dial(t), "c", resource.EndpointType, names("c", 120)...)
	wantServed(t, other, resource.ClusterType)
	// The refused stream's names no longer count.
	waitFor(t, "the refused stream's names to be released", func() bool {
		for _, c := range ls.s.Clients() {
			if c.NodeID == "a" {
				return c.Names == 100 && c.ConnectionNames == 100
			}
		}
		return false
	}, func() string { return fmt.Sprintf("%+v", ls.s.Clients()) })
}

func waitFor(t testing.TB, what string, ok func() bool, state func() string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, state())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRequestRateLimit(t *testing.T) {
	lim := noLimits()
	lim.RequestsPerSecond, lim.RequestBurst = 5, 10
	ls := startLimited(t, lim)
	cc := ls.dial(t)
	good := adsStream(t, cc, "good", resource.ClusterType)
	recvType(t, good, resource.ClusterType)
	bad := adsStream(t, cc, "bad", resource.ClusterType)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		err = bad.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{fmt.Sprint("n", i)}})
	}
	wantRefused(t, bad, codes.ResourceExhausted, "--max-requests-per-second")
	wantServed(t, good, resource.EndpointType, "products")
	if !hitOnClients(ls.s, LimitRequestRate) || ls.hits(LimitRequestRate) != 1 {
		t.Errorf("hit not shown: metric %v", ls.hits(LimitRequestRate))
	}
}

func TestMessageSizeLimit(t *testing.T) {
	lim := noLimits()
	lim.MaxMessageBytes = 64 << 10
	ls := startLimited(t, lim)
	cc := ls.dial(t)
	good := adsStream(t, cc, "good", resource.ClusterType)
	recvType(t, good, resource.ClusterType)
	wantRefused(t, adsStream(t, cc, strings.Repeat("x", 100<<10), resource.ClusterType), codes.ResourceExhausted, "--max-message-bytes")
	wantServed(t, good, resource.EndpointType, "products")
	if !hitOnClients(ls.s, LimitMessageSize) || ls.hits(LimitMessageSize) != 1 {
		t.Errorf("hit not shown: metric %v", ls.hits(LimitMessageSize))
	}
}

func TestConnectionRateLimit(t *testing.T) {
	lim := noLimits()
	// Two at once, then one every 2 s: a third waits longer than the
	// second a new connection may wait, and is refused.
	lim.ConnectionsPerSecond, lim.ConnectionBurst = 0.5, 2
	ls := startLimited(t, lim)
	var served []discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	for i := range 2 {
		st := adsStream(t, ls.dial(t), fmt.Sprint("n", i), resource.ClusterType)
		recvType(t, st, resource.ClusterType)
		served = append(served, st)
	}
	wantRefused(t, adsStream(t, ls.dial(t), "flood", resource.ClusterType), codes.ResourceExhausted, "--max-new-connections-per-second")
	for _, st := range served {
		wantServed(t, st, resource.EndpointType, "products")
	}
	if ls.hits(LimitConnectionRate) < 1 {
		t.Errorf("limit hits = %v", ls.hits(LimitConnectionRate))
	}
}

// A type URL that is no xDS type ends the stream and leaves no label; a
// known type ringxds does not serve is held, and recorded nowhere.
func TestUnservedTypeURLs(t *testing.T) {
	ls := startLimited(t, noLimits())
	cc := ls.dial(t)
	held := adsStream(t, cc, "envoy", resource.SecretType, "cert")
	wantServed(t, held, resource.ClusterType)
	for _, c := range ls.s.Clients() {
		if c.NodeID == "envoy" && len(c.Types) != 1 {
			t.Errorf("types recorded: %v, want cds only", c.Types)
		}
	}
	made := "type.googleapis.com/made.up." + strings.Repeat("x", 10000)
	wantRefused(t, adsStream(t, cc, "hostile", made), codes.InvalidArgument, "not an xDS resource type")
	mfs, err := ls.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "made") || len(l.GetValue()) > 64 {
					t.Errorf("%s has a label from a client: %q", mf.GetName(), truncate(l.GetValue(), 80))
				}
			}
		}
	}
	if ls.hits(LimitUnknownType) != 1 {
		t.Errorf("unknown type hits = %v", ls.hits(LimitUnknownType))
	}
}

// A nonce sent with another type is no answer to this one.
func TestNonceOfAnotherTypeIsNotCounted(t *testing.T) {
	ls := startLimited(t, noLimits())
	st := adsStream(t, ls.dial(t), "n", resource.ClusterType)
	cds := recvType(t, st, resource.ClusterType)
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{"products"},
		VersionInfo: cds.GetVersionInfo(), ResponseNonce: cds.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	recvType(t, st, resource.EndpointType)
	if n := testutil.ToFloat64(ls.s.metrics.acks.WithLabelValues("envoy", "eds")); n != 0 {
		t.Errorf("EDS ACKs = %v for a CDS nonce, want 0", n)
	}
	for _, c := range ls.s.Clients() {
		if eds := c.Types["eds"]; eds == nil || eds.AckedNonce != "" {
			t.Errorf("EDS status %+v, want no ACK", eds)
		}
	}
}

func TestNodeStringsAreTruncated(t *testing.T) {
	ls := startLimited(t, noLimits())
	st := adsStream(t, ls.dial(t), strings.Repeat("n", 100000), resource.ClusterType)
	recvType(t, st, resource.ClusterType)
	for _, c := range ls.s.Clients() {
		if len(c.NodeID) > maxNodeBytes+20 {
			t.Errorf("node ID of %d bytes kept", len(c.NodeID))
		}
	}
}

// A name is at most 1 KiB, and a delta client's initial_resource_versions
// count as names: go-control-plane keeps both for the stream's life.
func TestNameLengthAndInitialVersionsAreBounded(t *testing.T) {
	lim := noLimits()
	lim.NamesPerStream = 100
	ls := startLimited(t, lim)
	cc := ls.dial(t)
	wantRefused(t, adsStream(t, cc, "long", resource.EndpointType, strings.Repeat("x", 2000)), codes.ResourceExhausted, "1024")
	if ls.hits(LimitNameLength) != 1 {
		t.Errorf("name length hits = %v", ls.hits(LimitNameLength))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	initial := map[string]string{}
	for _, n := range names("held", 101) {
		initial[n] = "v1"
	}
	if err := d.Send(&discovery.DeltaDiscoveryRequest{Node: testNode("delta"), TypeUrl: resource.ClusterType, InitialResourceVersions: initial}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err = d.Recv(); err != nil {
			break
		}
	}
	if s := status.Convert(err); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "--max-names-per-stream") {
		t.Fatalf("delta stream ended with %v", err)
	}
}

// The node go-control-plane keeps per stream is cut to what is read.
func TestNodeIsSlimmed(t *testing.T) {
	n := testNode(strings.Repeat("i", 5000))
	n.Extensions = make([]*core.Extension, 500)
	for i := range n.Extensions {
		n.Extensions[i] = &core.Extension{Name: fmt.Sprint("envoy.filters.http.ext", i), Category: "envoy.filters.http"}
	}
	n.ClientFeatures = []string{"envoy.lb.does_not_support_overprovisioning"}
	slimNode(n)
	if len(n.GetExtensions()) != 0 || len(n.GetClientFeatures()) != 0 || len(n.GetId()) > maxNodeBytes+20 {
		t.Errorf("node kept %d extensions, %d features, an ID of %d bytes", len(n.GetExtensions()), len(n.GetClientFeatures()), len(n.GetId()))
	}
	if n.GetUserAgentName() != "envoy" || n.GetUserAgentVersion() != "1.37.0" {
		t.Errorf("identity lost: %v", n)
	}
}

// A client whose only stream was refused leaves no stream behind to list,
// so the refusal itself is remembered for /debug/clients: by connection,
// with its peer and limit, and for at most maxRefusedRecords connections
// however many are refused.
func TestRefusedConnectionsAreListedAndBounded(t *testing.T) {
	lim := noLimits()
	lim.StreamsPerConnection = 1
	ls := startLimited(t, lim)
	cc := ls.dial(t)
	st := adsStream(t, cc, "holder", resource.ClusterType)
	recvType(t, st, resource.ClusterType)
	wantRefused(t, adsStream(t, cc, "second", resource.ClusterType), codes.ResourceExhausted, "--max-streams-per-connection")
	refused := ls.s.RefusedConnections()
	if len(refused) != 1 || len(refused[0].LimitHits) != 1 || refused[0].LimitHits[0].Limit != LimitStreamsPerConnection ||
		!strings.HasPrefix(refused[0].Peer, "127.0.0.1:") {
		t.Fatalf("refused connections %+v, want the one over %s with its peer", refused, LimitStreamsPerConnection)
	}

	lim = noLimits()
	lim.MaxMessageBytes = 1024
	ls = startLimited(t, lim)
	for range maxRefusedRecords + 6 {
		big := adsStream(t, ls.dial(t), strings.Repeat("n", 1500), resource.ClusterType)
		wantRefused(t, big, codes.ResourceExhausted, "--max-message-bytes")
	}
	refused = ls.s.RefusedConnections()
	if len(refused) != maxRefusedRecords {
		t.Fatalf("%d refused connections remembered, want the last %d", len(refused), maxRefusedRecords)
	}
	if refused[0].Connection <= refused[1].Connection {
		t.Errorf("not the most recent first: %d then %d", refused[0].Connection, refused[1].Connection)
	}
}
