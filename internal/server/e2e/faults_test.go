package e2e_test

// The in-process rows of the fault matrix: each test injects one fault
// while grpc-go's own xDS client routes keyed RPCs to real backends, and
// states what must hold through it.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/ringxds/ringxds/internal/debug"
	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/testcp"
	"github.com/ringxds/ringxds/internal/watch"
)

// histogramCount reads how many observations a histogram without labels
// has had, e.g. one per snapshot build.
func histogramCount(t *testing.T, cp *testcp.ControlPlane, name string) uint64 {
	t.Helper()
	mfs, err := cp.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("no histogram %s", name)
	return 0
}

// builds counts the snapshots the server has built.
func builds(t *testing.T, cp *testcp.ControlPlane) uint64 {
	return histogramCount(t, cp, "ringxds_snapshot_build_seconds")
}

// sweeper routes keys product-0.. through grpc-go's own xDS client and
// compares with /debug/pick (client=grpc), several keys in flight. Where
// keys go is a function of the published snapshot, so /debug/pick is asked
// once per snapshot: a retry, or a sweep after a step that published
// nothing, costs only the RPCs.
type sweeper struct {
	t     *testing.T
	cp    *testcp.ControlPlane
	route func(string) (string, error)
	keys  int
	// snap is the snapshot want was read from.
	snap *snapshot.Snapshot
	want []debug.PickResult
}

func newSweeper(t *testing.T, cp *testcp.ControlPlane, route func(string) (string, error), keys int) *sweeper {
	return &sweeper{t: t, cp: cp, route: route, keys: keys}
}

