package clientlib_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringxds/ringxds/clientlib"
)

// firstAttempts runs calls for keys k-0 .. k-(n-1) through Do at the given
// concurrency, each call an HTTP GET of its endpoint, and returns the
// endpoint of each call's first attempt and how many calls failed in the
// end. sleep is added to every answered call.
func firstAttempts(t *testing.T, b *clientlib.Balancer, n, concurrency int, sleep time.Duration) (map[string]string, int) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 5 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	var mu sync.Mutex
	first := make(map[string]string, n)
	var failed atomic.Int64
	keys := make(chan string)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range keys {
				attempt := 0
				err := b.Do(context.Background(), key, func(ctx context.Context, ep clientlib.Endpoint) error {
					if attempt++; attempt == 1 {
						mu.Lock()
						first[key] = ep.Addr
						mu.Unlock()
					}
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ep.Addr+"/", nil)
					resp, err := hc.Do(req)
					if err != nil {
						return err
					}
					resp.Body.Close()
					time.Sleep(sleep)
					return nil
				})
				if err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	for i := range n {
		keys <- fmt.Sprintf("k-%d", i)
	}
	close(keys)
	wg.Wait()
	return first, int(failed.Load())
}

// owners is the ring owner of each key, from a balancer without bounded
// load on another client.
func owners(t *testing.T, addr, cluster string, n int) map[string]string {
	t.Helper()
	pure := balancer(t, dial(t, addr), cluster, clientlib.WithBoundedLoad(false))
	out := make(map[string]string, n)
	for i := range n {
		key := fmt.Sprintf("k-%d", i)
		ep, err := pure.Pick(key)
		if err != nil {
			t.Fatal(err)
		}
		out[key] = ep.Addr
	}
	return out
}

// A dead endpoint (every connection refused) must not attract traffic:
// it gets at most its own keys' first attempts until the ejection rule
// takes it out, then none; the other endpoints keep their keys.
func TestDeadEndpointIsEjectedNotAttractive(t *testing.T) {
	for _, tc := range []struct {
		name        string
		bounded     bool
		concurrency int
	}{
		{"bounded load off", false, 8},
		{"bounded load on, concurrency 8", true, 8},
		{"bounded load on, concurrency 32", true, 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backends := startBackends(t, 3)
			cp := startControlPlane(t, tempFile(t, clusterYAML("products", "ring_hash", "", backends)), "")
			b := balancer(t, dial(t, cp.XDSAddr), "products", clientlib.WithBoundedLoad(tc.bounded))
			const n = 3000
			owner := owners(t, cp.XDSAddr, "products", n)
			dead := backends[2].addr
			share := 0.0
			for _, o := range owner {
				if o == dead {
					share++
				}
			}
			share /= n
			// The same calls with every endpoint alive: how often bounded
			// load alone moves a key off its owner under this concurrency.
			base, _ := firstAttempts(t, b, n, tc.concurrency, 0)
			baseKept, baseOthers := 0, 0
			for key, ep := range base {
				if owner[key] != dead {
					baseOthers++
					if ep == owner[key] {
						baseKept++
					}
				}
			}
			backends[2].kill()

			first, failed := firstAttempts(t, b, n, tc.concurrency, 0)
			onDead, kept, others := 0, 0, 0
			for key, ep := range first {
				if ep == dead {
					onDead++
				}
				if owner[key] != dead {
					others++
					if ep == owner[key] {
						kept++
					}
				}
			}
			st := b.Stats()
			t.Logf("dead endpoint: ring share %.1f%%, first attempts %d of %d (%.1f%%); ejections %d; others' keys kept by their owner %d/%d (all alive: %d/%d); %d calls failed",
				100*share, onDead, n, 100*float64(onDead)/n, st.Ejections, kept, others, baseKept, baseOthers, failed)
			if st.Ejections == 0 {
				t.Fatalf("the dead endpoint was never ejected: %+v", st)
			}
			// Until ejection (5 consecutive failures, a few more in flight
			// at once) it gets only its own keys; after, none.
			if limit := tc.concurrency + 10; onDead > limit {
				t.Fatalf("%d first attempts on the dead endpoint, want at most %d (its keys until the 5th failure)", onDead, limit)
			}
			// The live endpoints take the dead one's keys too, so bounded
			// load moves a few more of theirs than with all alive.
			if float64(kept)/float64(others) < float64(baseKept)/float64(baseOthers)-0.05 {
				t.Fatalf("%d of %d keys of live endpoints went to their owner first, against %d of %d with every endpoint alive",
					kept, others, baseKept, baseOthers)
			}
			// Only calls whose first attempt met the dead endpoint can fail
			// (when the retry budget is spent).
			if failed > onDead {
				t.Fatalf("%d calls failed, more than the %d that tried the dead endpoint", failed, onDead)
			}
		})
	}
}

