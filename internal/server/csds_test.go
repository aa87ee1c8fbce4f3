package server

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admin "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/ringxds/ringxds/internal/authz"
	"github.com/ringxds/ringxds/internal/buildinfo"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/testpki"
)

// csdsFixture is a server on loopback with CSDS, as cmd/xds-server wires
// it, and a client connection to it.
type csdsFixture struct {
	s  *Server
	cc *grpc.ClientConn
}

var csdsReplica = buildinfo.Replica{Name: "xds-a", Build: buildinfo.Info{Version: "v1.2.3", Revision: "0123456789abcdef", GoVersion: "go1.26.8"}}

func startCSDS(t *testing.T, lim Limits) *csdsFixture {
	t.Helper()
	s := New(t.Context(), Options{Registerer: prometheus.NewRegistry(), Limits: &lim, Replica: csdsReplica})
	if err := s.Apply(authzState(t, nil)); err != nil {
		t.Fatal(err)
	}
	cc := dialLoopback(t, serveLoopback(t, s))
	return &csdsFixture{s: s, cc: cc}
}

// resourceState is what CSDS says of one resource, for comparisons.
type resourceState struct {
	config statusv3.ConfigStatus
	client admin.ClientResourceStatus
	// version is the response version that carried it; nack the client's
	// error_detail, for a rejected one.
	version, nack string
}

func (r resourceState) String() string {
	return fmt.Sprintf("%v/%v %q %q", r.config, r.client, r.version, r.nack)
}

// statesOf indexes one client's generic configs as "type name".
func statesOf(cc *statusv3.ClientConfig) map[string]resourceState {
	out := map[string]resourceState{}
	for _, g := range cc.GetGenericXdsConfigs() {
		out[shortType(g.GetTypeUrl())+" "+g.GetName()] = resourceState{g.GetConfigStatus(), g.GetClientStatus(), g.GetVersionInfo(), g.GetErrorState().GetDetails()}
	}
	return out
}

func configFor(resp *statusv3.ClientStatusResponse, node string) *statusv3.ClientConfig {
	for _, c := range resp.GetConfig() {
		if c.GetNode().GetId() == node {
			return c
		}
	}
	return nil
}