// parallel runs fn for every key index, 8 at a time, and returns the
// first error.
func (s *sweeper) parallel(fn func(i int, key string) error) error {
	errs := make([]error, s.keys)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < s.keys; i = int(next.Add(1)) - 1 {
				errs[i] = fn(i, fmt.Sprintf("product-%d", i))
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sweep returns the backend per key and the number of keys that went
// elsewhere than /debug/pick says.
func (s *sweeper) sweep() (map[string]string, int) {
	t := s.t
	t.Helper()
	for snap := s.cp.Server.Current(); snap != s.snap; snap = s.cp.Server.Current() {
		want := make([]debug.PickResult, s.keys)
		if err := s.parallel(func(i int, key string) (err error) {
			want[i], err = pickGRPC(s.cp, key)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for i, w := range want {
			if w.ByClient["envoy"] != w.Endpoint || w.ByClient["clientlib"] != w.Endpoint {
				t.Fatalf("key product-%d: data planes disagree: %v", i, w.ByClient)
			}
		}
		s.snap, s.want = snap, want
	}
	got := s.routes()
	bad := 0
	for i := range s.keys {
		if got[fmt.Sprintf("product-%d", i)] != s.want[i].Endpoint {
			bad++
		}
	}
	return got, bad
}

// routes returns the backend each key goes to.
func (s *sweeper) routes() map[string]string {
	s.t.Helper()
	got := make([]string, s.keys)
	if err := s.parallel(func(i int, key string) (err error) {
		got[i], err = s.route(key)
		return err
	}); err != nil {
		s.t.Fatal(err)
	}
	out := make(map[string]string, s.keys)
	for i, be := range got {
		out[fmt.Sprintf("product-%d", i)] = be
	}
	return out
}

// agreed sweeps until the client routes every key where /debug/pick says,
// for up to 20 s (the client may still be applying a push).
func (s *sweeper) agreed(when string) map[string]string {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, bad := s.sweep()
		if bad == 0 {
			return got
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: %d/%d keys disagree with /debug/pick", when, bad, s.keys)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pickGRPC asks /debug/pick where grpc-go sends key in products; unlike
// ControlPlane.Pick it may run off the test's goroutine.
func pickGRPC(cp *testcp.ControlPlane, key string) (debug.PickResult, error) {
	var res debug.PickResult
	q := url.Values{"cluster": {"products"}, "key": {key}, "client": {"grpc"}}
	resp, err := http.Get(cp.DebugURL + "/debug/pick?" + q.Encode())
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return res, fmt.Errorf("/debug/pick for %s: status %d", key, resp.StatusCode)
	}
	return res, json.NewDecoder(resp.Body).Decode(&res)
}

// keepRouting routes keys round-robin through client, one RPC at a time,
// until the test ends. The returned function reports the RPCs made and
// the first failure.
func keepRouting(t *testing.T, client testgrpc.TestServiceClient, keys int) func() (int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var calls int
	var failure error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			key := fmt.Sprintf("product-%d", i%keys)
			_, err := testcp.Call(ctx, client, "x-product-id", key)
			mu.Lock()
			calls++
			if err != nil && ctx.Err() == nil && failure == nil {
				failure = fmt.Errorf("RPC %d for %s: %w", calls, key, err)
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return calls, failure
	}
}

// servedVersions fetches the products Cluster and ClusterLoadAssignment
// on a fresh SotW stream, as a grpc-go client that connects now would, and
// returns their versions. Both must be there.
func servedVersions(t *testing.T, ads discovery.AggregatedDiscoveryServiceClient) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var vs []string
	for _, typeURL := range []string{resource.ClusterType, resource.EndpointType} {
		resp := sotwFetch(t, ctx, ads, node("fault-probe", "grpc"), typeURL, []string{"products"})
		if n := len(resp.GetResources()); n != 1 {
			t.Fatalf("%s: a new client is served %d resources for products, want 1", typeURL, n)
		}
		vs = append(vs, resp.GetVersionInfo())
	}
	return strings.Join(vs, "/")
}

// allBut is every backend but backends[i%len(backends)]: for consecutive
// i, endpoint sets that differ.
func allBut(backends []*testcp.Backend, i int) []*testcp.Backend {
	return slices.Delete(slices.Clone(backends), i%len(backends), i%len(backends)+1)
}

// sortedAddrs lists the backends' addresses, sorted.
func sortedAddrs(backends []*testcp.Backend) []string {
	out := testcp.Addrs(backends)
	slices.Sort(out)
	return out
}

// publishedAddrs lists the products endpoints the server publishes, sorted.
func publishedAddrs(cp *testcp.ControlPlane) []string {
	c, ok := cp.Server.Current().State.Cluster("products")
	if !ok {
		return nil
	}
	var out []string
	for _, ep := range c.Endpoints {
		out = append(out, ep.HostPort())
	}
	slices.Sort(out)
	return out
}

// sourceProblems reads /debug/problems.
func sourceProblems(cp *testcp.ControlPlane) []watch.Problem {
	var body struct {
		Problems []watch.Problem `json:"problems"`
	}
	cp.GetJSON("/debug/problems", &body)
	return body.Problems
}

// metricValue reads one series of the control plane's registry (a counter
// or a gauge), 0 if it does not exist.
func metricValue(t *testing.T, cp *testcp.ControlPlane, name string, labels map[string]string) float64 {
	t.Helper()
	if c := counterOrZero(t, cp, name, labels); c != nil {
		return testutil.ToFloat64(c)
	}
	return 0
}

// resourceChanges sums the resources the server has added, updated and
// removed in its caches.
func resourceChanges(t *testing.T, cp *testcp.ControlPlane) float64 {
	t.Helper()
	return sumMetric(t, cp, "ringxds_snapshot_resource_changes_total", nil)
}

// writeInPlace rewrites path through its own inode, as a writer that does
// not rename does, truncating it to what is written.
func writeInPlace(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fileFault is one way the endpoints file goes bad, and what the source
// says of it.
type fileFault struct {
	name    string
	apply   func(t *testing.T, path, good string)
	problem string
}

var fileFaults = []fileFault{
	{"deleted", func(t *testing.T, path, _ string) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}, "the file does not exist"},
	{"emptied in place", func(t *testing.T, path, _ string) { writeInPlace(t, path, "") }, "the file is empty"},
	{"rewritten in place and cut mid-line", func(t *testing.T, path, good string) {
		// The writer stopped (a full disk, a killed process) inside
		// the last endpoint's line: what came before parses.
		writeInPlace(t, path, good[:strings.LastIndex(good, "port:")+3])
	}, "line "},
	{"truncated mid-line through an open descriptor", func(t *testing.T, path, good string) {
		// As truncate -s does: open, ftruncate, close.
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(int64(strings.LastIndex(good, "port:") + 3)); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}, "line "},
	{"replaced by a directory", func(t *testing.T, path, _ string) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(path, 0o755); err != nil {
			t.Fatal(err)
		}
	}, "is a directory, not a regular file"},
}

// TestFaultEndpointsFileBroken breaks the endpoints file in each way of
// fileFaults while grpc-go's own xDS client routes keyed RPCs through the
// server, then writes a good file with other endpoints. While the file is
// bad, the server keeps serving the last good state: a client connecting
// then gets the same resource versions, nothing is withdrawn or changed in
// the caches, and every key still goes to the same backend; the problem is
// on /debug/problems, in ringxds_source_problems and
// ringxds_source_reloads_total{result="error"}, and in the log. The good
// file that follows is published (no lost update) and the problem clears.
// No RPC fails throughout.
func TestFaultEndpointsFileBroken(t *testing.T) {
	backends := testcp.StartBackends(t, 5)
	// content(i) is every backend but backends[i%5]: consecutive ones
	// differ, so each recovery is a change that must be published.
	content := func(i int) string {
		return endpointsYAML("products", "ring_hash", "x-product-id", "", allBut(backends, i), nil)
	}
	good := content(len(backends) - 1)
	cp := testcp.Start(t, testcp.TempFile(t, good))
	client := dialXDS(t, cp.XDSAddr, "products")
	ads := adsClient(t, cp.XDSAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	route := func(key string) (string, error) { return testcp.Call(ctx, client, "x-product-id", key) }
	const keys = 200
	sw := newSweeper(t, cp, route, keys)
	routed := sw.agreed("before any fault")
	background := keepRouting(t, client, keys)
	errorLabels := map[string]string{"source": "file", "result": "error"}
	problemsGauge := map[string]string{"source": "file"}

	for i, f := range fileFaults {
		versions, changes := servedVersions(t, ads), resourceChanges(t, cp)
		reloadErrors := metricValue(t, cp, "ringxds_source_reloads_total", errorLabels)
		logged := cp.Logs.FilterMessage("endpoints file rejected; keeping the last good state").Len()

		f.apply(t, cp.File, good)
		var ps []watch.Problem
		testcp.WaitFor(t, 5*time.Second, f.name+": the problem to be reported", func() bool {
			ps = sourceProblems(cp)
			return len(ps) > 0
		})
		if !strings.Contains(ps[0].Field+" "+ps[0].Message, f.problem) || ps[0].Object != cp.File {
			t.Errorf("%s: problem %+v does not say %q of %s", f.name, ps[0], f.problem, cp.File)
		}
		t.Logf("%s: /debug/problems says %s: %.80s", f.name, cmp.Or(ps[0].Field, "(no field)"), ps[0].Message)
		if n := metricValue(t, cp, "ringxds_source_problems", problemsGauge); n < 1 {
			t.Errorf("%s: ringxds_source_problems = %v, want at least 1", f.name, n)
		}
		if n := metricValue(t, cp, "ringxds_source_reloads_total", errorLabels); n <= reloadErrors {
			t.Errorf("%s: ringxds_source_reloads_total{result=error} stayed at %v", f.name, n)
		}
		if n := cp.Logs.FilterMessage("endpoints file rejected; keeping the last good state").Len(); n <= logged {
			t.Errorf("%s: the rejection was not logged", f.name)
		}
		if got := servedVersions(t, ads); got != versions {
			t.Errorf("%s: a new client is served versions %s, before the fault %s", f.name, got, versions)
		}
		if n := resourceChanges(t, cp); n != changes {
			t.Errorf("%s: %v resources changed in the caches while the file was bad", f.name, n-changes)
		}
		during, bad := sw.sweep()
		if bad != 0 {
			t.Errorf("%s: %d/%d keys disagree with /debug/pick", f.name, bad, keys)
		}
		for key, be := range routed {
			if during[key] != be {
				t.Fatalf("%s: key %s moved from %s to %s while the file was bad", f.name, key, be, during[key])
			}
		}

		if f.name == "replaced by a directory" {
			if err := os.Remove(cp.File); err != nil {
				t.Fatal(err)
			}
		}
		good = content(i)
		testcp.WriteFile(t, cp.File, good)
		want := sortedAddrs(allBut(backends, i))
		testcp.WaitFor(t, 5*time.Second, f.name+": the good file to be published", func() bool {
			return slices.Equal(publishedAddrs(cp), want) && len(sourceProblems(cp)) == 0
		})
		if got := servedVersions(t, ads); got == versions {
			t.Errorf("%s: a new client is served versions %s after the good file, as before the fault", f.name, got)
		}
		if n := metricValue(t, cp, "ringxds_source_problems", problemsGauge); n != 0 {
			t.Errorf("%s: ringxds_source_problems = %v after the good file, want 0", f.name, n)
		}
		routed = sw.agreed(f.name + ": after the good file")
		for _, be := range routed {
			if be == backends[i%len(backends)].Addr {
				t.Fatalf("%s: a key still goes to %s, which the good file left out", f.name, be)
			}
		}
	}
	calls, err := background()
	t.Logf("%d faults, each served through with the last good state and followed by its fix; %d background RPCs", len(fileFaults), calls)
	if err != nil {
		t.Fatalf("an RPC failed during the faults: %v", err)
	}
}

// stalledYAML is the products cluster over every backend but
// backends[i%len], its minimum ring size alternating, and a bulk cluster
// whose first port is 9000+i: every i is a change to both, to the products
// Cluster too (so a push may wait for the streams holding it, order.go),
// and the bulk cluster's ClusterLoadAssignment, 900 endpoints with long
// zones, is larger than a 64 KiB flow-control window.
func stalledYAML(backends []*testcp.Backend, i int) string {
	var b strings.Builder
	ring := fmt.Sprintf("    minimum_ring_size: %d\n", 1024<<(i%2))
	b.WriteString(endpointsYAML("products", "ring_hash", "x-product-id", ring, allBut(backends, i), nil))
	b.WriteString("  - name: bulk\n    lb_policy: ring_hash\n    hash_header: x-bulk\n    endpoints:\n")
	zone := strings.Repeat("z", 160)
	for j := range 900 {
		port := 8080
		if j == 0 {
			port = 9000 + i
		}
		fmt.Fprintf(&b, "      - {address: 10.1.%d.%d, port: %d, zone: %s-%03d}\n", j/250, j%250+1, port, zone, j)
	}
	return b.String()
}

// stalledConn dials the xDS server with HTTP/2 windows fixed at 64 KiB:
// grpc-go otherwise grows them as data arrives, and a client that stops
// reading its stream would buffer whatever the server sent.
func stalledConn(t *testing.T, addr string) discovery.AggregatedDiscoveryServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return discovery.NewAggregatedDiscoveryServiceClient(cc)
}

// stallClients opens two Envoy streams, SotW and delta, that subscribe to
// both clusters' endpoints and to every cluster and then never read again.
// The ClusterLoadAssignments come first, so the server's second send to
// each stream waits on a window the client never opens. It returns the
// SotW stream, to read it again later, and a function that ends it.
func stallClients(t *testing.T, ctx context.Context, addr string) (discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, func()) {
	t.Helper()
	names := []string{"bulk", "products"}
	sotwCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	sotw, err := stalledConn(t, addr).StreamAggregatedResources(sotwCtx)
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []*discovery.DiscoveryRequest{
		{Node: node("stalled-sotw", "envoy"), TypeUrl: resource.EndpointType, ResourceNames: names},
		{TypeUrl: resource.ClusterType},
	} {
		if err := sotw.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	delta, err := stalledConn(t, addr).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []*discovery.DeltaDiscoveryRequest{
		{Node: node("stalled-delta", "envoy"), TypeUrl: resource.EndpointType, ResourceNamesSubscribe: names},
		{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"*"}},
	} {
		if err := delta.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	return sotw, stop
}

// blockedSends counts the xDS streams whose handler waits for grpc-go's
// flow-control quota to send a response: the stalled streams, once the
// window they never open is full.
func blockedSends() int {
	buf := make([]byte, 16<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*writeQuota).get") && strings.Contains(g, "go-control-plane") {
			n++
		}
	}
	return n
}

// heapInUse is the process's live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// changeRouted writes content, in which products is served by every
// backend but backends[i%len], waits for the server to publish it and for
// the client to route every probe key where /debug/pick then says, and
// returns how long that took from the write.
func changeRouted(t *testing.T, cp *testcp.ControlPlane, route func(string) (string, error), probes []string, content string, backends []*testcp.Backend, i int) time.Duration {
	t.Helper()
	from := time.Now()
	testcp.WriteFile(t, cp.File, content)
	want := sortedAddrs(allBut(backends, i))
	when := fmt.Sprintf("change %d", i)
	testcp.WaitFor(t, 10*time.Second, when+" to be published", func() bool {
		return slices.Equal(publishedAddrs(cp), want)
	})
	return routedTo(t, cp, route, probes, from, when)
}

// routedTo waits until client routes every probe key where /debug/pick
// says of the published snapshot, and returns how long that took since
// from.
func routedTo(t *testing.T, cp *testcp.ControlPlane, route func(string) (string, error), probes []string, from time.Time, when string) time.Duration {
	t.Helper()
	want := make([]string, len(probes))
	for i, key := range probes {
		want[i] = cp.Pick("products", key, "grpc").Endpoint
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		agreed := true
		for i, key := range probes {
			be, err := route(key)
			if err != nil {
				t.Fatalf("%s: RPC for %s: %v", when, key, err)
			}
			if be != want[i] {
				agreed = false
				break
			}
		}
		if agreed {
			return time.Since(from)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: grpc-go does not route as /debug/pick says after %v", when, time.Since(from))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFaultStalledClientDoesNotHoldOthersBack connects two Envoy streams
// (SotW and delta) that subscribe to everything and then stop reading,
// with the server's send to each waiting on a window they never open, and
// makes 15 changes with grpc-go's own xDS client routing. Every change
// reaches grpc-go within a bounded time, and no push is held for the
// stalled streams (ringxds_xds_cluster_wait_timeouts_total stays 0). The
// server queues nothing more for them: the bytes it sent to Envoy streams
// stay what their subscriptions were first answered with, and its
// goroutines and heap do not grow with the changes. When the SotW stream
// reads and answers again, it gets the last change.
func TestFaultStalledClientDoesNotHoldOthersBack(t *testing.T) {
	backends := testcp.StartBackends(t, 5)
	cp := testcp.Start(t, testcp.TempFile(t, stalledYAML(backends, 0)))
	client := dialXDS(t, cp.XDSAddr, "products")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	route := func(key string) (string, error) { return testcp.Call(ctx, client, "x-product-id", key) }
	sw := newSweeper(t, cp, route, 200)
	probes := keyList(20)
	sw.agreed("before the stall")
	change := func(i int) time.Duration {
		t.Helper()
		return changeRouted(t, cp, route, probes, stalledYAML(backends, i), backends, i)
	}
	var baseline []time.Duration
	for i := 1; i <= 3; i++ {
		baseline = append(baseline, change(i))
	}

	stalled, stopStalled := stallClients(t, ctx, cp.XDSAddr)
	envoyEDS := map[string]string{"kind": "envoy", "type": "eds"}
	envoyAll := map[string]string{"kind": "envoy"}
	testcp.WaitFor(t, 5*time.Second, "the server's sends to the stalled streams to block", func() bool {
		return metricValue(t, cp, "ringxds_xds_bytes_sent_total", envoyEDS) > 2*(64<<10) && blockedSends() >= 2
	})
	// Past the 100 ms in which a stream counts as answering quickly.
	time.Sleep(300 * time.Millisecond)
	sent := sumMetric(t, cp, "ringxds_xds_bytes_sent_total", envoyAll)
	var latencies []time.Duration
	var goroutines int
	var heap uint64
	for i := 4; i <= 18; i++ {
		latencies = append(latencies, change(i))
		if i == 8 {
			goroutines, heap = runtime.NumGoroutine(), heapInUse()
		}
	}
	moreGoroutines, moreHeap := runtime.NumGoroutine()-goroutines, int64(heapInUse())-int64(heap)
	slices.Sort(baseline)
	slices.Sort(latencies)
	t.Logf("change to grpc-go routing (at most; this includes reading /debug/pick): median %v, max %v with two stalled streams (median %v, max %v before them); %.0f bytes sent to the stalled streams, from 10 changes on %+d goroutines and %+.1f MiB of heap",
		latencies[len(latencies)/2], latencies[len(latencies)-1], baseline[len(baseline)/2], baseline[len(baseline)-1],
		sent, moreGoroutines, float64(moreHeap)/(1<<20))
	if worst := latencies[len(latencies)-1]; worst > 5*time.Second {
		t.Errorf("a change took %v to reach grpc-go with stalled streams connected", worst)
	}
	if n := metricValue(t, cp, "ringxds_xds_cluster_wait_timeouts_total", nil); n != 0 {
		t.Errorf("pushes waited for the stalled streams %v times", n)
	}
	if now := sumMetric(t, cp, "ringxds_xds_bytes_sent_total", envoyAll); now != sent {
		t.Errorf("the server sent the stalled streams %.0f more bytes over 15 changes", now-sent)
	}
	if moreGoroutines > 10 || moreHeap > 8<<20 {
		t.Errorf("over 10 changes the process gained %d goroutines and %.1f MiB of heap", moreGoroutines, float64(moreHeap)/(1<<20))
	}
	catchUp(t, stalled, stopStalled, 9018)
}

// catchUp reads the stalled SotW stream again, answering each response,
// until its bulk ClusterLoadAssignment has the last change's port, within
// 10 s (stop ends the stream).
func catchUp(t *testing.T, st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, stop func(), port uint32) {
	t.Helper()
	deadline := time.AfterFunc(10*time.Second, stop)
	defer deadline.Stop()
	for {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("the stalled stream, reading again, did not get the last change: %v", err)
		}
		var names []string
		if resp.GetTypeUrl() == resource.EndpointType {
			names = []string{"bulk", "products"}
			for _, a := range resp.GetResources() {
				cla := &endpointv3.ClusterLoadAssignment{}
				if err := a.UnmarshalTo(cla); err != nil {
					t.Fatal(err)
				}
				if cla.GetClusterName() == "bulk" && hasPort(cla, port) {
					return
				}
			}
		}
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResourceNames: names, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
}

// hasPort reports whether an endpoint of cla listens on port.
func hasPort(cla *endpointv3.ClusterLoadAssignment, port uint32) bool {
	for _, le := range cla.GetEndpoints() {
		for _, ep := range le.GetLbEndpoints() {
			if ep.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue() == port {
				return true
			}
		}
	}
	return false
}

// sumMetric sums the series of a counter whose labels include labels.
func sumMetric(t *testing.T, cp *testcp.ControlPlane, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := cp.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// nacker is a raw ADS client, built from go-control-plane's discovery
// protos, that subscribes to every cluster and the products endpoints and
// rejects every response. It records the version of products in each
// response, per type.
type nacker struct {
	mu  sync.Mutex
	got map[string][]string
}

func (n *nacker) record(typeURL, version string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got[typeURL] = append(n.got[typeURL], version)
}

// versions returns the versions received of one type, in order.
func (n *nacker) versions(typeURL string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.got[typeURL])
}

const nackMessage = "products: unsupported load balancing policy (fault test)"

// startSotWNacker runs a SotW nacker until ctx ends. It keeps no version,
// so each NACK says it holds none, as a client that never accepted one
// does.
func startSotWNacker(t *testing.T, ctx context.Context, ads discovery.AggregatedDiscoveryServiceClient, id string) *nacker {
	t.Helper()
	st, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string][]string{resource.ClusterType: nil, resource.EndpointType: {"products"}}
	for i, typeURL := range []string{resource.ClusterType, resource.EndpointType} {
		req := &discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names[typeURL]}
		if i == 0 {
			req.Node = node(id, "envoy")
		}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	n := &nacker{got: map[string][]string{}}
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				return
			}
			n.record(resp.GetTypeUrl(), resp.GetVersionInfo())
			_ = st.Send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResourceNames: names[resp.GetTypeUrl()],
				ResponseNonce: resp.GetNonce(), ErrorDetail: &status.Status{Code: int32(codes.InvalidArgument), Message: nackMessage}})
		}
	}()
	return n
}

