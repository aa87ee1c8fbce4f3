package clientlib_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringxds/ringxds/clientlib"
)

// The product's promise: a key goes to the endpoint /debug/pick names,
// whichever data plane routes it. Here the data plane is clientlib, over
// real HTTP to real backends.
func TestAgreesWithDebugPick(t *testing.T) {
	for _, policy := range []string{"ring_hash", "maglev", "skipper"} {
		t.Run(policy, func(t *testing.T) {
			backends := startBackends(t, 5)
			cp := startControlPlane(t, tempFile(t, clusterYAML("products", policy, "", backends)), "")
			c := dial(t, cp.XDSAddr)
			b := balancer(t, c, "products", clientlib.WithBoundedLoad(false))
			if b.Policy() != policy {
				t.Fatalf("policy %q, want %q", b.Policy(), policy)
			}
			hc := transportClient(b)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			perBackend := map[string]int{}
			for i := range 1000 {
				key := fmt.Sprintf("product-%d", i)
				want := cp.Pick("products", key, "clientlib")
				if want.Policy != policy {
					t.Fatalf("/debug/pick policy %q, want %q", want.Policy, policy)
				}
				ep, err := b.Pick(key)
				if err != nil {
					t.Fatal(err)
				}
				if ep.Addr != want.Endpoint {
					t.Fatalf("key %s: Pick %s, /debug/pick (clientlib) %s", key, ep.Addr, want.Endpoint)
				}
				if policy != "skipper" && want.ByClient["envoy"] != ep.Addr {
					t.Fatalf("key %s: Pick %s, /debug/pick (envoy) %s", key, ep.Addr, want.ByClient["envoy"])
				}
				got, err := get(ctx, hc, key, nil)
				if err != nil {
					t.Fatalf("GET for %s: %v", key, err)
				}
				if got != want.Endpoint {
					t.Fatalf("key %s: answered by %s, /debug/pick says %s", key, got, want.Endpoint)
				}
				perBackend[got]++
			}
			t.Logf("per backend: %v", perBackend)
			if len(perBackend) != len(backends) {
				t.Fatalf("only %d of %d backends received keys", len(perBackend), len(backends))
			}
		})
	}
}

