package clientlib_test

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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	"github.com/ringxds/ringxds/clientlib"
	"github.com/ringxds/ringxds/internal/debug"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/watch"
)

// controlPlane is one in-process xds-server: file source, xDS server and
// debug HTTP, wired as cmd/xds-server wires them.
type controlPlane struct {
	t        testing.TB
	file     string
	srv      *server.Server
	xdsAddr  string
	debugURL string
	stop     func()
}

// startControlPlane serves file; addr "" picks a free loopback port.
func startControlPlane(t testing.TB, file, addr string) *controlPlane {
	t.Helper()
	log := zap.NewNop()
	if tt, ok := t.(*testing.T); ok {
		log = zaptest.NewLogger(tt, zaptest.Level(zap.WarnLevel))
	}
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
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	xl := listenOn(t, addr)
	dl := listenOn(t, "127.0.0.1:0")
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
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			g.Stop()
			_ = hs.Close()
			<-srcDone
		})
	}
	t.Cleanup(stop)
	cp := &controlPlane{t: t, file: file, srv: srv, xdsAddr: xl.Addr().String(), debugURL: "http://" + dl.Addr().String(), stop: stop}
	waitFor(t, 5*time.Second, "first snapshot", srv.Ready)
	return cp
}

// listenOn listens on addr, retrying briefly: a port a stopped server just
// released can take a moment to be free again.
func listenOn(t testing.TB, addr string) net.Listener {
	t.Helper()
	var err error
	for range 50 {
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			return l
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal(err)
	return nil
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// writeFile replaces the endpoints file atomically.
func writeFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func tempFile(t testing.TB, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "endpoints.yaml")
	writeFile(t, p, content)
	return p
}

// pick asks /debug/pick where key goes for a client kind.
func (cp *controlPlane) pick(cluster, key, client string) debug.PickResult {
	cp.t.Helper()
	q := url.Values{"cluster": {cluster}, "key": {key}, "client": {client}}
	resp, err := http.Get(cp.debugURL + "/debug/pick?" + q.Encode())
	if err != nil {
		cp.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var res debug.PickResult
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &res) != nil {
		cp.t.Fatalf("/debug/pick %s: status %d: %s", q.Encode(), resp.StatusCode, body)
	}
	return res
}

// decoded is the ring the server publishes to clientlib for cluster, as
// the test's own reference for walk order.
func (cp *controlPlane) decoded(cluster string) *snapshot.Decoded {
	cp.t.Helper()
	res := cp.srv.Current().Kinds[snapshot.KindClientlib]
	cds, _ := res[resourcev3.ClusterType][cluster].(*clusterv3.Cluster)
	cla, _ := res[resourcev3.EndpointType][cluster].(*endpointv3.ClusterLoadAssignment)
	d, err := snapshot.Decode(cds, cla, snapshot.KindClientlib)
	if err != nil {
		cp.t.Fatal(err)
	}
	return d
}

// backend is a real HTTP server on loopback that answers with its own
// address. It can be frozen: its handler then blocks until thawed or the
// request is cancelled.
type backend struct {
	addr   string
	frozen atomic.Pointer[chan struct{}]
	block  atomic.Pointer[chan struct{}] // blocks only requests with X-Block
	hits   sync.Map                      // key -> *atomic.Int64
	total  atomic.Int64
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ch := b.frozen.Load(); ch != nil {
		select {
		case <-*ch:
		case <-r.Context().Done():
			return
		}
	}
	if ch := b.block.Load(); ch != nil && r.Header.Get("X-Block") != "" {
		select {
		case <-*ch:
		case <-r.Context().Done():
			return
		}
	}
	key := r.Header.Get("X-Key")
	n, _ := b.hits.LoadOrStore(key, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	b.total.Add(1)
	_, _ = io.WriteString(w, b.addr)
}

func (b *backend) freeze() func() {
	ch := make(chan struct{})
	b.frozen.Store(&ch)
	return func() { b.frozen.Store(nil); close(ch) }
}

func (b *backend) keys() map[string]int64 {
	out := map[string]int64{}
	b.hits.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

func startBackends(t testing.TB, n int) []*backend {
	t.Helper()
	out := make([]*backend, n)
	for i := range out {
		l := listenOn(t, "127.0.0.1:0")
		b := &backend{addr: l.Addr().String()}
		hs := &http.Server{Handler: b}
		go func() { _ = hs.Serve(l) }()
		t.Cleanup(func() { _ = hs.Close() })
		out[i] = b
	}
	return out
}

// clusterYAML renders one cluster in the file source format.
func clusterYAML(name, policy, extra string, backends []*backend) string {
	var b strings.Builder
	fmt.Fprintf(&b, "clusters:\n  - name: %s\n    lb_policy: %s\n    hash_header: x-key\n%s    endpoints:\n", name, policy, extra)
	for _, be := range backends {
		host, port, _ := net.SplitHostPort(be.addr)
		fmt.Fprintf(&b, "      - {address: %s, port: %s}\n", host, port)
	}
	return b.String()
}

// dial connects a clientlib Client to the control plane at addr.
func dial(t testing.TB, addr string, opts ...clientlib.Option) *clientlib.Client {
	t.Helper()
	log := zap.NewNop()
	if tt, ok := t.(*testing.T); ok {
		log = zaptest.NewLogger(tt, zaptest.Level(zap.WarnLevel))
	}
	opts = append([]clientlib.Option{
		clientlib.WithInsecure(),
		clientlib.WithNodeID("clientlib-" + strings.ReplaceAll(t.Name(), "/", "-")),
		clientlib.WithLogger(log),
		clientlib.WithReconnectBackoff(10*time.Millisecond, 200*time.Millisecond),
	}, opts...)
	c, err := clientlib.Dial(context.Background(), addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func balancer(t testing.TB, c *clientlib.Client, cluster string, opts ...clientlib.BalancerOption) *clientlib.Balancer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := c.Balancer(ctx, cluster, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// get sends one keyed request through the transport and returns the
// backend that answered.
func get(ctx context.Context, hc *http.Client, key string, header http.Header) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://products/item", nil)
	if err != nil {
		return "", err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("X-Key", key)
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

func transportClient(b *clientlib.Balancer) *http.Client {
	return &http.Client{Transport: &clientlib.Transport{Balancer: b, Key: clientlib.HeaderKey("X-Key")}}
}

// ensure grpc is linked for the restart test's listener reuse.
var _ = grpc.NewServer

func slicesSort(ds []time.Duration) { slices.Sort(ds) }

func ringhashKey(key string) uint64 { return ringhash.HashKey(key) }