// startDeltaNacker runs a delta nacker until ctx ends.
func startDeltaNacker(t *testing.T, ctx context.Context, ads discovery.AggregatedDiscoveryServiceClient, id string) *nacker {
	t.Helper()
	st, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, req := range []*discovery.DeltaDiscoveryRequest{
		{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"*"}},
		{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{"products"}},
	} {
		if i == 0 {
			req.Node = node(id, "envoy")
		}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	n := &nacker{got: map[string][]string{}}
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				return
			}
			version := "(no products)"
			for _, r := range resp.GetResources() {
				if r.GetName() == "products" {
					version = r.GetVersion()
				}
			}
			n.record(resp.GetTypeUrl(), version)
			_ = st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce(), ErrorDetail: &status.Status{Code: int32(codes.InvalidArgument), Message: nackMessage}})
		}
	}()
	return n
}

// nackYAML is products over every backend but backends[i%len], with its
// minimum ring size alternating, so that every i changes both its Cluster
// and its ClusterLoadAssignment.
func nackYAML(backends []*testcp.Backend, i int) string {
	return endpointsYAML("products", "ring_hash", "x-product-id", fmt.Sprintf("    minimum_ring_size: %d\n", 1024<<(i%2)), allBut(backends, i), nil)
}

// TestFaultNackingClientIsNotResentTo connects two Envoy streams, SotW and
// delta, that reject every response, next to grpc-go's own xDS client,
// and makes five changes to the products Cluster and endpoints. The
// server does not resend what was rejected: each rejecting stream gets
// exactly one response per type at the start and one per change, each
// with a new version, the last one the version published. grpc-go
// routes every change as /debug/pick says. /debug/clients counts each
// stream's NACKs per type with the client's message, and
// ringxds_xds_nacks_total counts them all.
func TestFaultNackingClientIsNotResentTo(t *testing.T) {
	backends := testcp.StartBackends(t, 5)
	cp := testcp.Start(t, testcp.TempFile(t, nackYAML(backends, 0)))
	client := dialXDS(t, cp.XDSAddr, "products")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	route := func(key string) (string, error) { return testcp.Call(ctx, client, "x-product-id", key) }
	sw := newSweeper(t, cp, route, 200)
	sw.agreed("before the NACKs")
	ads := adsClient(t, cp.XDSAddr)
	nackers := map[string]*nacker{
		"sotw":  startSotWNacker(t, ctx, ads, "nacker-sotw"),
		"delta": startDeltaNacker(t, ctx, ads, "nacker-delta"),
	}
	types := []string{resource.ClusterType, resource.EndpointType}
	// answered waits until every nacker has received want responses of
	// each type, then for a quiet second in which no more arrive.
	answered := func(want int, when string) {
		t.Helper()
		testcp.WaitFor(t, 10*time.Second, when, func() bool {
			for _, n := range nackers {
				for _, typeURL := range types {
					if len(n.versions(typeURL)) < want {
						return false
					}
				}
			}
			return true
		})
		time.Sleep(time.Second)
		for proto, n := range nackers {
			for _, typeURL := range types {
				if got := n.versions(typeURL); len(got) != want {
					t.Fatalf("%s: the %s nacker got %d %s responses, want %d (the first: %v)", when, proto, len(got), shortTypeName(typeURL), want, got[:min(len(got), 5)])
				}
			}
		}
	}
	answered(1, "the first responses")
	probes := keyList(50)
	const changes = 5
	for i := 1; i <= changes; i++ {
		took := changeRouted(t, cp, route, probes, nackYAML(backends, i), backends, i)
		answered(i+1, fmt.Sprintf("change %d offered once", i))
		t.Logf("change %d: grpc-go routed it after %v; each nacker was offered it once", i, took)
	}
	checkNackerVersions(t, ctx, ads, nackers)
	checkNacksShown(t, cp, changes+1)
}

