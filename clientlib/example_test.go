package clientlib_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/ringxds/ringxds/clientlib"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/watch"
)

// serveExample runs an in-process ringxds server for the examples, the
// part a real deployment runs as xds-server.
func serveExample(endpointsYAML string) (addr string, stop func()) {
	dir, err := os.MkdirTemp("", "clientlib-example")
	if err != nil {
		log.Fatal(err)
	}
	file := filepath.Join(dir, "endpoints.yaml")
	if err := os.WriteFile(file, []byte(endpointsYAML), 0o644); err != nil {
		log.Fatal(err)
	}
	src, err := watch.NewFileSource(file, watch.FileOptions{})
	if err != nil {
		log.Fatal(err)
	}
	st, err := src.Load()
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := server.New(ctx, server.Options{})
	if err := srv.Apply(st); err != nil {
		log.Fatal(err)
	}
	g, err := server.NewGRPCServer(server.GRPCOptions{})
	if err != nil {
		log.Fatal(err)
	}
	srv.Register(g)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = g.Serve(l) }()
	return l.Addr().String(), func() { cancel(); g.Stop(); _ = os.RemoveAll(dir) }
}

func Example() {
	addr, stop := serveExample(`
clusters:
  - name: products
    lb_policy: skipper
    endpoints:
      - {address: 10.0.0.1, port: 8080}
      - {address: 10.0.0.2, port: 8080}
      - {address: 10.0.0.3, port: 8080}
`)
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := clientlib.Dial(ctx, addr, clientlib.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	b, err := c.Balancer(ctx, "products") // waits for the cluster's CDS and EDS
	if err != nil {
		log.Fatal(err)
	}
	ep, err := b.Pick("product-123")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(b.Policy(), ep.Addr)
	// Output: skipper 10.0.0.1:8080
}

func ExampleTransport() {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s", r.Header.Get("X-Product-Id"))
	}))
	defer backend.Close()
	host, port, _ := net.SplitHostPort(backend.Listener.Addr().String())
	addr, stop := serveExample(fmt.Sprintf(`
clusters:
  - name: products
    hash_header: x-product-id
    endpoints:
      - {address: %s, port: %s}
`, host, port))
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := clientlib.Dial(ctx, addr, clientlib.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	b, err := c.Balancer(ctx, "products")
	if err != nil {
		log.Fatal(err)
	}

	// Every request goes to the endpoint owning its X-Product-Id.
	hc := &http.Client{Transport: &clientlib.Transport{Balancer: b, Key: clientlib.HeaderKey("X-Product-Id")}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://products/item", nil)
	req.Header.Set("X-Product-Id", "product-123")
	resp, err := hc.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	// Output: 200 item product-123
}

func ExampleWriteOverload() {
	// A handler fanning out through Balancer.Do maps a shed call to 503.
	err := fmt.Errorf("fan-out: %w", &clientlib.OverloadError{Cluster: "products", InFlight: 4096, Queued: 4096, RetryAfter: 1500 * time.Millisecond})
	rec := httptest.NewRecorder()
	if clientlib.WriteOverload(rec, err) {
		fmt.Println(rec.Code, rec.Header().Get("Retry-After"))
	}
	var oe *clientlib.OverloadError
	fmt.Println(errors.As(err, &oe), oe.Cluster)
	// Output:
	// 503 2
	// true products
}