// A backend whose handler blocks must lose its traffic within 500 ms, and
// keys it does not own must not slow down meanwhile. When it answers again
// its keys come back.
func TestFrozenBackendIsWalkedAround(t *testing.T) {
	backends := startBackends(t, 5)
	cp := startControlPlane(t, tempFile(t, clusterYAML("products", "ring_hash", "", backends)), "")
	c := dial(t, cp.XDSAddr)
	b := balancer(t, c, "products", clientlib.WithoutRetry())
	victim := backends[0]

	keys := make([]string, 200)
	owner := map[string]string{}
	for i := range keys {
		keys[i] = fmt.Sprintf("sku-%d", i)
		owner[keys[i]] = cp.Pick("products", keys[i], "clientlib").Endpoint
	}

	type result struct {
		start   time.Time
		key, ep string
		took    time.Duration
		err     error
	}
	// Each call goes to the endpoint Do picked, over a plain client.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(hc.CloseIdleConnections)
	// Open loop: a new call every 500 us whatever the others do, so calls
	// stuck on the frozen backend cannot slow the rest of the load down,
	// as they would with a fixed pool of workers.
	run := func(d time.Duration) []result {
		out := make(chan result, 1<<14)
		tick := time.NewTicker(500 * time.Microsecond)
		defer tick.Stop()
		end := time.Now().Add(d)
		n := 0
		for now := range tick.C {
			if now.After(end) {
				break
			}
			key := keys[n%len(keys)]
			n++
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				start := time.Now()
				var ep string
				err := b.Do(ctx, key, func(ctx context.Context, e clientlib.Endpoint) error {
					ep = e.Addr
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.Addr+"/", nil)
					req.Header.Set("X-Key", key)
					resp, err := hc.Do(req)
					if err != nil {
						return err
					}
					_, err = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					return err
				})
				out <- result{start, key, ep, time.Since(start), err}
			}()
		}
		all := make([]result, 0, n)
		for range n {
			all = append(all, <-out)
		}
		return all
	}

	// Calibrate: the unfrozen p99 of keys the victim does not own.
	before := run(500 * time.Millisecond)

	thaw := victim.freeze()
	frozenAt := time.Now()
	// The stuck calls end at their 3 s timeout, inside run: the thaw
	// comes after.
	during := run(1500 * time.Millisecond)

	p99 := func(rs []result, keep func(result) bool) (time.Duration, int) {
		var ds []time.Duration
		for _, r := range rs {
			if keep(r) {
				ds = append(ds, r.took)
			}
		}
		if len(ds) == 0 {
			return 0, 0
		}
		slicesSort(ds)
		return ds[len(ds)*99/100], len(ds)
	}
	others := func(r result) bool { return owner[r.key] != victim.addr && r.ep != victim.addr }
	p99Before, nBefore := p99(before, others)
	p99During, nDuring := p99(during, others)
	t.Logf("others' p99: %v before (%d calls), %v while frozen (%d calls)", p99Before, nBefore, p99During, nDuring)
	if nDuring == 0 {
		t.Fatal("no calls to other keys during the freeze")
	}
	// Unaffected: well under the frozen calls' seconds, within a loaded
	// two-core machine's scheduling noise of the calibration.
	if limit := max(5*p99Before, 100*time.Millisecond); p99During > limit {
		t.Fatalf("others' p99 while frozen %v > %v (before: %v)", p99During, limit, p99Before)
	}

	var late, victimKeysLate int
	for _, r := range during {
		if r.start.Sub(frozenAt) < 500*time.Millisecond {
			continue
		}
		if owner[r.key] == victim.addr {
			victimKeysLate++
		}
		if r.ep == victim.addr {
			late++
			t.Errorf("call for %s started %v after the freeze went to the frozen backend", r.key, r.start.Sub(frozenAt))
		}
	}
	if victimKeysLate == 0 {
		t.Fatal("no calls for the frozen backend's keys after 500 ms: nothing was tested")
	}
	t.Logf("%d calls for the frozen backend's keys after 500 ms, %d went to it; freezes %d", victimKeysLate, late, b.Stats().Freezes)
	if b.Stats().Freezes == 0 {
		t.Fatal("freeze not counted")
	}

	// Recovery: the frozen calls complete, and the victim's keys return.
	thaw()
	waitFor(t, 3*time.Second, "the thawed backend to receive its keys again", func() bool {
		for _, k := range keys {
			if owner[k] != victim.addr {
				continue
			}
			if ep, _ := b.Pick(k); ep.Addr == victim.addr {
				return true
			}
		}
		return false
	})
}