// shortTypeName is cds, eds, lds or rds.
func shortTypeName(typeURL string) string {
	return map[string]string{resource.ClusterType: "cds", resource.EndpointType: "eds", resource.ListenerType: "lds", resource.RouteType: "rds"}[typeURL]
}

// checkNackerVersions checks that each nacker's versions changed with
// every response and that the last is the one a client connecting now is
// sent.
func checkNackerVersions(t *testing.T, ctx context.Context, ads discovery.AggregatedDiscoveryServiceClient, nackers map[string]*nacker) {
	t.Helper()
	for proto, n := range nackers {
		for _, typeURL := range []string{resource.ClusterType, resource.EndpointType} {
			got := n.versions(typeURL)
			for i := 1; i < len(got); i++ {
				if got[i] == got[i-1] {
					t.Errorf("%s %s: version %s was offered twice in a row", proto, shortTypeName(typeURL), got[i])
				}
			}
			names := map[string][]string{resource.ClusterType: nil, resource.EndpointType: {"products"}}[typeURL]
			var want string
			if proto == "sotw" {
				want = sotwFetch(t, ctx, ads, node("nack-probe", "envoy"), typeURL, names).GetVersionInfo()
			} else {
				for _, r := range deltaFetch(t, ctx, ads, node("nack-probe", "envoy"), typeURL, append(names, "*")[:max(len(names), 1)]).GetResources() {
					if r.GetName() == "products" {
						want = r.GetVersion()
					}
				}
			}
			if got[len(got)-1] != want {
				t.Errorf("%s %s: the last version offered is %s, the published one %s", proto, shortTypeName(typeURL), got[len(got)-1], want)
			}
		}
	}
}

