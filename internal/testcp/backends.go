package testcp

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/xds"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// Backend is a real gRPC server that answers with its own address.
type Backend struct {
	testgrpc.UnimplementedTestServiceServer
	// Addr is host:port on loopback.
	Addr string
	srv  *grpc.Server

	mu    sync.Mutex
	hits  int
	conns int
}

// Conns counts the connections the backend accepted.
func (b *Backend) Conns() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns
}

// countingListener counts a backend's accepted connections.
type countingListener struct {
	net.Listener
	b *Backend
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.b.mu.Lock()
		l.b.conns++
		l.b.mu.Unlock()
	}
	return c, err
}

// UnaryCall answers with the backend's address as the hostname.
func (b *Backend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	b.mu.Lock()
	b.hits++
	b.mu.Unlock()
	return &testgrpc.SimpleResponse{Hostname: b.Addr}, nil
}

// Hits counts the calls served.
func (b *Backend) Hits() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits
}

// StartBackends starts n gRPC backends on free loopback ports.
func StartBackends(t testing.TB, n int) []*Backend {
	t.Helper()
	out := make([]*Backend, n)
	for i := range out {
		l := Listen(t, "127.0.0.1:0")
		b := &Backend{Addr: l.Addr().String(), srv: grpc.NewServer()}
		testgrpc.RegisterTestServiceServer(b.srv, b)
		go func() { _ = b.srv.Serve(countingListener{l, b}) }()
		t.Cleanup(b.srv.Stop)
		out[i] = b
	}
	return out
}

// Addrs lists the backends' addresses.
func Addrs(backends []*Backend) []string {
	out := make([]string, len(backends))
	for i, b := range backends {
		out[i] = b.Addr
	}
	return out
}

// ClusterYAML renders one cluster in the file source format. extra holds
// cluster-level lines (each indented four spaces, ending in a newline);
// weights may be nil for equal weights.
func ClusterYAML(name, policy, header, extra string, addrs []string, weights []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "clusters:\n  - name: %s\n    lb_policy: %s\n    hash_header: %s\n%s    endpoints:\n", name, policy, header, extra)
	for i, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		w := 1
		if weights != nil {
			w = weights[i]
		}
		fmt.Fprintf(&b, "      - {address: %s, port: %s, weight: %d}\n", host, port, w)
	}
	return b.String()
}

// DialXDS opens a proxyless gRPC channel to xds:///target through grpc-go's
// own xDS client, with an in-test bootstrap naming xdsAddr. Extra dial
// options (a default service config, say) are appended.
func DialXDS(t testing.TB, xdsAddr, target string, extra ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	bootstrap := fmt.Sprintf(`{"xds_servers":[{"server_uri":%q,"channel_creds":[{"type":"insecure"}],"server_features":["xds_v3"]}],"node":{"id":"test-%s"}}`,
		xdsAddr, strings.ReplaceAll(t.Name(), "/", "-"))
	r, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	opts := append([]grpc.DialOption{grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials())}, extra...)
	cc, err := grpc.NewClient("xds:///"+target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Call sends one RPC hashed on header=key and returns the backend that
// answered.
func Call(ctx context.Context, c testgrpc.TestServiceClient, header, key string) (string, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, header, key)
	resp, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	if err != nil {
		return "", err
	}
	return resp.GetHostname(), nil
}
