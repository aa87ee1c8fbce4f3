package e2e_test

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
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/xds"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/ringxds/ringxds/internal/debug"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/watch"
)

// controlPlane is one in-process xds-server: file source, xDS server and
// debug HTTP, wired as cmd/xds-server wires them.
type controlPlane struct {
	t        *testing.T
	file     string
	src      *watch.FileSource
	srv      *server.Server
	reg      *prometheus.Registry
	xdsAddr  string
	debugURL string
}

func startControlPlane(t *testing.T, file string) *controlPlane {
	t.Helper()
	log := zaptest.NewLogger(t)
	reg := prometheus.NewRegistry()
	src, err := watch.NewFileSource(file, watch.FileOptions{Logger: log.Named("file"), Registerer: reg, Debounce: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Load(); err != nil {
		t.Fatalf("initial load: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := server.New(ctx, server.Options{Logger: log.Named("xds"), Registerer: reg})
	g, err := server.NewGRPCServer(server.GRPCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Register(g)
	xl := listen(t)
	dl := listen(t)
	go func() { _ = g.Serve(xl) }()
	hs := &http.Server{Handler: debug.New(debug.Options{Server: srv, Problems: src.Problems, Gatherer: reg, Logger: log.Named("debug")})}
	go func() { _ = hs.Serve(dl) }()
	srcDone := make(chan struct{})
	go func() {
		defer close(srcDone)
		_ = src.Run(ctx, func(st model.State) {
			if err := srv.Apply(st); err != nil {
				t.Errorf("apply: %v", err)
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		g.Stop()
		_ = hs.Close()
		<-srcDone
	})
	cp := &controlPlane{t: t, file: file, src: src, srv: srv, reg: reg, xdsAddr: xl.Addr().String(), debugURL: "http://" + dl.Addr().String()}
	waitFor(t, 5*time.Second, "first snapshot", srv.Ready)
	return cp
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// writeFile replaces the endpoints file atomically, as editors and
// ConfigMap updates do.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func (cp *controlPlane) getJSON(path string, v any) int {
	cp.t.Helper()
	resp, err := http.Get(cp.debugURL + path)
	if err != nil {
		cp.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, v); err != nil {
		cp.t.Fatalf("GET %s: status %d, body not JSON: %v: %s", path, resp.StatusCode, err, body)
	}
	return resp.StatusCode
}

// pick asks /debug/pick where key goes for a client kind.
func (cp *controlPlane) pick(cluster, key, client string) debug.PickResult {
	cp.t.Helper()
	var res debug.PickResult
	q := url.Values{"cluster": {cluster}, "key": {key}, "client": {client}}
	if code := cp.getJSON("/debug/pick?"+q.Encode(), &res); code != http.StatusOK {
		cp.t.Fatalf("/debug/pick %s: status %d", q.Encode(), code)
	}
	return res
}

// backend is a real gRPC server that answers with its own address.
type backend struct {
	testgrpc.UnimplementedTestServiceServer
	addr string
	srv  *grpc.Server

	mu   sync.Mutex
	hits int
}

func (b *backend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	b.mu.Lock()
	b.hits++
	b.mu.Unlock()
	return &testgrpc.SimpleResponse{Hostname: b.addr}, nil
}

func (b *backend) Hits() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits
}

func startBackends(t *testing.T, n int) []*backend {
	t.Helper()
	out := make([]*backend, n)
	for i := range out {
		l := listen(t)
		b := &backend{addr: l.Addr().String(), srv: grpc.NewServer()}
		testgrpc.RegisterTestServiceServer(b.srv, b)
		go func() { _ = b.srv.Serve(l) }()
		t.Cleanup(b.srv.Stop)
		out[i] = b
	}
	return out
}

// endpointsYAML renders one cluster in the file source format.
func endpointsYAML(name, policy, header string, extra string, backends []*backend, weights []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "clusters:\n  - name: %s\n    lb_policy: %s\n    hash_header: %s\n%s    endpoints:\n", name, policy, header, extra)
	for i, be := range backends {
		host, port, _ := net.SplitHostPort(be.addr)
		w := 1
		if weights != nil {
			w = weights[i]
		}
		fmt.Fprintf(&b, "      - {address: %s, port: %s, weight: %d}\n", host, port, w)
	}
	return b.String()
}

// dialXDS opens a proxyless gRPC channel through grpc-go's own xDS client.
func dialXDS(t *testing.T, xdsAddr, target string) testgrpc.TestServiceClient {
	t.Helper()
	bootstrap := fmt.Sprintf(`{"xds_servers":[{"server_uri":%q,"channel_creds":[{"type":"insecure"}],"server_features":["xds_v3"]}],"node":{"id":"e2e-%s"}}`,
		xdsAddr, strings.ReplaceAll(t.Name(), "/", "-"))
	r, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///"+target, grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// call sends one RPC hashed on header=key and returns the backend that
// answered.
func call(ctx context.Context, c testgrpc.TestServiceClient, header, key string) (string, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, header, key)
	resp, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	if err != nil {
		return "", err
	}
	return resp.GetHostname(), nil
}

func tempFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "endpoints.yaml")
	writeFile(t, p, content)
	return p
}
