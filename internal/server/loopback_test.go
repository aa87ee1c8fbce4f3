package server

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// serveLoopback serves s through its limits (GRPCServerOptions, Listen) on
// a loopback port, stopped with the test, and returns the address.
func serveLoopback(t testing.TB, s *Server) string {
	t.Helper()
	g, err := NewGRPCServer(GRPCOptions{ServerOptions: s.GRPCServerOptions()})
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

// dialLoopback is a plaintext client connection to addr, closed with the
// test.
func dialLoopback(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// rateLimitedLoopback wraps a loopback listener in s's connection rate limit and
// returns it with the inner listener's address, for clients to dial.
func rateLimitedLoopback(t testing.TB, s *Server) (net.Listener, string) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := s.Listen(inner)
	t.Cleanup(func() { _ = l.Close() })
	return l, inner.Addr().String()
}