// checkNacksShown checks /debug/clients and ringxds_xds_nacks_total:
// each nacker rejected want responses of each type.
func checkNacksShown(t *testing.T, cp *testcp.ControlPlane, want int) {
	t.Helper()
	var body struct {
		Clients []server.ClientStatus `json:"clients"`
	}
	cp.GetJSON("/debug/clients", &body)
	seen := 0
	for _, c := range body.Clients {
		if !strings.HasPrefix(c.NodeID, "nacker-") {
			continue
		}
		seen++
		for _, typ := range []string{"cds", "eds"} {
			ts := c.Types[typ]
			if ts == nil || ts.Nacks != want || ts.LastNack == nil || ts.LastNack.Message != nackMessage || ts.AckedVersion != "" {
				t.Errorf("/debug/clients, %s %s: %+v, want %d NACKs, the last one's message, nothing accepted", c.NodeID, typ, ts, want)
			}
		}
	}
	if seen != 2 {
		t.Errorf("/debug/clients shows %d nackers, want 2", seen)
	}
	for _, typ := range []string{"cds", "eds"} {
		if n := metricValue(t, cp, "ringxds_xds_nacks_total", map[string]string{"kind": "envoy", "type": typ}); n != float64(2*want) {
			t.Errorf("ringxds_xds_nacks_total{kind=envoy,type=%s} = %v, want %d", typ, n, 2*want)
		}
	}
}

