package grpcbalancer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/xds"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	_ "github.com/ringxds/ringxds/clientlib/grpcbalancer"
	"github.com/ringxds/ringxds/internal/debug"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/watch"
)

// startControlPlane runs an in-process xds-server on loopback serving the
// endpoints file, and returns its xDS and debug addresses.
func startControlPlane(t *testing.T, file string) (xdsAddr, debugURL string) {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	reg := prometheus.NewRegistry()
	src, err := watch.NewFileSource(file, watch.FileOptions{Logger: log, Registerer: reg, Debounce: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Load(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := server.New(ctx, server.Options{Logger: log, Registerer: reg})
	g, err := server.NewGRPCServer(server.GRPCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Register(g)
	xl, dl := listen(t), listen(t)
	go func() { _ = g.Serve(xl) }()
	hs := &http.Server{Handler: debug.New(debug.Options{Server: srv, Problems: src.Problems, Gatherer: reg, Logger: log})}
	go func() { _ = hs.Serve(dl) }()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = src.Run(ctx, func(st model.State) {
			if err := srv.Apply(st); err != nil {
				t.Errorf("apply: %v", err)
			}
		})
	}()
	t.Cleanup(func() { cancel(); g.Stop(); _ = hs.Close(); <-done })
	deadline := time.Now().Add(5 * time.Second)
	for !srv.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("no snapshot")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return xl.Addr().String(), "http://" + dl.Addr().String()
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// backend is a gRPC server that answers with its own address.
type backend struct {
	testgrpc.UnimplementedTestServiceServer
	addr string
}

func (b *backend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Hostname: b.addr}, nil
}

func debugPick(t *testing.T, debugURL, cluster, key, client string) debug.PickResult {
	t.Helper()
	q := url.Values{"cluster": {cluster}, "key": {key}, "client": {client}}
	resp, err := http.Get(debugURL + "/debug/pick?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var res debug.PickResult
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &res) != nil {
		t.Fatalf("/debug/pick: %d %s", resp.StatusCode, body)
	}
	return res
}

// A proxyless grpc-go client, through grpc-go's own xDS resolver and
// client, runs the registered ringxds.skipper policy for a skipper cluster
// and sends each key where /debug/pick says clientlib sends it.
func TestProxylessGRPCAgreesWithDebugPick(t *testing.T) {
	var backends []*backend
	var yaml strings.Builder
	// A header other than the default proves the server's hash_header
	// reaches the balancer through the TypedStruct.
	const header = "x-product-id"
	fmt.Fprintf(&yaml, "clusters:\n  - name: products\n    lb_policy: skipper\n    hash_header: %s\n    endpoints:\n", header)
	for range 5 {
		l := listen(t)
		b := &backend{addr: l.Addr().String()}
		s := grpc.NewServer()
		testgrpc.RegisterTestServiceServer(s, b)
		go func() { _ = s.Serve(l) }()
		t.Cleanup(s.Stop)
		backends = append(backends, b)
		host, port, _ := net.SplitHostPort(b.addr)
		fmt.Fprintf(&yaml, "      - {address: %s, port: %s}\n", host, port)
	}
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(file, []byte(yaml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	xdsAddr, debugURL := startControlPlane(t, file)

	bootstrap := fmt.Sprintf(`{"xds_servers":[{"server_uri":%q,"channel_creds":[{"type":"insecure"}],"server_features":["xds_v3"]}],"node":{"id":"grpcbalancer-e2e"}}`, xdsAddr)
	r, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///products", grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	client := testgrpc.NewTestServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	perBackend := map[string]int{}
	differsFromRingHash := 0
	for i := range 1000 {
		key := fmt.Sprintf("product-%d", i)
		want := debugPick(t, debugURL, "products", key, "clientlib")
		if want.Policy != "skipper" {
			t.Fatalf("clientlib policy %q, want skipper", want.Policy)
		}
		resp, err := client.UnaryCall(metadata.AppendToOutgoingContext(ctx, header, key), &testgrpc.SimpleRequest{})
		if err != nil {
			t.Fatalf("RPC for %s: %v", key, err)
		}
		got := resp.GetHostname()
		if got != want.Endpoint {
			t.Fatalf("key %s: grpc-go sent it to %s, /debug/pick (clientlib) says %s (grpc ring_hash: %s)", key, got, want.Endpoint, want.ByClient["grpc"])
		}
		if want.ByClient["grpc"] != got {
			differsFromRingHash++
		}
		perBackend[got]++
	}
	t.Logf("per backend %v; %d keys differ from the ring_hash fallback", perBackend, differsFromRingHash)
	if len(perBackend) != len(backends) {
		t.Fatalf("only %d of %d backends got keys", len(perBackend), len(backends))
	}
	// Proof the Skipper ring ran, not the ring_hash fallback grpc-go uses
	// without this package: the two rings disagree on many keys.
	if differsFromRingHash == 0 {
		t.Fatal("every key went where ring_hash sends it: the ringxds.skipper policy did not run")
	}
}