// waitCSDS fetches until want holds for node's resources, or fails after
// five seconds: ACKs reach the registry asynchronously.
func waitCSDS(t *testing.T, csc statusv3.ClientStatusDiscoveryServiceClient, node string, want map[string]resourceState) *statusv3.ClientConfig {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := csc.FetchClientStatus(t.Context(), &statusv3.ClientStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		cc := configFor(resp, node)
		got := statesOf(cc)
		same := len(got) == len(want)
		for k, w := range want {
			same = same && got[k] == w
		}
		if same {
			return cc
		}
		if time.Now().After(deadline) {
			t.Fatalf("CSDS for %s:\n got  %v\n want %v", node, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func kindNode(id, kind string) *core.Node {
	n := testNode(id)
	if kind != "" {
		n.UserAgentName = "grpc-go"
		n.UserAgentVersionType = &core.Node_UserAgentVersion{UserAgentVersion: "1.80.0"}
	}
	return n
}

// A raw SotW ADS client that accepts CDS and rejects EDS, and a delta one
// that leaves a response unanswered, as CSDS reports them resource by
// resource, with what each was sent.
func TestCSDSReportsEachResourceAckedOrRejected(t *testing.T) {
	f := startCSDS(t, DefaultLimits())
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ads := discovery.NewAggregatedDiscoveryServiceClient(f.cc)
	csc := statusv3.NewClientStatusDiscoveryServiceClient(f.cc)

	sotw, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(r *discovery.DiscoveryRequest) {
		t.Helper()
		if err := sotw.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	recv := func(typeURL string) *discovery.DiscoveryResponse {
		t.Helper()
		return recvType(t, sotw, typeURL)
	}
	send(&discovery.DiscoveryRequest{Node: testNode("envoy-1"), TypeUrl: resource.ClusterType})
	cds := recv(resource.ClusterType)
	send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: cds.GetVersionInfo(), ResponseNonce: cds.GetNonce()})
	edsNames := []string{"catalog", "missing", "products.shop"}
	send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: edsNames})
	eds := recv(resource.EndpointType)
	send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: edsNames, ResponseNonce: eds.GetNonce(),
		ErrorDetail: &status.Status{Code: int32(codes.InvalidArgument), Message: "endpoints rejected by test"}})

	acked := resourceState{statusv3.ConfigStatus_SYNCED, admin.ClientResourceStatus_ACKED, cds.GetVersionInfo(), ""}
	nacked := resourceState{statusv3.ConfigStatus_ERROR, admin.ClientResourceStatus_NACKED, eds.GetVersionInfo(), "endpoints rejected by test"}
	cc := waitCSDS(t, csc, "envoy-1", map[string]resourceState{
		"cds catalog": acked, "cds orders.billing": acked, "cds products.shop": acked,
		"eds catalog": nacked, "eds products.shop": nacked,
		"eds missing": {statusv3.ConfigStatus_NOT_SENT, admin.ClientResourceStatus_REQUESTED, "", ""},
	})
	// What it was sent: each resource's bytes, as the response carried them.
	sent := map[string][]byte{}
	for _, a := range append(cds.GetResources(), eds.GetResources()...) {
		sent[shortType(a.GetTypeUrl())+" "+resourceName(a)] = a.GetValue()
	}
	for _, g := range cc.GetGenericXdsConfigs() {
		k := shortType(g.GetTypeUrl()) + " " + g.GetName()
		if want, ok := sent[k]; ok != (g.GetXdsConfig() != nil) || !bytes.Equal(g.GetXdsConfig().GetValue(), want) || ok && g.GetXdsConfig().GetTypeUrl() != g.GetTypeUrl() {
			t.Errorf("%s: xds_config %v, want the %d bytes sent", k, g.GetXdsConfig() != nil, len(want))
		}
		if g.GetClientStatus() == admin.ClientResourceStatus_NACKED && g.GetErrorState().GetLastUpdateAttempt() == nil {
			t.Errorf("%s: NACKed without the time of the rejection", k)
		}
	}
	if n := cc.GetNode(); n.GetUserAgentName() != "envoy" || n.GetUserAgentVersion() != "1.37.0" {
		t.Errorf("node = %v, want the client's user agent", n)
	}

	// A change is pushed: the catalog CLA is STALE until answered, then
	// SYNCED; products.shop, not resent, stays rejected.
	next := authzState(t, func(st *model.State) {
		st.Clusters[0].Endpoints = append(st.Clusters[0].Endpoints, model.Endpoint{Address: "10.0.0.9", Port: 80})
	})
	if err := f.s.Apply(next); err != nil {
		t.Fatal(err)
	}
	eds2 := recv(resource.EndpointType)
	if names := responseNames(eds2); !slices.Equal(names, []string{"catalog"}) {
		t.Fatalf("pushed %v, want catalog alone", names)
	}
	stale := resourceState{statusv3.ConfigStatus_STALE, admin.ClientResourceStatus_REQUESTED, eds2.GetVersionInfo(), ""}
	want := map[string]resourceState{
		"cds catalog": acked, "cds orders.billing": acked, "cds products.shop": acked,
		"eds catalog": stale, "eds products.shop": nacked,
		"eds missing": {statusv3.ConfigStatus_NOT_SENT, admin.ClientResourceStatus_REQUESTED, "", ""},
	}
	waitCSDS(t, csc, "envoy-1", want)
	send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: edsNames, VersionInfo: eds2.GetVersionInfo(), ResponseNonce: eds2.GetNonce()})
	want["eds catalog"] = resourceState{statusv3.ConfigStatus_SYNCED, admin.ClientResourceStatus_ACKED, eds2.GetVersionInfo(), ""}
	waitCSDS(t, csc, "envoy-1", want)

	// Unsubscribing drops what the client no longer holds.
	send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{"catalog"}, VersionInfo: eds2.GetVersionInfo(), ResponseNonce: eds2.GetNonce()})
	delete(want, "eds products.shop")
	delete(want, "eds missing")
	waitCSDS(t, csc, "envoy-1", want)

	// A cluster removed: the full-state CDS response replaces what the
	// client holds.
	next.Clusters = slices.DeleteFunc(next.Clusters, func(c model.Cluster) bool { return c.Name == "orders.billing" })
	if err := f.s.Apply(next); err != nil {
		t.Fatal(err)
	}
	cds2 := recv(resource.ClusterType)
	send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: cds2.GetVersionInfo(), ResponseNonce: cds2.GetNonce()})
	acked.version = cds2.GetVersionInfo()
	want["cds catalog"], want["cds products.shop"] = acked, acked
	delete(want, "cds orders.billing")
	waitCSDS(t, csc, "envoy-1", want)
	if cs := f.s.Clients(); len(cs) != 1 || cs[0].Replica != csdsReplica {
		t.Errorf("/debug/clients does not name the replica: %+v", cs)
	}
}