// TestFaultClockStepsDuringAFade steps the server's clock while a new
// backend fades into a ring_hash cluster (10 -> 11, 8 s linear fade), with
// grpc-go's own xDS client routing 1000 keys: back an hour, forward again,
// forward an hour, and back into the fade window with an input change.
// Through all of it the server publishes no earlier step than one it has
// published, so no key goes back from the new backend to an old one and
// none moves between old ones; it rebuilds a bounded number of times; and
// every published state is one the client routes exactly as /debug/pick
// says. The fade resumes within a second of the clock coming back, and
// ends at once when the clock passes its end.
func TestFaultClockStepsDuringAFade(t *testing.T) {
	const fade = "    fade_in: {duration: 8s, exponent: 1}\n"
	curve := fadein.Curve{Duration: 8 * time.Second, Exponent: 1}
	backends := testcp.StartBackends(t, 11)
	yaml := func(bs []*testcp.Backend) string {
		return endpointsYAML("products", "ring_hash", "x-product-id", fade, bs, nil)
	}
	clk := &clock{}
	cp := testcp.Start(t, testcp.TempFile(t, yaml(backends[:10])), testcp.WithClock(clk.Now))
	client := dialXDS(t, cp.XDSAddr, "products")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	route := func(key string) (string, error) { return testcp.Call(ctx, client, "x-product-id", key) }
	const keys = 1000
	sw := newSweeper(t, cp, route, keys)
	// Only one state was ever published: wherever keys go is it.
	before := sw.routes()
	builtBefore := builds(t, cp)

	testcp.WriteFile(t, cp.File, yaml(backends))
	var start time.Time
	testcp.WaitFor(t, 5*time.Second, "the new backend to fade in", func() bool {
		if st := cp.Server.Current().Fading["products"]; len(st) == 1 {
			start = st[0].Start
			return true
		}
		return false
	})
	newAddr := backends[10].Addr
	isNew := func(be string) bool { return be == newAddr }
	share := func() float64 {
		if st := cp.Server.Current().Fading["products"]; len(st) == 1 {
			return st[0].Share
		}
		return 1
	}
	// holdAt sets the clock and waits for the server to publish the step
	// the curve gives at it.
	holdAt := func(what string, at time.Time) {
		t.Helper()
		clk.Set(at)
		want := curve.Share(fadein.StepTime(at).Sub(start))
		testcp.WaitFor(t, 5*time.Second, what, func() bool { return share() == want })
	}
	// stepTo sets the clock, lets every step timer armed before it fire
	// (they are at most a second apart), and returns the builds meanwhile.
	stepTo := func(at time.Time) uint64 {
		t.Helper()
		b := builds(t, cp)
		clk.Set(at)
		time.Sleep(fadein.StepInterval + 500*time.Millisecond)
		return builds(t, cp) - b
	}

	holdAt("the step at 2.5 s", start.Add(2500*time.Millisecond))
	heldShare := share()
	mid := sw.agreed("held at 2.5 s")
	onMid := newOnly(t, "held at 2.5 s", before, mid, isNew)[newAddr]
	if onMid == 0 {
		t.Fatalf("no key on the new backend at share %.2f: nothing could go back", heldShare)
	}

	backBuilds := stepTo(start.Add(2500*time.Millisecond - time.Hour))
	if got := share(); got != heldShare {
		t.Errorf("an hour back: the published share went from %.3f to %.3f", heldShare, got)
	}
	back := sw.agreed("an hour back")
	newOnly(t, "an hour back", mid, back, isNew)

	holdAt("the fade to resume once the clock is back", start.Add(4500*time.Millisecond))
	resumed := sw.agreed("clock back at 4.5 s")
	newOnly(t, "clock back at 4.5 s", back, resumed, isNew)

	holdAt("the fade to end an hour ahead", start.Add(time.Hour+4500*time.Millisecond))
	done := sw.agreed("an hour ahead")
	newOnly(t, "an hour ahead", resumed, done, isNew)
	onDone := newOnly(t, "over the fade", before, done, isNew)[newAddr]

	// Back into the fade window, and the cluster changes (a zone is
	// metadata only): it is rebuilt, but not at the earlier step.
	intoBuilds := stepTo(start.Add(5500 * time.Millisecond))
	testcp.WriteFile(t, cp.File, strings.Replace(yaml(backends), "weight: 1}", "weight: 1, zone: zone-b}", 1))
	testcp.WaitFor(t, 5*time.Second, "the zone change to be published", func() bool {
		c, _ := cp.Server.Current().State.Cluster("products")
		return c.Endpoints[0].Zone == "zone-b"
	})
	if got := share(); got != 1 {
		t.Errorf("back into the fade window: the published share went from 1 to %.3f", got)
	}
	after := sw.agreed("back into the fade window")
	for key, be := range done {
		if after[key] != be {
			t.Fatalf("back into the fade window: key %s moved from %s to %s", key, be, after[key])
		}
	}
	total := builds(t, cp) - builtBefore
	t.Logf("held share %.3f (%d keys on the new backend), %d after; builds: %d in the 1.5 s after a step back of an hour, %d after the step back into the window, %d over the whole test",
		heldShare, onMid, onDone, backBuilds, intoBuilds, total)
	if backBuilds > 3 || intoBuilds > 3 {
		t.Errorf("builds after a step back: %d and %d, want at most 3 each", backBuilds, intoBuilds)
	}
}

