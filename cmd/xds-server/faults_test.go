package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringxds/ringxds/clientlib"
	"github.com/ringxds/ringxds/internal/kubetest"
	"github.com/ringxds/ringxds/internal/testcp"
)

// The process-level rows of the fault matrix: what clients see when a
// process they depend on dies. Each test states its promise above it.

// router routes a key through one real client and names the endpoint that
// took it.
type router struct {
	name  string
	route func(key string) (string, error)
}

// routeSteadily routes every key through every router, round after round,
// for d: each call must succeed and reach the endpoint want names for its
// router. It adds the calls made to calls, by router.
func routeSteadily(t *testing.T, d time.Duration, why string, keys []string, routers []router, want map[string]map[string]string, calls map[string]int) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		for _, r := range routers {
			got, err := routeAll(keys, r.route)
			calls[r.name] += len(keys)
			if err != nil {
				t.Fatalf("%s: %s failed to route: %v", why, r.name, err)
			}
			if n, diff := differences(want[r.name], got); n > 0 {
				t.Fatalf("%s: %s routed %d keys elsewhere:%s", why, r.name, n, diff)
			}
		}
	}
}

// converge routes every key through each router until all reach the
// endpoint want names for it, and returns, by router, how long after since
// that happened. Every call must succeed meanwhile, and a key never goes
// back to its old endpoint once it has reached its new one: a client's
// state only moves forward.
func converge(t *testing.T, routers []router, keys []string, old, want map[string]map[string]string, since time.Time, within time.Duration) map[string]time.Duration {
	t.Helper()
	took := map[string]time.Duration{}
	arrived := map[string]bool{} // router + key
	for len(took) < len(routers) {
		for _, r := range routers {
			if _, done := took[r.name]; done {
				continue
			}
			got, err := routeAll(keys, r.route)
			if err != nil {
				t.Fatalf("%s: calls failed while converging: %v", r.name, err)
			}
			for k, ep := range got {
				switch {
				case ep == want[r.name][k]:
					arrived[r.name+" "+k] = true
				case arrived[r.name+" "+k] && ep == old[r.name][k]:
					t.Fatalf("%s: key %s went back to %s after reaching %s", r.name, k, ep, want[r.name][k])
				case ep != old[r.name][k]:
					t.Fatalf("%s: key %s went to %s, neither its old endpoint %s nor its new one %s", r.name, k, ep, old[r.name][k], want[r.name][k])
				}
			}
			n, diff := differences(want[r.name], got)
			switch {
			case n == 0:
				took[r.name] = time.Since(since)
			case time.Since(since) > within:
				t.Fatalf("%s: %d keys still not where the server says %v after it started:%s", r.name, n, within, diff)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return took
}

// The server killed with SIGKILL while clients are connected, and its file
// changed while it is down: clients keep routing every key to the same
// backend through the outage, and once the server is back on the same
// address they converge to the new file (no lost update) and hold the
// resources and versions a fresh server sends for that file (no version
// from before the change comes back).
func TestFaultServerKilledAndRestarted(t *testing.T) {
	cluster, header := faultCluster, faultHeader
	backends := testcp.StartBackends(t, 4)
	// The removed backend keeps running, so that a client still routing
	// by the old file is seen doing so rather than failing over.
	before := testcp.ClusterYAML(cluster, "ring_hash", header, "", testcp.Addrs(backends[:3]), nil)
	after := testcp.ClusterYAML(cluster, "ring_hash", header, "", testcp.Addrs(backends[1:]), nil)
	file := testcp.TempFile(t, before)
	xdsAddr, debugAddr := freeAddr(t), freeAddr(t)
	args := []string{"--file", file, "--debounce=20ms", "--log-level=warn"}
	srv := startServerProc(t, xdsAddr, debugAddr, args...)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	keys := keysN("user", 200)
	routers := faultClients(t, ctx, xdsAddr, cluster, header, "restarted")
	old := faultPicks(t, srv.debugURL, cluster, keys)
	converge(t, routers, keys, old, old, time.Now(), 20*time.Second)
	preAcked := waitAcked(t, srv.debugURL, 2)
	prePublished := publishedVersions(t, srv.debugURL)

	killedAt := time.Now()
	srv.kill()
	calls := map[string]int{}
	routeSteadily(t, 1500*time.Millisecond, "server killed", keys, routers, old, calls)
	testcp.WriteFile(t, file, after)
	routeSteadily(t, time.Second, "server killed, file changed", keys, routers, old, calls)
	srv = startServerProc(t, xdsAddr, debugAddr, args...)
	readyAt := time.Now()
	down := readyAt.Sub(killedAt)

	want := faultPicks(t, srv.debugURL, cluster, keys)
	for name, w := range want {
		if n, _ := differences(old[name], w); n == 0 || slices.Contains(slices.Collect(maps.Values(w)), backends[0].Addr) {
			t.Fatalf("%s: the changed file moves %d keys and keeps %s; the test needs it to move keys off it", name, n, backends[0].Addr)
		}
	}
	took := converge(t, routers, keys, old, want, readyAt, 30*time.Second)
	checkRestartVersions(t, ctx, srv.debugURL, file, prePublished, preAcked)
	// Converged for good, not for one round.
	routeSteadily(t, 500*time.Millisecond, "after the restart", keys, routers, want, map[string]int{})
	t.Logf("server down (SIGKILL to the restarted server ready) %v; routed during the outage, none failed or moved: %v; converged after the restarted server was ready: %v",
		down.Round(time.Millisecond), calls, took)
}

// The cluster TestFaultServerKilledAndRestarted serves, and its hash
// header.
const faultCluster, faultHeader = "faults", "x-key"

// faultClients connects a proxyless grpc-go client (RPCs to real backends)
// and a clientlib client (picks) to the server at xdsAddr.
func faultClients(t *testing.T, ctx context.Context, xdsAddr, cluster, header, node string) []router {
	t.Helper()
	rc := testgrpc.NewTestServiceClient(testcp.DialXDS(t, xdsAddr, cluster))
	// Without a short backoff clientlib would wait up to 30 s between
	// attempts to reach the restarted server.
	lib, err := clientlib.Dial(ctx, xdsAddr, clientlib.WithInsecure(), clientlib.WithNodeID("faults-"+node),
		clientlib.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lib.Close() })
	bal, err := lib.Balancer(ctx, cluster, clientlib.WithBoundedLoad(false))
	if err != nil {
		t.Fatal(err)
	}
	return []router{
		{"grpc-go", func(k string) (string, error) {
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			defer ccancel()
			return testcp.Call(cctx, rc, header, k)
		}},
		{"clientlib", func(k string) (string, error) {
			ep, err := bal.Pick(k)
			return ep.Addr, err
		}},
	}
}

// faultPicks is where /debug/pick sends each key, for each of faultClients.
func faultPicks(t *testing.T, base, cluster string, keys []string) map[string]map[string]string {
	t.Helper()
	return map[string]map[string]string{
		"grpc-go":   debugPicks(t, base, cluster, "grpc", keys),
		"clientlib": debugPicks(t, base, cluster, "clientlib", keys),
	}
}

// waitAcked waits until n client streams, of n kinds, are on the server
// at base and have acknowledged their last responses, and returns the
// versions by kind and type.
func waitAcked(t *testing.T, base string, n int) map[string]map[string]string {
	t.Helper()
	var acked map[string]map[string]string
	testcp.WaitFor(t, 10*time.Second, "the clients to acknowledge what they were sent", func() bool {
		var ok bool
		acked, ok = ackedVersions(t, base)
		return ok && len(acked) == n
	})
	return acked
}

// checkRestartVersions starts a fresh server on file, with fresh clients,
// and checks that the restarted server at base publishes the same
// resources (content versions) and that its reconnected clients
// acknowledged the same wire versions as the fresh clients did: a
// restart changes nothing a client sees but the change itself, and no
// version from before the change (pre, preAcked) comes back.
func checkRestartVersions(t *testing.T, ctx context.Context, base, file string, pre map[string]string, preAcked map[string]map[string]string) {
	t.Helper()
	lis := &listeners{xds: loopback(t), debug: loopback(t)}
	freshURL := "http://" + lis.debug.Addr().String()
	startRun(t, []string{"--file", file}, lis, freshURL)
	fresh := publishedVersions(t, freshURL)
	if got := publishedVersions(t, base); !maps.Equal(got, fresh) {
		t.Fatalf("the restarted server publishes other resources than a fresh server given the same file:\nrestarted %v\nfresh     %v", got, fresh)
	}
	var changed []string
	for name, v := range fresh {
		if pre[name] != v {
			changed = append(changed, name)
		}
	}
	for _, kind := range []string{"grpc", "clientlib", "envoy"} {
		if name := kind + "/endpoints/" + faultCluster; pre[name] == fresh[name] {
			t.Fatalf("%s has the same version before and after the change (%s): the test changes nothing", name, pre[name])
		}
	}
	t.Logf("resources the file change changed: %s", strings.Join(slices.Sorted(slices.Values(changed)), ", "))

	// grpc-go subscribes on the first RPC.
	keys := keysN("fresh", 20)
	freshPicks := faultPicks(t, freshURL, faultCluster, keys)
	freshClients := faultClients(t, ctx, lis.xds.Addr().String(), faultCluster, faultHeader, "fresh")
	converge(t, freshClients, keys, freshPicks, freshPicks, time.Now(), 20*time.Second)
	freshAcked := waitAcked(t, freshURL, 2)
	acked := waitAcked(t, base, 2)
	for kind, byType := range acked {
		if !maps.Equal(byType, freshAcked[kind]) {
			t.Fatalf("%s acknowledged %v from the restarted server; fresh clients of a fresh server acknowledged %v", kind, byType, freshAcked[kind])
		}
		if byType["eds"] == preAcked[kind]["eds"] {
			t.Fatalf("%s acknowledged EDS version %s after the restart, the version from before the change", kind, byType["eds"])
		}
	}
}

// The Kubernetes API server stopped in the middle of a rollout: the xDS
// server keeps serving the last state it published (nothing withdrawn, no
// push, /readyz still 200: readiness means a snapshot is published, and
// an API outage hits every replica at once), clients keep routing every
// key as before, and once the API server is back the rest of the rollout
// is published in order (no lost update, no step going back) and clients
// converge to it.
func TestFaultAPIServerStoppedMidRollout(t *testing.T) {
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := env.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{"ringxds.io/enabled": "true", "ringxds.io/hash-header": "x-user"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	steps := rolloutSteps()
	slice, err := env.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, steps[0].slice(ns), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	apply := func(ctx context.Context, i int) error {
		next := steps[i].slice(ns)
		next.ResourceVersion = slice.ResourceVersion
		updated, err := env.Client.DiscoveryV1().EndpointSlices(ns).Update(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			slice = updated
		}
		return err
	}

	srv := startServerProc(t, freeAddr(t), freeAddr(t), "--source=kubernetes", "--kubeconfig", env.Kubeconfig(t),
		"--namespace", ns, "--debounce=50ms", "--log-level=warn")
	cluster := "web." + ns
	published := watchPublished(t, srv.debugURL, cluster, steps)
	client := podBackends(t, ctx, srv.xdsAddr, cluster, steps)
	keys := keysN("user", 100)
	routers := []router{client}
	picks := func() map[string]map[string]string {
		return map[string]map[string]string{"grpc-go": debugPicks(t, srv.debugURL, cluster, "grpc", keys)}
	}

	published.waitStep(t, 0, 30*time.Second)
	prev := picks()
	converge(t, routers, keys, prev, prev, time.Now(), 20*time.Second)
	for i := 1; i <= 3; i++ {
		if err := apply(ctx, i); err != nil {
			t.Fatal(err)
		}
		published.waitStep(t, i, 10*time.Second)
		next := picks()
		converge(t, routers, keys, prev, next, time.Now(), 10*time.Second)
		prev = next
	}

	held := holdThroughOutage(t, ctx, env, srv, routers, keys, prev, func(ctx context.Context) error { return apply(ctx, 4) })
	published.check(t)

	// Step 4 is written as soon as the API server answers, before the
	// server's informers can have reconnected.
	var took []time.Duration
	for i := 4; i < len(steps); i++ {
		if err := apply(ctx, i); err != nil {
			t.Fatalf("step %d after the restart: %v", i, err)
		}
		took = append(took, published.waitStep(t, i, 45*time.Second))
		next := picks()
		converge(t, routers, keys, prev, next, time.Now(), 10*time.Second)
		prev = next
	}
	if !srv.running() {
		t.Fatal("xds-server exited")
	}
	t.Logf("%s; after the restart, steps 4 and 5 published %v after they were written; clients converged to each step", held, took)
}

// holdThroughOutage stops the API server for a few seconds, long enough
// for the server's watches to break and its informers to retry, and checks
// meanwhile that the xDS server keeps running, ready and healthy, pushes
// nothing, and counts the failed watches, and that clients keep routing
// each key as want says; that the next write (write) cannot be made; then
// starts the API server again. It returns what it saw.
func holdThroughOutage(t *testing.T, ctx context.Context, env *kubetest.Env, srv *serverProc, routers []router, keys []string, want map[string]map[string]string, write func(context.Context) error) string {
	t.Helper()
	before := waitAcked(t, srv.debugURL, 1)
	stoppedAt := time.Now()
	if err := env.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	err := write(wctx)
	wcancel()
	if err == nil {
		t.Fatal("wrote an EndpointSlice with the API server stopped")
	}
	calls, probes := map[string]int{}, 0
	for time.Since(stoppedAt) < 4*time.Second {
		routeSteadily(t, 200*time.Millisecond, "API server down", keys, routers, want, calls)
		for _, p := range []string{"/readyz", "/healthz"} {
			if code, body := httpGet(srv.debugURL + p); code != http.StatusOK {
				t.Fatalf("API server down: %s answered %d: %s", p, code, body)
			}
		}
		probes++
		if !srv.running() {
			t.Fatal("xds-server exited while the API server was down")
		}
	}
	if after, _ := ackedVersions(t, srv.debugURL); !maps.EqualFunc(before, after, maps.Equal) {
		t.Fatalf("the server pushed while the API server was down: acknowledged %v before, %v after", before, after)
	}
	// The outage must show: the server serves a frozen state meanwhile.
	watchErrors := metricValue(t, srv.debugURL, "ringxds_kube_watch_errors_total")
	if watchErrors == 0 {
		t.Fatal("API server down: ringxds_kube_watch_errors_total is 0")
	}
	restartAt := time.Now()
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("API server down %v (restart took %v); meanwhile %v routed calls, none failed or moved, /readyz and /healthz 200 in %d probes, no push, %v watch errors counted; a write during the outage failed: %v",
		time.Since(stoppedAt).Round(time.Millisecond), time.Since(restartAt).Round(time.Millisecond), calls, probes, watchErrors, err)
}
