package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringxds/ringxds/internal/authz"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/testpki"
)

// authzState has a cluster of namespace shop, one of billing that lists
// the web namespace as a reader, and one named without a namespace (as
// the file source names them).
func authzState(t *testing.T, edit func(*model.State)) model.State {
	t.Helper()
	st := model.State{Clusters: []model.Cluster{
		{Name: "catalog", Endpoints: []model.Endpoint{{Address: "10.0.0.1", Port: 80}}},
		{Name: "orders.billing", Readers: []string{"web"}, Endpoints: []model.Endpoint{{Address: "10.0.0.2", Port: 80}}},
		{Name: "products.shop", Endpoints: []model.Endpoint{{Address: "10.0.0.3", Port: 80}}},
	}}
	if edit != nil {
		edit(&st)
	}
	if err := st.Normalize(); err != nil {
		t.Fatal(err)
	}
	return st
}

type authzFixture struct {
	s    *Server
	addr string
	logs *observer.ObservedLogs
	pki  *testpki.CA
}

// startAuthz serves the state over gRPC on loopback: mTLS when pki is
// set, plaintext otherwise; policy nil leaves authorization off.
func startAuthz(t *testing.T, pki *testpki.CA, policy *authz.Policy) *authzFixture {
	t.Helper()
	core, logs := observer.New(zapcore.WarnLevel)
	s := New(t.Context(), Options{Logger: zap.New(core), Registerer: prometheus.NewRegistry(), Authz: policy})
	if err := s.Apply(authzState(t, nil)); err != nil {
		t.Fatal(err)
	}
	opts := GRPCOptions{ServerOptions: s.GRPCServerOptions()}
	if pki != nil {
		opts.TLS = &tls.Config{Certificates: []tls.Certificate{pki.Issue(t, x509.ExtKeyUsageServerAuth, "")},
			ClientCAs: pki.Pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	}
	g, err := NewGRPCServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(s.Listen(lis)) }()
	t.Cleanup(g.Stop)
	return &authzFixture{s: s, addr: lis.Addr().String(), logs: logs, pki: pki}
}

// dial connects as the holder of client, or in plaintext when nil.
func (f *authzFixture) dial(t *testing.T, client *tls.Certificate) discovery.AggregatedDiscoveryServiceClient {
	t.Helper()
	return discovery.NewAggregatedDiscoveryServiceClient(f.conn(t, client))
}

// conn is dial's connection.
func (f *authzFixture) conn(t *testing.T, client *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if client != nil {
		creds = credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{*client}, RootCAs: f.pki.Pool, MinVersion: tls.VersionTLS12})
	}
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

var envoyNode = &core.Node{Id: "authz-test", UserAgentName: "envoy"}

func streamCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sotwNames opens a SotW ADS stream asking CDS for names (wildcard when
// none) and returns the stream and the names of its first response.
func sotwNames(t *testing.T, c discovery.AggregatedDiscoveryServiceClient, names ...string) (discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, []string, *discovery.DiscoveryResponse) {
	t.Helper()
	st, err := c.StreamAggregatedResources(streamCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return st, responseNames(resp), resp
}

func responseNames(resp *discovery.DiscoveryResponse) []string {
	var out []string
	for _, r := range resp.GetResources() {
		out = append(out, resourceName(r))
	}
	slices.Sort(out)
	return out
}

// deltaNames opens a delta ADS stream subscribing CDS to names ("*" for
// wildcard), claiming to hold initial, and returns the first response.
func deltaNames(t *testing.T, c discovery.AggregatedDiscoveryServiceClient, initial map[string]string, names ...string) (names2 []string, removed []string) {
	t.Helper()
	st, err := c.DeltaAggregatedResources(streamCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType,
		ResourceNamesSubscribe: names, InitialResourceVersions: initial}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.GetResources() {
		names2 = append(names2, r.GetName())
	}
	slices.Sort(names2)
	removed = slices.Sorted(slices.Values(resp.GetRemovedResources()))
	return names2, removed
}

func TestAuthorizedReaders(t *testing.T) {
	pki := testpki.New(t)
	policy, err := authz.NewPolicy([]string{"spiffe://td/ns/ops/sa/dashboard"})
	if err != nil {
		t.Fatal(err)
	}
	f := startAuthz(t, pki, policy)
	shop := pki.Issue(t, x509.ExtKeyUsageClientAuth, "spiffe://td/ns/shop/sa/cart")
	web := pki.Issue(t, x509.ExtKeyUsageClientAuth, "", "front.web.svc.cluster.local")
	dashboard := pki.Issue(t, x509.ExtKeyUsageClientAuth, "spiffe://td/ns/ops/sa/dashboard")
	nobody := pki.Issue(t, x509.ExtKeyUsageClientAuth, "") // a certificate that names no one

	all := []string{"catalog", "orders.billing", "products.shop"}
	for _, tc := range []struct {
		who  string
		cert tls.Certificate
		want []string
	}{
		{"own namespace (SPIFFE ID)", shop, []string{"products.shop"}},
		{"listed reader (DNS SAN)", web, []string{"orders.billing"}},
		{"cluster-wide reader", dashboard, all},
		{"certificate without identity", nobody, nil},
	} {
		t.Run(tc.who, func(t *testing.T) {
			c := f.dial(t, &tc.cert)
			if _, got, _ := sotwNames(t, c); !slices.Equal(got, tc.want) {
				t.Errorf("SotW wildcard: got %q, want %q", got, tc.want)
			}
			if _, got, _ := sotwNames(t, c, all...); !slices.Equal(got, tc.want) {
				t.Errorf("SotW named: got %q, want %q", got, tc.want)
			}
			if got, _ := deltaNames(t, c, nil, "*"); !slices.Equal(got, tc.want) {
				t.Errorf("delta wildcard: got %q, want %q", got, tc.want)
			}
			if got, _ := deltaNames(t, c, nil, all...); !slices.Equal(got, tc.want) {
				t.Errorf("delta named: got %q, want %q", got, tc.want)
			}
			// /debug/clients shows each stream's refusals.
			leaf, _ := x509.ParseCertificate(tc.cert.Certificate[0])
			id := authz.FromCertificate(leaf)
			for _, st := range f.s.Clients() {
				if (st.Identity == nil) != id.Anonymous() || st.Identity != nil && st.Identity.String() != id.String() {
					continue // a stream of an earlier case, closing
				}
				if want := len(all) - len(tc.want); st.RefusedCount != want {
					t.Errorf("%s stream %d: %d refusals shown (%v), want %d", st.Protocol, st.StreamID, st.RefusedCount, st.Refused, want)
				}
			}
		})
	}

	// Refusals are counted once per stream and name, logged, and shown.
	if n := testutil.ToFloat64(f.s.metrics.authzRefused.WithLabelValues("cds", authz.RefusedNotReader)); n == 0 {
		t.Error("no refusal counted")
	}
	if n := testutil.ToFloat64(f.s.metrics.authzRefused.WithLabelValues("cds", authz.RefusedAnonymous)); n == 0 {
		t.Error("no anonymous refusal counted")
	}
	if f.logs.FilterMessageSnippet("not authorized").FilterField(zap.String("identity", "spiffe://td/ns/shop/sa/cart")).Len() == 0 {
		t.Error("the refusals of the shop client were not logged")
	}
}

// A change to a refused cluster reaches a wildcard stream as a response
// without it; a change of readers reaches it at once.
func TestAuthorizationFollowsChanges(t *testing.T) {
	pki := testpki.New(t)
	policy, _ := authz.NewPolicy(nil)
	f := startAuthz(t, pki, policy)
	shop := pki.Issue(t, x509.ExtKeyUsageClientAuth, "spiffe://td/ns/shop/sa/cart")
	st, got, resp := sotwNames(t, f.dial(t, &shop))
	if !slices.Equal(got, []string{"products.shop"}) {
		t.Fatalf("got %q", got)
	}
	ack := func(resp *discovery.DiscoveryResponse) {
		t.Helper()
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	ack(resp)
	// orders.billing changes: the push does not carry it to shop.
	if err := f.s.Apply(authzState(t, func(s *model.State) { s.Clusters[1].Policy = model.PolicyMaglev })); err != nil {
		t.Fatal(err)
	}
	// shop is made a reader of orders.billing: it arrives.
	if err := f.s.Apply(authzState(t, func(s *model.State) {
		s.Clusters[1].Policy = model.PolicyMaglev
		s.Clusters[1].Readers = []string{"web", "shop"}
	})); err != nil {
		t.Fatal(err)
	}
	for range 5 { // bounded: at most one response per Apply is expected
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got := responseNames(resp)
		if slices.Equal(got, []string{"orders.billing", "products.shop"}) {
			break
		}
		if !slices.Equal(got, []string{"products.shop"}) {
			t.Fatalf("a push sent %q", got)
		}
		ack(resp)
	}

	// A delta client reconnecting with a cluster it may no longer read
	// is told to remove it.
	names, removed := deltaNames(t, f.dial(t, &shop), map[string]string{"catalog": "v1", "products.shop": "v1"}, "*")
	if !slices.Equal(names, []string{"orders.billing", "products.shop"}) || !slices.Equal(removed, []string{"catalog"}) {
		t.Errorf("delta reconnect: got %q, removed %q; want orders.billing and products.shop, catalog removed", names, removed)
	}
}

// Without a policy, a plaintext client reads everything, as before; with
// one, a client without a certificate reads nothing.
func TestAnonymousClients(t *testing.T) {
	all := []string{"catalog", "orders.billing", "products.shop"}
	off := startAuthz(t, nil, nil)
	c := off.dial(t, nil)
	if _, got, _ := sotwNames(t, c); !slices.Equal(got, all) {
		t.Errorf("authz off, SotW: got %q, want %q", got, all)
	}
	if got, _ := deltaNames(t, c, nil, "*"); !slices.Equal(got, all) {
		t.Errorf("authz off, delta: got %q, want %q", got, all)
	}
	policy, _ := authz.NewPolicy(nil)
	on := startAuthz(t, nil, policy)
	c = on.dial(t, nil)
	if _, got, _ := sotwNames(t, c); len(got) != 0 {
		t.Errorf("authz on, anonymous SotW: got %q", got)
	}
	if got, _ := deltaNames(t, c, nil, "products.shop"); len(got) != 0 {
		t.Errorf("authz on, anonymous delta: got %q", got)
	}
	if n := testutil.ToFloat64(on.s.metrics.authzRefused.WithLabelValues("cds", authz.RefusedAnonymous)); n == 0 {
		t.Error("anonymous refusals not counted")
	}
}
