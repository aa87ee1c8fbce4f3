package clientlib_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/ringxds/ringxds/clientlib"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/testcp"
)

// startControlPlane runs an in-process xds-server (internal/testcp)
// serving file; addr "" picks a free loopback port.
func startControlPlane(t testing.TB, file, addr string) *testcp.ControlPlane {
	t.Helper()
	var opts []testcp.Option
	if addr != "" {
		opts = append(opts, testcp.WithXDSAddr(addr))
	}
	return testcp.Start(t, file, opts...)
}

var (
	listenOn  = testcp.Listen
	waitFor   = testcp.WaitFor
	writeFile = testcp.WriteFile
	tempFile  = testcp.TempFile
)

// decoded is the ring the server publishes to clientlib for cluster, as
// the test's own reference for walk order.
func decoded(t testing.TB, cp *testcp.ControlPlane, cluster string) *snapshot.Decoded {
	t.Helper()
	res := cp.Server.Current().Kinds[snapshot.KindClientlib]
	cds, _ := res[resourcev3.ClusterType][cluster].(*clusterv3.Cluster)
	cla, _ := res[resourcev3.EndpointType][cluster].(*endpointv3.ClusterLoadAssignment)
	d, err := snapshot.Decode(cds, cla, snapshot.KindClientlib)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// backend is a real HTTP server on loopback that answers with its own
// address. It can be frozen: its handler then blocks until thawed or the
// request is cancelled.
type backend struct {
	addr   string
	server *http.Server
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

// kill closes the backend's listener and connections: every new
// connection to it is refused, as to a dead pod.
func (b *backend) kill() { _ = b.server.Close() }

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
		b.server = hs
		go func() { _ = hs.Serve(l) }()
		t.Cleanup(func() { _ = hs.Close() })
		out[i] = b
	}
	return out
}

// clusterYAML renders one cluster of HTTP backends hashed on X-Key.
func clusterYAML(name, policy, extra string, backends []*backend) string {
	addrs := make([]string, len(backends))
	for i, b := range backends {
		addrs[i] = b.addr
	}
	return testcp.ClusterYAML(name, policy, "x-key", extra, addrs, nil)
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

func slicesSort(ds []time.Duration) { slices.Sort(ds) }

func ringhashKey(key string) uint64 { return ringhash.HashKey(key) }
