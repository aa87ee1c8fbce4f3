package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/authz"
	"github.com/ringxds/ringxds/internal/buildinfo"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/testpki"
	"github.com/ringxds/ringxds/internal/watch"
)

// startReplica serves the embedded example as one xds-server replica with
// the given identity and build, as cmd/xds-server wires it.
func startReplica(t *testing.T, replica buildinfo.Replica, tlsCfg *tls.Config, policy *authz.Policy) string {
	t.Helper()
	s := server.New(t.Context(), server.Options{Registerer: prometheus.NewRegistry(), Replica: replica, Authz: policy})
	state, err := watch.ParseFile(examples.DefaultEndpointsName, examples.DefaultEndpoints)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(state); err != nil {
		t.Fatal(err)
	}
	g, err := server.NewGRPCServer(server.GRPCOptions{TLS: tlsCfg, ServerOptions: s.GRPCServerOptions()})
	if err != nil {
		t.Fatal(err)
	}
	s.Register(g)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(s.Listen(l)) }()
	t.Cleanup(g.Stop)
	return l.Addr().String()
}

// adsClient connects a raw SotW ADS client as node that accepts every
// cluster and, if nack is set, rejects the endpoints of products.
func adsClient(t *testing.T, addr string, creds credentials.TransportCredentials, node string, nack bool) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := &core.Node{Id: node, UserAgentName: "envoy", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.37.0"}}
	answer := func(req *discovery.DiscoveryRequest) {
		t.Helper()
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		next := &discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResourceNames: req.GetResourceNames(), ResponseNonce: resp.GetNonce(), VersionInfo: resp.GetVersionInfo()}
		if nack && resp.GetTypeUrl() == resource.EndpointType {
			next.VersionInfo, next.ErrorDetail = "", &rpcstatus.Status{Code: 3, Message: "test rejects products endpoints"}
		}
		if err := st.Send(next); err != nil {
			t.Fatal(err)
		}
	}
	answer(&discovery.DiscoveryRequest{Node: n, TypeUrl: resource.ClusterType})
	answer(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{"products"}})
}