// With weights 1:7 and bounded load on, first attempts follow the ring
// shares: the light endpoint is bounded by its own share, not by 1/n.
func TestBoundedLoadFollowsRingShares(t *testing.T) {
	backends := startBackends(t, 2)
	file := clusterYAML("products", "ring_hash", "", backends)
	file = replaceWeights(file, backends, 1, 7)
	cp := startControlPlane(t, tempFile(t, file), "")
	b := balancer(t, dial(t, cp.XDSAddr), "products")
	const n = 4000
	owner := owners(t, cp.XDSAddr, "products", n)
	first, _ := firstAttempts(t, b, n, 16, 2*time.Millisecond)
	var ring, got [2]float64
	kept := 0
	for key, ep := range first {
		for i, be := range backends {
			if owner[key] == be.addr {
				ring[i]++
			}
			if ep == be.addr {
				got[i]++
			}
		}
		if ep == owner[key] {
			kept++
		}
	}
	t.Logf("ring shares %.1f%% / %.1f%%, first attempts %.1f%% / %.1f%%, on owner %d/%d",
		100*ring[0]/n, 100*ring[1]/n, 100*got[0]/n, 100*got[1]/n, kept, n)
	if d := math.Abs(got[0]-ring[0]) / n; d > 0.04 {
		t.Fatalf("first attempts on the light endpoint %.1f%%, ring share %.1f%%: more than 4 points apart", 100*got[0]/n, 100*ring[0]/n)
	}
}

// replaceWeights sets the weights of the backends' lines in a cluster file.
func replaceWeights(file string, backends []*backend, weights ...int) string {
	for i, b := range backends {
		host, port, _ := net.SplitHostPort(b.addr)
		from := fmt.Sprintf("{address: %s, port: %s, weight: 1}", host, port)
		to := fmt.Sprintf("{address: %s, port: %s, weight: %d}", host, port, weights[i])
		file = replaceOnce(file, from, to)
	}
	return file
}

func replaceOnce(s, from, to string) string {
	for i := 0; i+len(from) <= len(s); i++ {
		if s[i:i+len(from)] == from {
			return s[:i] + to + s[i+len(from):]
		}
	}
	return s
}

// During a fade, an established endpoint is bounded by its own (large)
// share, so a key's owner keeps its calls unless it is actually
// overloaded; fading endpoints take only the keys the N-ring gives them.
func TestFadeKeepsKeysOnTheirOwners(t *testing.T) {
	backends := startBackends(t, 6)
	cp := startControlPlane(t, tempFile(t, clusterYAML("products", "skipper", "    fade_in: {duration: 120s}\n", backends[:3])), "")
	b := balancer(t, dial(t, cp.XDSAddr), "products")
	writeFile(t, cp.File, clusterYAML("products", "skipper", "    fade_in: {duration: 120s}\n", backends))
	waitFor(t, 10*time.Second, "the new endpoints to fade in", func() bool { return b.Stats().Fading == 3 })
	const n = 3000
	owner := owners(t, cp.XDSAddr, "products", n)
	first, _ := firstAttempts(t, b, n, 8, time.Millisecond)
	kept := 0
	for key, ep := range first {
		if ep == owner[key] {
			kept++
		}
	}
	t.Logf("mid-fade, %d of %d first attempts on the key's owner", kept, n)
	// Eight calls in flight over three established owners put one over
	// its bound now and then, which bounded load is for; under the race
	// detector that is up to 6% of calls, and on a machine busy with other
	// work (calls slower, more of them in flight) up to 11% was seen.
	// Bounding the heavy owners by the fading endpoints' share instead
	// kept about a third, far below this line.
	if kept < n*80/100 {
		t.Fatalf("only %d of %d calls went to the key's owner mid-fade", kept, n)
	}
}