// A delta client that accepts CDS and leaves an LDS response unanswered.
func TestCSDSDeltaClient(t *testing.T) {
	f := startCSDS(t, DefaultLimits())
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ads := discovery.NewAggregatedDiscoveryServiceClient(f.cc)
	csc := statusv3.NewClientStatusDiscoveryServiceClient(f.cc)
	delta, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := delta.Send(&discovery.DeltaDiscoveryRequest{Node: kindNode("grpc-1", "grpc"), TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"catalog"}}); err != nil {
		t.Fatal(err)
	}
	dcds, err := delta.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := delta.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: dcds.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	if err := delta.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ListenerType, ResourceNamesSubscribe: []string{"catalog"}}); err != nil {
		t.Fatal(err)
	}
	dlds, err := delta.Recv()
	if err != nil {
		t.Fatal(err)
	}
	waitCSDS(t, csc, "grpc-1", map[string]resourceState{
		"cds catalog": {statusv3.ConfigStatus_SYNCED, admin.ClientResourceStatus_ACKED, dcds.GetSystemVersionInfo(), ""},
		"lds catalog": {statusv3.ConfigStatus_STALE, admin.ClientResourceStatus_REQUESTED, dlds.GetSystemVersionInfo(), ""},
	})
}

// The stream answers every request; node_matchers pick clients by node ID;
// exclude_resource_contents leaves contents out; the replica and its build
// come in the headers; unsupported matchers are refused by name.
func TestCSDSStreamAndNodeMatchers(t *testing.T) {
	f := startCSDS(t, DefaultLimits())
	ads := discovery.NewAggregatedDiscoveryServiceClient(f.cc)
	for _, id := range []string{"envoy-a", "envoy-b", "sidecar-c"} {
		st, err := ads.StreamAggregatedResources(streamCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&discovery.DiscoveryRequest{Node: testNode(id), TypeUrl: resource.ClusterType}); err != nil {
			t.Fatal(err)
		}
		recvType(t, st, resource.ClusterType)
	}
	csc := statusv3.NewClientStatusDiscoveryServiceClient(f.cc)
	stream, err := csc.StreamClientStatus(streamCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	ask := func(req *statusv3.ClientStatusRequest) *statusv3.ClientStatusResponse {
		t.Helper()
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	nodes := func(resp *statusv3.ClientStatusResponse) []string {
		var out []string
		for _, c := range resp.GetConfig() {
			out = append(out, c.GetNode().GetId())
		}
		return out
	}
	byID := func(m *matcher.StringMatcher) *statusv3.ClientStatusRequest {
		return &statusv3.ClientStatusRequest{NodeMatchers: []*matcher.NodeMatcher{{NodeId: m}}}
	}
	for _, tc := range []struct {
		req  *statusv3.ClientStatusRequest
		want []string
	}{
		{&statusv3.ClientStatusRequest{}, []string{"envoy-a", "envoy-b", "sidecar-c"}},
		{byID(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "envoy-b"}}), []string{"envoy-b"}},
		{byID(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "ENVOY-"}, IgnoreCase: true}), []string{"envoy-a", "envoy-b"}},
		{byID(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: "s.*-c"}}}), []string{"sidecar-c"}},
		{byID(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: "envoy"}}}), nil},
		{&statusv3.ClientStatusRequest{NodeMatchers: []*matcher.NodeMatcher{
			{NodeId: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Suffix{Suffix: "-a"}}},
			{NodeId: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Contains{Contains: "car"}}},
		}}, []string{"envoy-a", "sidecar-c"}},
	} {
		if got := nodes(waitNodes(t, ask, tc.req, len(tc.want))); !slices.Equal(got, tc.want) {
			t.Errorf("%v: nodes %v, want %v", tc.req, got, tc.want)
		}
	}
	resp := ask(&statusv3.ClientStatusRequest{ExcludeResourceContents: true})
	for _, c := range resp.GetConfig() {
		for _, g := range c.GetGenericXdsConfigs() {
			if g.GetXdsConfig() != nil {
				t.Fatalf("%s %s carries contents despite exclude_resource_contents", c.GetNode().GetId(), g.GetName())
			}
		}
	}
	md, err := stream.Header()
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{CSDSReplicaHeader: "xds-a", CSDSVersionHeader: "v1.2.3", CSDSRevisionHeader: "0123456789ab", CSDSGoVersionHeader: "go1.26.8"} {
		if got := md.Get(k); len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %v, want %s", k, got, want)
		}
	}
	var header metadata.MD
	if _, err := csc.FetchClientStatus(t.Context(), &statusv3.ClientStatusRequest{}, grpc.Header(&header)); err != nil || len(header.Get(CSDSReplicaHeader)) != 1 {
		t.Errorf("FetchClientStatus: %v, headers %v", err, header)
	}

	for _, tc := range []struct {
		req  *statusv3.ClientStatusRequest
		want string
	}{
		{&statusv3.ClientStatusRequest{NodeMatchers: []*matcher.NodeMatcher{{NodeMetadatas: []*matcher.StructMatcher{{}}}}}, "node_matchers[0].node_metadatas is not supported"},
		{byID(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Custom{}}), "node_matchers[0].node_id.custom is not supported"},
		{byID(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: "("}}}), "node_matchers[0].node_id.safe_regex"},
		{byID(&matcher.StringMatcher{}), "no match pattern"},
	} {
		_, err := csc.FetchClientStatus(t.Context(), tc.req)
		if s := grpcstatus.Convert(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), tc.want) {
			t.Errorf("%v: %v, want InvalidArgument naming %q", tc.req, err, tc.want)
		}
	}
}