// configMapVolume emulates how the kubelet updates a mounted ConfigMap
// (its AtomicWriter): each version is written to a new timestamped
// directory, a ..data_tmp symlink to it is renamed over ..data, and the
// previous directory is removed. The file the server reads,
// endpoints.yaml, is a symlink to ..data/endpoints.yaml and itself never
// changes.
type configMapVolume struct {
	dir, current string
	n            int
}

func newConfigMapVolume(t *testing.T, content string) *configMapVolume {
	t.Helper()
	v := &configMapVolume{dir: t.TempDir()}
	v.swap(t, content)
	if err := os.Symlink(filepath.Join("..data", "endpoints.yaml"), v.file()); err != nil {
		t.Fatal(err)
	}
	return v
}

// file is the path the server is given.
func (v *configMapVolume) file() string { return filepath.Join(v.dir, "endpoints.yaml") }

func (v *configMapVolume) swap(t *testing.T, content string) {
	t.Helper()
	v.n++
	ts := fmt.Sprintf("..%s.%09d", time.Now().UTC().Format("2006_01_02_15_04_05"), v.n)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v.dir, ts, "endpoints.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if v.current != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, v.current)); err != nil {
			t.Fatal(err)
		}
	}
	v.current = ts
}

// swapYAML is version v of the ConfigMap: products over every backend but
// backends[v%len], each endpoint tagged with zone (metadata only, so it
// names the version without moving keys).
func swapYAML(backends []*testcp.Backend, v int, zone string) string {
	return strings.ReplaceAll(endpointsYAML("products", "ring_hash", "x-product-id", "", allBut(backends, v), nil), "weight: 1}", "weight: 1, zone: "+zone+"}")
}