// Static stability: with the management server gone, picks and calls go
// on from the last good ring; a new server on the same address is picked
// up and its state replaces the old.
func TestServerLossKeepsPickingAndResyncs(t *testing.T) {
	backends := startBackends(t, 6)
	file := tempFile(t, clusterYAML("products", "skipper", "", backends[:5]))
	cp := startControlPlane(t, file, "")
	c := dial(t, cp.XDSAddr)
	b := balancer(t, c, "products", clientlib.WithBoundedLoad(false))
	hc := transportClient(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	want := map[string]string{}
	for i := range 100 {
		key := fmt.Sprintf("k-%d", i)
		want[key] = cp.Pick("products", key, "clientlib").Endpoint
	}

	cp.Stop()
	waitFor(t, 5*time.Second, "the client to notice the server is gone", func() bool { return !c.Connected() })
	for key, ep := range want {
		got, err := b.Pick(key)
		if err != nil || got.Addr != ep {
			t.Fatalf("server down: Pick(%s) = %v, %v; want %s", key, got.Addr, err, ep)
		}
		if _, err := get(ctx, hc, key, nil); err != nil {
			t.Fatalf("server down: GET %s: %v", key, err)
		}
	}

	// A new server on the same address, now with a sixth endpoint.
	writeFile(t, file, clusterYAML("products", "skipper", "", backends))
	cp2 := startControlPlane(t, file, cp.XDSAddr)
	waitFor(t, 10*time.Second, "the client to resync with the new server", func() bool {
		return c.Connected() && len(b.Endpoints()) == 6
	})
	for key := range want {
		got, _ := b.Pick(key)
		if w := cp2.Pick("products", key, "clientlib").Endpoint; got.Addr != w {
			t.Fatalf("after resync: Pick(%s) = %s, /debug/pick says %s", key, got.Addr, w)
		}
	}
}

// A hot key spills over at most MaxWalk endpoints, in ring order from its
// owner: the endpoints beyond the tenth never see it.
func TestHotKeySpillsAtMostTenHops(t *testing.T) {
	// Twenty endpoints: the first ten can take f x 10/20 = 62.5% of the
	// load between them, so a hot key saturates them and the cap binds.
	backends := startBackends(t, 20)
	cp := startControlPlane(t, tempFile(t, clusterYAML("products", "ring_hash", "", backends)), "")
	c := dial(t, cp.XDSAddr)
	b := balancer(t, c, "products", clientlib.WithoutRetry())
	hc := transportClient(b)

	const hot = "product-hot"
	d := decoded(t, cp, "products")
	var order []string
	d.Ring.Walk(ringhashKey(hot), func(i int) bool {
		order = append(order, d.Endpoints[i].Addr)
		return true
	})
	allowed := map[string]bool{}
	for _, a := range order[:clientlib.MaxWalk] {
		allowed[a] = true
	}

	release := make(chan struct{})
	for _, be := range backends {
		be.block.Store(&release)
	}
	const calls = 100
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make(chan error, calls)
	for range calls {
		go func() {
			_, err := get(ctx, hc, hot, map[string][]string{"X-Block": {"1"}})
			errs <- err
		}()
	}
	waitFor(t, 10*time.Second, "every hot call to be in flight", func() bool { return b.Stats().InFlight == calls })
	close(release)
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	spilled := 0
	for _, be := range backends {
		n := be.keys()[hot]
		if n > 0 && !allowed[be.addr] {
			t.Errorf("backend %s, beyond the %d-endpoint walk, received the hot key %d times", be.addr, clientlib.MaxWalk, n)
		}
		if n > 0 {
			spilled++
		}
	}
	st := b.Stats()
	t.Logf("hot key landed on %d backends; walk distances %v", spilled, st.WalkDistance)
	if spilled < 2 {
		t.Fatalf("the hot key never left its owner: bounded load did nothing")
	}
	if st.WalkDistance[clientlib.MaxWalk-1] == 0 {
		t.Fatalf("no call walked the full %d endpoints; the cap was not exercised", clientlib.MaxWalk)
	}
}

// Scale-up under fade-in: while the new backend fades in, every key moves
// at most once, from its old owner to the new backend, and only keys the
// new backend owns once the fade is over ever reach it.
func TestFadeInSendsOnlyOwnedKeys(t *testing.T) {
	// ring_hash fades through the weight ramp the server publishes (the
	// ring Envoy and grpc-go build at each step); skipper and maglev
	// through clientlib's N-ring.
	for _, policy := range []string{"ring_hash", "skipper", "maglev"} {
		t.Run(policy, func(t *testing.T) {
			backends := startBackends(t, 6)
			const fade = 2 * time.Second
			extra := fmt.Sprintf("    fade_in: {duration: %v, exponent: 1}\n", fade)
			file := tempFile(t, clusterYAML("products", policy, extra, backends[:5]))
			cp := startControlPlane(t, file, "")
			c := dial(t, cp.XDSAddr)
			b := balancer(t, c, "products", clientlib.WithBoundedLoad(false))
			hc := transportClient(b)
			newcomer := backends[5]

			writeFile(t, file, clusterYAML("products", policy, extra, backends))
			added := time.Now()
			waitFor(t, 5*time.Second, "the sixth endpoint", func() bool { return len(b.Endpoints()) == 6 })
			if st := b.Stats(); policy != "ring_hash" && st.Fading != 1 {
				t.Fatalf("fading endpoints %d, want 1", st.Fading)
			}

			keys := make([]string, 300)
			for i := range keys {
				keys[i] = fmt.Sprintf("sku-%d", i)
			}
			seq := map[string][]string{} // key -> distinct endpoints in order
			midFade := 0
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// Fade steps fall on whole wall-clock seconds (docs/fade-in.md),
			// so the last one can come up to a second after the nominal end.
			for time.Since(added) < fade+1500*time.Millisecond {
				for _, key := range keys {
					got, err := get(ctx, hc, key, nil)
					if err != nil {
						t.Fatal(err)
					}
					if s := seq[key]; len(s) == 0 || s[len(s)-1] != got {
						seq[key] = append(s, got)
					}
					if got == newcomer.addr && time.Since(added) < fade*3/4 {
						midFade++
					}
				}
			}

			moved := 0
			for _, key := range keys {
				final := cp.Pick("products", key, "clientlib").Endpoint
				s := seq[key]
				if s[len(s)-1] != final {
					t.Errorf("key %s ended on %s, /debug/pick says %s", key, s[len(s)-1], final)
				}
				switch {
				case len(s) == 1:
				case len(s) == 2 && s[1] == newcomer.addr:
					moved++
				case len(s) == 2 && policy == "maglev":
					// A Maglev table with one more endpoint also reassigns a
					// few slots between the old ones; such a key still cuts
					// over once, to its final owner.
				default:
					t.Errorf("key %s flapped or moved between old endpoints: %v", key, s)
				}
			}
			for key := range newcomer.keys() {
				if w := cp.Pick("products", key, "clientlib").Endpoint; w != newcomer.addr {
					t.Errorf("the new backend received %s, which %s owns", key, w)
				}
			}
			t.Logf("%d of %d keys moved to the new backend; %d of its calls came in the first 3/4 of the fade", moved, len(keys), midFade)
			if moved == 0 || midFade == 0 {
				t.Fatalf("the new backend took no keys during the fade (moved %d, mid-fade %d)", moved, midFade)
			}
			if st := b.Stats(); st.Fading != 0 {
				t.Fatalf("still fading after the window: %d", st.Fading)
			}
		})
	}
}

// The collector exports the client's xDS state and each balancer's calls
// and walk distances.
func TestMetrics(t *testing.T) {
	backends := startBackends(t, 5)
	cp := startControlPlane(t, tempFile(t, clusterYAML("products", "maglev", "", backends)), "")
	reg := prometheus.NewRegistry()
	c := dial(t, cp.XDSAddr, clientlib.WithRegisterer(reg), clientlib.WithMetricsLabel("a"))
	b := balancer(t, c, "products")
	hc := transportClient(b)
	for i := range 20 {
		if _, err := get(context.Background(), hc, fmt.Sprintf("k-%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	// The EDS ACK is counted just after the ring it carries goes live, so
	// the calls above can finish first: wait for it, boundedly.
	var got map[string]float64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got = gatherMetrics(t, reg)
		if got["ringxds_clientlib_xds_responses_total,client=a,outcome=ack,type=eds"] >= 1 || time.Now().After(deadline) {
			break
		}
	}
	for name, want := range map[string]float64{
		"ringxds_clientlib_xds_connected,client=a":                             1,
		"ringxds_clientlib_calls_total,client=a,cluster=products,result=ok":    20,
		"ringxds_clientlib_walk_distance,client=a,cluster=products":            20,
		"ringxds_clientlib_endpoints,client=a,cluster=products,state=all":      5,
		"ringxds_clientlib_xds_responses_total,client=a,outcome=nack,type=cds": 0,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	if got["ringxds_clientlib_xds_responses_total,client=a,outcome=ack,type=eds"] < 1 {
		t.Errorf("no EDS ACK counted: %v", got)
	}
	// A second Client shares the registry under its own label; one with the
	// same label is refused with a clear error.
	c2 := dial(t, cp.XDSAddr, clientlib.WithRegisterer(reg), clientlib.WithMetricsLabel("b"))
	balancer(t, c2, "products")
	if got := gatherMetrics(t, reg); got["ringxds_clientlib_endpoints,client=b,cluster=products,state=all"] != 5 {
		t.Errorf("the second client's metrics are missing: %v", got)
	}
	if _, err := clientlib.Dial(context.Background(), cp.XDSAddr, clientlib.WithInsecure(), clientlib.WithRegisterer(reg), clientlib.WithMetricsLabel("a")); err == nil || !strings.Contains(err.Error(), "WithMetricsLabel") {
		t.Errorf("a second client labelled a: %v, want an error naming WithMetricsLabel", err)
	}
}

// gatherMetrics flattens reg into "name,label=value,..." -> value.
func gatherMetrics(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				got[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[name] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				got[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return got
}