// waitNodes asks until the answer lists n clients: the ADS streams are
// identified once their first request is processed.
func waitNodes(t *testing.T, ask func(*statusv3.ClientStatusRequest) *statusv3.ClientStatusResponse, req *statusv3.ClientStatusRequest, n int) *statusv3.ClientStatusResponse {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp := ask(req)
		if len(resp.GetConfig()) >= n || time.Now().After(deadline) {
			return resp
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Under --authz=namespace CSDS lists every tenant's clients, so only a
// cluster-wide reader reads it: another tenant is refused, on the unary
// call and the stream alike.
func TestCSDSAuthorization(t *testing.T) {
	pki := testpki.New(t)
	policy, err := authz.NewPolicy([]string{"spiffe://test/ns/ops/sa/admin"})
	if err != nil {
		t.Fatal(err)
	}
	f := startAuthz(t, pki, policy)
	tenant := pki.Issue(t, x509.ExtKeyUsageClientAuth, "spiffe://test/ns/shop/sa/web")
	sotwNames(t, f.dial(t, &tenant))

	reader := pki.Issue(t, x509.ExtKeyUsageClientAuth, "spiffe://test/ns/ops/sa/admin")
	csc := statusv3.NewClientStatusDiscoveryServiceClient(f.conn(t, &reader))
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := csc.FetchClientStatus(t.Context(), &statusv3.ClientStatusRequest{})
		if err != nil {
			t.Fatalf("cluster reader refused: %v", err)
		}
		if len(resp.GetConfig()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster reader sees %d clients, want 1", len(resp.GetConfig()))
		}
		time.Sleep(20 * time.Millisecond)
	}

	refused := statusv3.NewClientStatusDiscoveryServiceClient(f.conn(t, &tenant))
	_, err = refused.FetchClientStatus(t.Context(), &statusv3.ClientStatusRequest{})
	if s := grpcstatus.Convert(err); s.Code() != codes.PermissionDenied || !strings.Contains(s.Message(), "--authz-cluster-readers") || !strings.Contains(s.Message(), "spiffe://test/ns/shop/sa/web") {
		t.Errorf("tenant's FetchClientStatus: %v, want PermissionDenied naming the flag and the caller", err)
	}
	st, err := refused.StreamClientStatus(streamCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&statusv3.ClientStatusRequest{})
	if _, err := st.Recv(); grpcstatus.Code(err) != codes.PermissionDenied {
		t.Errorf("tenant's StreamClientStatus: %v, want PermissionDenied", err)
	}
}

// CSDS is held to the xDS port's limits: the request rate per stream (and
// per connection for the unary call) and the streams per connection.
func TestCSDSLimits(t *testing.T) {
	lim := noLimits()
	lim.RequestsPerSecond, lim.RequestBurst = 1, 3
	ls := startLimited(t, lim)
	csc := statusv3.NewClientStatusDiscoveryServiceClient(ls.dial(t))
	var err error
	for i := 0; i < 10 && err == nil; i++ {
		_, err = csc.FetchClientStatus(t.Context(), &statusv3.ClientStatusRequest{})
	}
	if s := grpcstatus.Convert(err); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "--max-requests-per-second") {
		t.Errorf("unary flood: %v, want ResourceExhausted naming --max-requests-per-second", err)
	}
	st, err := statusv3.NewClientStatusDiscoveryServiceClient(ls.dial(t)).StreamClientStatus(streamCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if st.Send(&statusv3.ClientStatusRequest{}) != nil {
			break
		}
	}
	for err = nil; err == nil; _, err = st.Recv() {
	}
	if s := grpcstatus.Convert(err); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "--max-requests-per-second") {
		t.Errorf("stream flood: %v, want ResourceExhausted naming --max-requests-per-second", err)
	}

	lim = noLimits()
	lim.StreamsPerConnection = 1
	ls = startLimited(t, lim)
	cc := ls.dial(t)
	recvType(t, adsStream(t, cc, "envoy", resource.ClusterType), resource.ClusterType)
	st, err = statusv3.NewClientStatusDiscoveryServiceClient(cc).StreamClientStatus(streamCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&statusv3.ClientStatusRequest{})
	if _, err := st.Recv(); grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams-per-connection") {
		t.Errorf("a CSDS stream over the streams limit: %v, want ResourceExhausted naming --max-streams-per-connection", err)
	}
}

// A safe_regex that would close the full-match wrapper's group is refused,
// as RE2 (and so Envoy) refuses it, instead of matching substrings.
func TestCSDSRegexCannotEscapeTheFullMatch(t *testing.T) {
	for expr, want := range map[string]bool{"a)|(b": false, "envoy-.*": true, "(x": false} {
		m, err := compileStringMatcher(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{
			SafeRegex: &matcher.RegexMatcher{Regex: expr}}}, "node_id")
		if (err == nil) != want {
			t.Errorf("%q: error %v, want accepted = %v", expr, err, want)
		}
		if err == nil && m("xx-envoy-1") {
			t.Errorf("%q matched a substring", expr)
		}
	}
}