// badSwapYAML is an invalid version v, in one of four ways; whatever of
// it might get through carries a zone no valid version has.
func badSwapYAML(backends []*testcp.Backend, v int) string {
	good := swapYAML(backends, v, fmt.Sprintf("bad-%03d", v))
	lines := strings.SplitAfter(good, "\n")
	switch v % 4 {
	case 0: // a port out of range
		return strings.Replace(good, "port: ", "port: 7", 1)
	case 1: // cut mid-line
		return good[:strings.LastIndex(good, "port:")+3]
	case 2: // emptied
		return ""
	default: // an endpoint listed twice
		return good + lines[len(lines)-2]
	}
}

// appliedLog records what the server applied, in order.
type appliedLog struct {
	mu     sync.Mutex
	states []model.State
}

func (l *appliedLog) add(st model.State) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.states = append(l.states, st)
}

func (l *appliedLog) all() []model.State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.states)
}

// swapVersion reads the version a published state says it is: the zone
// its endpoints all carry, "v017" for version 17; -1 and a reason if it
// is none.
func swapVersion(st model.State, backends []*testcp.Backend) (int, string) {
	c, ok := st.Cluster("products")
	if !ok || len(c.Endpoints) == 0 {
		return -1, "no products endpoints"
	}
	var v int
	if _, err := fmt.Sscanf(c.Endpoints[0].Zone, "v%03d", &v); err != nil {
		return -1, fmt.Sprintf("zone %q", c.Endpoints[0].Zone)
	}
	want := sortedAddrs(allBut(backends, v))
	var got []string
	for _, ep := range c.Endpoints {
		if ep.Zone != c.Endpoints[0].Zone {
			return -1, fmt.Sprintf("zones %q and %q", c.Endpoints[0].Zone, ep.Zone)
		}
		got = append(got, ep.HostPort())
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		return -1, fmt.Sprintf("version %d with endpoints %v, want %v", v, got, want)
	}
	return v, ""
}

// TestFaultConfigMapSwapBurst swaps a ConfigMap volume's content 50 times
// in under a second, as the kubelet does (a ..data symlink renamed over),
// 11 of the versions invalid in one of four ways (each read at least
// once), including the one before the last, while grpc-go's own xDS
// client routes keyed RPCs.
// Every state the server applies is one of the valid versions, whole, in
// increasing order (no version goes backwards), and the last is the final
// version (no lost update); grpc-go then routes as /debug/pick says, no
// problem is left, and no RPC failed.
func TestFaultConfigMapSwapBurst(t *testing.T) {
	backends := testcp.StartBackends(t, 5)
	vol := newConfigMapVolume(t, swapYAML(backends, 0, "v000"))
	applied := &appliedLog{}
	cp := testcp.Start(t, vol.file(), testcp.WithApplied(applied.add))
	client := dialXDS(t, cp.XDSAddr, "products")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	route := func(key string) (string, error) { return testcp.Call(ctx, client, "x-product-id", key) }
	sw := newSweeper(t, cp, route, 200)
	sw.agreed("before the swaps")
	background := keepRouting(t, client, 200)

	const swaps = 50
	rejectedLabels := map[string]string{"source": "file", "result": "error"}
	rng := rand.New(rand.NewPCG(18, 5))
	start, bad := time.Now(), 0
	for v := 1; v <= swaps; v++ {
		if v%5 != 2 && v != swaps-1 {
			vol.swap(t, swapYAML(backends, v, fmt.Sprintf("v%03d", v)))
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			continue
		}
		rejected := metricValue(t, cp, "ringxds_source_reloads_total", rejectedLabels)
		vol.swap(t, badSwapYAML(backends, v))
		bad++
		if bad <= 4 {
			// Each of the four kinds is read once for sure; the rest
			// may be swapped away before the source reads them.
			testcp.WaitFor(t, 5*time.Second, fmt.Sprintf("invalid version %d to be rejected", v), func() bool {
				return metricValue(t, cp, "ringxds_source_reloads_total", rejectedLabels) > rejected
			})
		}
	}
	burst := time.Since(start)
	testcp.WaitFor(t, 10*time.Second, "the last version to be published", func() bool {
		v, _ := swapVersion(cp.Server.Current().State, backends)
		return v == swaps
	})
	if ps := sourceProblems(cp); len(ps) != 0 {
		t.Errorf("problems left after a valid last version: %+v", ps)
	}
	sw.agreed("after the swaps")

	var seen []int
	for _, st := range applied.all() {
		v, why := swapVersion(st, backends)
		if v < 0 {
			t.Fatalf("the server applied a state that is no valid version: %s", why)
		}
		if len(seen) > 0 && v <= seen[len(seen)-1] {
			t.Fatalf("the server applied version %d after %d", v, seen[len(seen)-1])
		}
		seen = append(seen, v)
	}
	if len(seen) == 0 || seen[len(seen)-1] != swaps {
		t.Fatalf("the server applied versions %v, want the last to be %d", seen, swaps)
	}
	calls, err := background()
	t.Logf("%d swaps (%d invalid) in %v; the server applied versions %v; reloads: %v ok, %v rejected; %d background RPCs",
		swaps, bad, burst.Round(time.Millisecond), seen,
		metricValue(t, cp, "ringxds_source_reloads_total", map[string]string{"source": "file", "result": "ok"}),
		metricValue(t, cp, "ringxds_source_reloads_total", rejectedLabels), calls)
	if err != nil {
		t.Fatalf("an RPC failed during the swaps: %v", err)
	}
}
