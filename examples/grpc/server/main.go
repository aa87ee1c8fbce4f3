// Command server is a demo backend for ringxds. It answers on one address
// both as a gRPC server (grpc.testing.TestService, whose UnaryCall returns
// the backend's own address in the hostname field) and as a plain HTTP
// server that says which backend answered, so the same three processes
// serve the proxyless gRPC demo and the Envoy walk-through.
//
//	server --addr 127.0.0.1:9101
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9101", "address to serve gRPC and HTTP on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr); err != nil {
		log.Fatalf("server %s: %v", *addr, err)
	}
}

// backend counts what it served, so the log at exit says how many keys
// this backend received.
type backend struct {
	testgrpc.UnimplementedTestServiceServer
	addr        string
	rpcs, https atomic.Int64
}

// UnaryCall answers with the backend's address, which is how the client
// learns where each key went.
func (b *backend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	b.rpcs.Add(1)
	return &testgrpc.SimpleResponse{Hostname: b.addr}, nil
}

// ServeHTTP sends gRPC requests to the gRPC server and answers everything
// else (Envoy forwarding curl, say) with a line naming this backend.
func (b *backend) handler(g *grpc.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			g.ServeHTTP(w, r)
			return
		}
		b.https.Add(1)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Served-By", b.addr)
		fmt.Fprintf(w, "served by %s (%s %s", b.addr, r.Method, r.URL.Path)
		for _, h := range []string{"X-Product-Id", "X-Sku"} {
			if v := r.Header.Get(h); v != "" {
				fmt.Fprintf(w, ", %s: %s", strings.ToLower(h), v)
			}
		}
		fmt.Fprintln(w, ")")
	})
}

func run(ctx context.Context, addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	b := &backend{addr: lis.Addr().String()}
	g := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(g, b)

	// One port for both protocols: HTTP/1.1 for Envoy's upstream requests
	// (ringxds publishes clusters without HTTP/2 options) and HTTP/2 without
	// TLS for gRPC clients.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: b.handler(g), Protocols: &protocols, ReadHeaderTimeout: 5 * time.Second}

	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(lis) }()
	log.Printf("backend %s serving gRPC (grpc.testing.TestService) and HTTP", b.addr)
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Printf("backend %s served %d RPCs and %d HTTP requests", b.addr, b.rpcs.Load(), b.https.Load())
	return nil
}