// A callback that panics (and is recovered, as net/http recovers handler
// panics) must leave nothing in flight and nothing frozen.
func TestPanicInCallbackLeavesNothingInFlight(t *testing.T) {
	backends := startBackends(t, 3)
	cp := startControlPlane(t, tempFile(t, clusterYAML("products", "ring_hash", "", backends)), "")
	b := balancer(t, dial(t, cp.XDSAddr), "products")
	victim, err := b.Pick("key")
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		_ = b.Do(context.Background(), "key", func(context.Context, clientlib.Endpoint) error { panic("handler bug") })
	}()
	time.Sleep(400 * time.Millisecond) // past the freeze threshold
	st := b.Stats()
	if st.InFlight != 0 || st.Frozen != 0 {
		t.Fatalf("after a recovered panic: %d in flight, %d frozen", st.InFlight, st.Frozen)
	}
	hits := 0
	for i := range 300 {
		ep, _ := b.Pick(fmt.Sprintf("p-%d", i))
		if ep.Addr == victim.Addr {
			hits++
		}
	}
	if hits == 0 {
		t.Fatal("the endpoint behind the panic gets no keys")
	}
}

// Errors say why a cluster is not ready, and a closed client or balancer
// says so.
func TestErrorsSayWhy(t *testing.T) {
	backends := startBackends(t, 3)
	cp := startControlPlane(t, tempFile(t, clusterYAML("products", "ring_hash", "", backends)), "")
	c := dial(t, cp.XDSAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := c.Balancer(ctx, "product"); !errors.Is(err, clientlib.ErrNotReady) || !errors.Is(err, clientlib.ErrUnknownCluster) {
		t.Fatalf("a misspelled cluster: %v, want ErrNotReady wrapping ErrUnknownCluster", err)
	}

	dead := listenOn(t, "127.0.0.1:0")
	addr := dead.Addr().String()
	dead.Close()
	nc := dial(t, addr)
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if _, err := nc.Balancer(ctx2, "products"); !errors.Is(err, clientlib.ErrNoServer) {
		t.Fatalf("no server: %v, want ErrNoServer", err)
	}

	b := balancer(t, c, "products")
	if _, err := c.Balancer(context.Background(), "products", clientlib.WithBoundedLoad(false)); !errors.Is(err, clientlib.ErrBalancerOptions) {
		t.Fatalf("options on an existing balancer: %v, want ErrBalancerOptions", err)
	}
	_ = c.Close()
	if _, err := b.Pick("k"); !errors.Is(err, clientlib.ErrClosed) {
		t.Fatalf("Pick after Close: %v", err)
	}
	if err := b.Do(context.Background(), "k", func(context.Context, clientlib.Endpoint) error { return nil }); !errors.Is(err, clientlib.ErrClosed) {
		t.Fatalf("Do after Close: %v", err)
	}
}

// Close unblocks a Balancer call waiting for a cluster that never arrives.
func TestCloseUnblocksBalancer(t *testing.T) {
	backends := startBackends(t, 1)
	cp := startControlPlane(t, tempFile(t, clusterYAML("products", "ring_hash", "", backends)), "")
	c := dial(t, cp.XDSAddr)
	done := make(chan error, 1)
	go func() {
		_, err := c.Balancer(context.Background(), "never")
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	_ = c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, clientlib.ErrClosed) {
			t.Fatalf("Balancer after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Balancer still blocked after Close")
	}
}

// A cluster the server stops publishing keeps its last ring, marked stale.
func TestDeletedClusterIsReportedStale(t *testing.T) {
	backends := startBackends(t, 3)
	cp := startControlPlane(t, tempFile(t, clusterYAML("products", "ring_hash", "", backends)+
		"  - name: other\n    endpoints:\n      - {address: 127.0.0.2, port: 1}\n"), "")
	c := dial(t, cp.XDSAddr)
	b := balancer(t, c, "products")
	balancer(t, c, "other")
	writeFile(t, cp.File, "clusters:\n  - name: other\n    endpoints:\n      - {address: 127.0.0.2, port: 1}\n")
	waitFor(t, 5*time.Second, "products to be stale", func() bool { return !b.Stats().StaleSince.IsZero() })
	if _, err := b.Pick("k"); err != nil {
		t.Fatalf("a stale cluster stops picking: %v", err)
	}
	writeFile(t, cp.File, clusterYAML("products", "ring_hash", "", backends)+"  - name: other\n    endpoints:\n      - {address: 127.0.0.2, port: 1}\n")
	waitFor(t, 5*time.Second, "products to be published again", func() bool { return b.Stats().StaleSince.IsZero() })
}

// The Transport keeps the RoundTripper contract: the body is closed when no
// attempt is made, and idle connections can be closed.
func TestTransportClosesBodyWhenShed(t *testing.T) {
	backends := startBackends(t, 2)
	cp := startControlPlane(t, tempFile(t, clusterYAML("products", "ring_hash", "", backends)), "")
	b := balancer(t, dial(t, cp.XDSAddr), "products", clientlib.WithMaxInFlight(1, 0))
	release := make(chan struct{})
	go func() {
		_ = b.Do(context.Background(), "x", func(context.Context, clientlib.Endpoint) error { <-release; return nil })
	}()
	waitFor(t, 5*time.Second, "the slot to be taken", func() bool { return b.Stats().InFlight == 1 })
	defer close(release)
	body := &trackedBody{}
	req, _ := http.NewRequest(http.MethodPost, "http://products/", body)
	req.Header.Set("X-Key", "k")
	tr := &clientlib.Transport{Balancer: b, Key: clientlib.HeaderKey("X-Key")}
	if _, err := tr.RoundTrip(req); err == nil {
		t.Fatal("a shed request succeeded")
	}
	if !body.closed.Load() {
		t.Fatal("the body of a shed request was not closed")
	}
	tr.CloseIdleConnections() // must not panic, and reaches the base transport
}

type trackedBody struct{ closed atomic.Bool }

func (b *trackedBody) Read([]byte) (int, error) { return 0, errors.New("not read") }
func (b *trackedBody) Close() error             { b.closed.Store(true); return nil }

// Dial, balancers of known and unknown clusters, and Close, fifty times:
// every goroutine they start ends.
func TestNoGoroutineLeaks(t *testing.T) {
	backends := startBackends(t, 3)
	cp := startControlPlane(t, tempFile(t, clusterYAML("products", "ring_hash", "", backends)), "")
	cycle := func() {
		c, err := clientlib.Dial(context.Background(), cp.XDSAddr, clientlib.WithInsecure())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b, err := c.Balancer(ctx, "products")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Do(ctx, "k", func(context.Context, clientlib.Endpoint) error { return nil }); err != nil {
			t.Fatal(err)
		}
		short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancelShort()
		if _, err := c.Balancer(short, fmt.Sprintf("unknown-%d", time.Now().UnixNano())); err == nil {
			t.Fatal("an unknown cluster became ready")
		}
		_ = b.Close()
		_ = c.Close()
	}
	cycle() // warm up what is started once per process
	time.Sleep(200 * time.Millisecond)
	before := runtime.NumGoroutine()
	for range 50 {
		cycle()
	}
	var after int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if after = runtime.NumGoroutine(); after <= before+2 {
			break
		}
	}
	t.Logf("goroutines: %d before 50 cycles, %d after", before, after)
	if after > before+2 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after 50 cycles:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}