// statusUntil runs status until ok accepts its answer, for five seconds:
// the clients' answers reach the servers asynchronously.
func statusUntil(t *testing.T, ok func(statusOutput) bool, args ...string) statusOutput {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var got statusOutput
		ctlJSON(t, &got, append([]string{"status"}, args...)...)
		if ok(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never as expected: %+v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Two replicas running different builds, a client on each: status lists
// both builds and says which client is on which replica, with its state.
func TestStatusAcrossReplicas(t *testing.T) {
	a := buildinfo.Replica{Name: "ringxds-a", Build: buildinfo.Info{Version: "v1.2.3", Revision: "aaaaaaaaaaaaaaaa", GoVersion: "go1.26.8"}}
	b := buildinfo.Replica{Name: "ringxds-b", Build: buildinfo.Info{Version: "v1.3.0", Revision: "bbbbbbbbbbbbbbbb", Modified: false, GoVersion: "go1.26.8"}}
	addrA, addrB := startReplica(t, a, nil, nil), startReplica(t, b, nil, nil)
	adsClient(t, addrA, insecure.NewCredentials(), "envoy-on-a", false)
	adsClient(t, addrB, insecure.NewCredentials(), "envoy-on-b", true)

	settled := func(o statusOutput) bool {
		if len(o.Replicas) != 2 || len(o.Replicas[0].Clients) != 1 || len(o.Replicas[1].Clients) != 1 {
			return false
		}
		ca, cb := o.Replicas[0].Clients[0], o.Replicas[1].Clients[0]
		return ca.Summary["cds"]["ACKED"] == 3 && ca.Summary["eds"]["ACKED"] == 1 &&
			cb.Summary["cds"]["ACKED"] == 3 && cb.Summary["eds"]["NACKED"] == 1
	}
	got := statusUntil(t, settled, "--server", addrA, "--server", addrB)
	if got.Builds != 2 {
		t.Errorf("builds = %d, want 2", got.Builds)
	}
	for i, want := range []struct {
		replica buildinfo.Replica
		addr    string
		node    string
	}{{a, addrA, "envoy-on-a"}, {b, addrB, "envoy-on-b"}} {
		rs := got.Replicas[i]
		want.replica.Build.Revision = want.replica.Build.ShortRevision() // the header carries it abbreviated
		if rs.Server != want.addr || rs.Replica != want.replica || rs.Clients[0].Node != want.node || rs.Clients[0].UserAgent != "envoy 1.37.0" {
			t.Errorf("replica %d: %+v, want %s at %s with %s", i, rs, want.replica, want.addr, want.node)
		}
	}
	var nacked resourceStatus
	for _, r := range got.Replicas[1].Clients[0].Resources {
		if r.Status == "NACKED" {
			nacked = r
		}
	}
	if nacked.Type != "eds" || nacked.Name != "products" || nacked.Error != "test rejects products endpoints" || nacked.ConfigStatus != "ERROR" || nacked.Version == "" {
		t.Errorf("NACKed resource %+v", nacked)
	}

	out, _, code := ctl(t, "status", "--server", addrA, "--server", addrB)
	for _, want := range []string{"ringxds-a", "v1.2.3 (aaaaaaaaaaaa, go1.26.8)", "ringxds-b", "v1.3.0 (bbbbbbbbbbbb, go1.26.8)",
		"2 different builds", "envoy-on-a", "3 acked", "1 nacked", "test rejects products endpoints"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("table (exit %d) lacks %q:\n%s", code, want, out)
		}
	}

	// A replica that does not answer is named; the others are listed.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close()
	out, stderr, code := ctl(t, "status", "--server", addrA, "--server", deadAddr, "--timeout", "2s")
	if code != 1 || !strings.Contains(out, "envoy-on-a") || !strings.Contains(out, deadAddr+"  error: ") || !strings.Contains(stderr, "1 of 2 servers did not answer") {
		t.Errorf("a dead replica: exit %d\n%s\n%s", code, out, stderr)
	}
	if _, stderr, code := ctl(t, "status"); code != 2 || !strings.Contains(stderr, "--server is required") {
		t.Errorf("no server: exit %d, %s", code, stderr)
	}
}

// Over mTLS with --authz=namespace: a cluster-wide reader's certificate
// reads status, a tenant's is refused, and so is plaintext.
func TestStatusTLSAndAuthorization(t *testing.T) {
	pki := testpki.New(t)
	serverCert := pki.Issue(t, x509.ExtKeyUsageServerAuth, "")
	policy, err := authz.NewPolicy([]string{"ops"})
	if err != nil {
		t.Fatal(err)
	}
	addr := startReplica(t, buildinfo.Replica{Name: "secure", Build: buildinfo.Read()}, &tls.Config{
		Certificates: []tls.Certificate{serverCert}, ClientCAs: pki.Pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}, policy)
	tenant := pki.Issue(t, x509.ExtKeyUsageClientAuth, "spiffe://test/ns/shop/sa/web")
	adsClient(t, addr, credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{tenant}, RootCAs: pki.Pool, MinVersion: tls.VersionTLS12}), "shop-envoy", false)

	ca := writeFile(t, "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pki.Cert.Raw})))
	readerCert, readerKey := pemFiles(t, "reader", pki.Issue(t, x509.ExtKeyUsageClientAuth, "spiffe://test/ns/ops/sa/ringxdsctl"))
	tenantCert, tenantKey := pemFiles(t, "tenant", tenant)
	got := statusUntil(t, func(o statusOutput) bool { return len(o.Replicas[0].Clients) == 1 },
		"--server", addr, "--tls-ca", ca, "--tls-cert", readerCert, "--tls-key", readerKey)
	if got.Replicas[0].Replica.Name != "secure" || got.Replicas[0].Clients[0].Node != "shop-envoy" {
		t.Errorf("cluster reader: %+v", got)
	}
	_, stderr, code := ctl(t, "status", "--server", addr, "--tls-ca", ca, "--tls-cert", tenantCert, "--tls-key", tenantKey, "-o", "json")
	if code != 1 || !strings.Contains(stderr, "1 of 1 servers did not answer") {
		t.Errorf("tenant: exit %d, %s", code, stderr)
	}
	out, _, _ := ctl(t, "status", "--server", addr, "--tls-ca", ca, "--tls-cert", tenantCert, "--tls-key", tenantKey)
	if !strings.Contains(out, "PermissionDenied") || !strings.Contains(out, "--authz-cluster-readers") {
		t.Errorf("tenant's refusal not explained:\n%s", out)
	}
	if out, _, code := ctl(t, "status", "--server", addr, "--timeout", "2s"); code != 1 || !strings.Contains(out, "error: ") {
		t.Errorf("plaintext to an mTLS server: exit %d\n%s", code, out)
	}
	if _, stderr, code := ctl(t, "status", "--server", addr, "--tls-cert", readerCert); code != 2 || !strings.Contains(stderr, "--tls-cert and --tls-key go together") {
		t.Errorf("--tls-cert alone: exit %d, %s", code, stderr)
	}
}

// pemFiles writes a certificate and its key as PEM files.
func pemFiles(t *testing.T, name string, c tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	certPEM, keyPEM := testpki.PEM(t, c)
	return writeFile(t, name+".pem", string(certPEM)), writeFile(t, name+"-key.pem", string(keyPEM))
}
