package debug_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/xds"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/debug"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/watch"
)

// chromiumPath is where Debian's chromium package installs the browser
// (`make browser` installs it).
const chromiumPath = "/usr/bin/chromium"

// browser starts headless Chromium for one test, or skips the test when
// Chromium is missing and RINGXDS_REQUIRE_BROWSER is not set (make test sets
// it, so there a missing browser fails instead of passing silently).
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("RINGXDS_REQUIRE_BROWSER") == "1" {
			t.Fatalf("RINGXDS_REQUIRE_BROWSER=1 but %s is missing (run make browser): %v", chromiumPath, err)
		}
		t.Skipf("%s not installed; run make browser, or set RINGXDS_REQUIRE_BROWSER=1 to fail instead", chromiumPath)
	}
	// The flags keep Chromium off the network: this machine's closed network
	// refuses its background connections, many at a time.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", chromiumPath, err)
	}
	return bctx
}

// eval evaluates a JavaScript expression in the page and fails the test on
// error.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// testOutDir is where screenshots go: $RINGXDS_TESTOUT, or testout/ at the
// repository root (git-ignored).
func testOutDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("RINGXDS_TESTOUT")
	if dir == "" {
		dir = filepath.Join("..", "..", "testout")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// liveServer runs the real xDS server on the example endpoints file with the
// debug handler on loopback, and connects one real proxyless gRPC client so
// the page has a client to show. It returns the debug base URL.
func liveServer(t *testing.T) string {
	t.Helper()
	log := zaptest.NewLogger(t)
	state, err := watch.ParseFile(examples.DefaultEndpointsName, examples.DefaultEndpoints)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	reg := prometheus.NewRegistry()
	srv := server.New(ctx, server.Options{Logger: log.Named("xds"), Registerer: reg})
	if err := srv.Apply(state); err != nil {
		t.Fatal(err)
	}
	g, err := server.NewGRPCServer(server.GRPCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Register(g)
	xl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(xl) }()
	t.Cleanup(g.Stop)

	dl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: debug.New(debug.Options{Server: srv, Gatherer: reg, Logger: log.Named("debug")}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(dl) }()
	t.Cleanup(func() { _ = hs.Close() })

	bootstrap := fmt.Sprintf(`{"xds_servers":[{"server_uri":%q,"channel_creds":[{"type":"insecure"}],"server_features":["xds_v3"]}],"node":{"id":"page-test","cluster":"demo"}}`, xl.Addr())
	r, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///products", grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	cc.Connect()
	deadline := time.Now().Add(10 * time.Second)
	for !edsAcked(srv.Clients()) {
		if time.Now().After(deadline) {
			t.Fatalf("the gRPC client did not ACK endpoints within 10s: %+v", srv.Clients())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "http://" + dl.Addr().String()
}

func edsAcked(cs []server.ClientStatus) bool {
	for _, c := range cs {
		if ts := c.Types["eds"]; ts != nil && ts.SentNonce != "" && ts.AckedNonce == ts.SentNonce {
			return true
		}
	}
	return false
}

func pickOf(t *testing.T, base, cluster, key, client string) debug.PickResult {
	t.Helper()
	q := url.Values{"cluster": {cluster}, "key": {key}, "client": {client}}
	resp, err := http.Get(base + "/debug/pick?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res debug.PickResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/debug/pick %s: status %d, %v", q.Encode(), resp.StatusCode, err)
	}
	return res
}

// TestBrowserPage loads the page in real Chromium: every cluster has one
// drawing with one arc group per endpoint, a typed key shows the endpoints
// /debug/pick names and is marked on the drawing, switching the client kind
// redraws Maglev as the ring gRPC builds, and the connected client shows
// its ACKs. A screenshot is kept for people to look at.
func TestBrowserPage(t *testing.T) {
	ctx := browser(t)
	base := liveServer(t)
	state, err := watch.ParseFile(examples.DefaultEndpointsName, examples.DefaultEndpoints)
	if err != nil {
		t.Fatal(err)
	}

	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitReady(chromedp.CSS(`body[data-ready="true"]`)),
	); err != nil {
		t.Fatalf("load page: %v", err)
	}

	// One drawing per cluster, one arc group per endpoint, each non-empty.
	for _, c := range state.Clusters {
		js := fmt.Sprintf(`(() => { const s = document.querySelector('section.cluster[data-cluster=%q]');
			return s ? Array.from(s.querySelectorAll('svg.drawing g.arcs[data-endpoint]'), g => g.querySelector('path').getAttribute('d') ? g.dataset.endpoint : '(empty)') : null; })()`, c.Name)
		groups := eval[[]string](t, ctx, js)
		drawings := eval[int](t, ctx, fmt.Sprintf(`document.querySelectorAll('section.cluster[data-cluster=%q] svg.drawing').length`, c.Name))
		var want []string
		for _, ep := range c.Endpoints {
			want = append(want, ep.HostPort())
		}
		slices.Sort(groups)
		slices.Sort(want)
		if drawings != 1 || !slices.Equal(groups, want) {
			t.Errorf("%s: %d drawings, arc groups %q, want 1 drawing with %q", c.Name, drawings, groups, want)
		}
	}

	// Type a key: every cluster shows each data plane's pick, as
	// /debug/pick answers it, and marks the key.
	const key = "product-42"
	steps := []chromedp.Action[chromedp.Void]{chromedp.SendKeys(chromedp.ID("key"), key)}
	for _, c := range state.Clusters {
		steps = append(steps, chromedp.WaitReady(chromedp.CSS(fmt.Sprintf(`section.cluster[data-cluster=%q][data-picked-key=%q]`, c.Name, key))))
	}
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("type a key: %v", err)
	}
	for _, c := range state.Clusters {
		want := pickOf(t, base, c.Name, key, "clientlib")
		sel := fmt.Sprintf(`section.cluster[data-cluster=%q]`, c.Name)
		shown := eval[map[string]string](t, ctx, `Object.fromEntries(Array.from(document.querySelectorAll('`+sel+` .picks tr[data-kind]:not(.unpredicted)'), tr => [tr.dataset.kind, tr.querySelector('.pick').textContent]))`)
		if len(shown) != len(want.ByClient) {
			t.Errorf("%s: the page lists picks for %v, /debug/pick answers for %v", c.Name, shown, want.ByClient)
		}
		if java := eval[string](t, ctx, `(document.querySelector('`+sel+` .picks tr.unpredicted[data-kind="grpc-java"]') || {}).textContent || ''`); !strings.Contains(java, "not predictable") {
			t.Errorf("%s: the page's grpc-java row reads %q", c.Name, java)
		}
		picked := eval[string](t, ctx, `document.querySelector('`+sel+`').dataset.picked`)
		marker := eval[string](t, ctx, `document.querySelector('`+sel+` .marker').getAttribute('visibility')`)
		highlighted := eval[string](t, ctx, `(document.querySelector('`+sel+` .endpoints tr.picked') || {dataset: {}}).dataset.endpoint || ''`)
		if picked != want.Endpoint || highlighted != want.Endpoint {
			t.Errorf("%s: page picked %q (row %q), /debug/pick says %q", c.Name, picked, highlighted, want.Endpoint)
		}
		for kind, ep := range want.ByClient {
			if shown[string(kind)] != ep {
				t.Errorf("%s: page shows %s -> %q, /debug/pick says %q", c.Name, kind, shown[string(kind)], ep)
			}
		}
		if marker != "visible" {
			t.Errorf("%s: key marker is %q", c.Name, marker)
		}
		// The line under the picks names the entry hit; hovering says why.
		line := eval[string](t, ctx, `document.querySelector('`+sel+` .pick-hash').textContent`)
		why := eval[string](t, ctx, `document.querySelector('`+sel+` .pick-hash').title`)
		if !strings.Contains(line, " of ") || !strings.Contains(why, want.Endpoint) {
			t.Errorf("%s: the pick line reads %q, its title %q; want the entry and why", c.Name, line, why)
		}
	}

	// The connected gRPC client and its ACKs appear (refreshed by the page).
	if err := chromedp.Do(ctx, chromedp.WaitReady(chromedp.CSS(`#clients span.xds[data-type="eds"][data-state="ack"]`))); err != nil {
		t.Fatalf("clients: %v", err)
	}
	acked := eval[int](t, ctx, `document.querySelectorAll('#clients span.xds[data-state="ack"]').length`)
	if acked < 4 {
		t.Errorf("%d resource types shown as ACKed, want lds, rds, cds and eds", acked)
	}

	// Keep a picture of the page for people.
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(testOutDir(t), "debug-page.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)

	// As gRPC clients see it, inventory (maglev) is a ring_hash ring, and
	// the typed key survives the redraw.
	eval[bool](t, ctx, `(() => { const s = document.getElementById('client'); s.value = 'grpc'; return s.dispatchEvent(new Event('change')); })()`)
	if err := chromedp.Do(ctx, chromedp.WaitReady(chromedp.CSS(`section.cluster[data-cluster="inventory"][data-policy="ring_hash"][data-picked-key="`+key+`"]`))); err != nil {
		t.Fatalf("switch to grpc: %v", err)
	}
	inv := `document.querySelector('section.cluster[data-cluster="inventory"]')`
	policy := eval[string](t, ctx, inv+`.dataset.policy`)
	strip := eval[string](t, ctx, inv+`.dataset.strip`)
	kept := eval[string](t, ctx, inv+`.dataset.picked`)
	want := pickOf(t, base, "inventory", key, "grpc")
	if policy != "ring_hash" || strip != "false" || kept != want.Endpoint {
		t.Errorf("inventory as grpc: policy %q strip %q pick %q, want ring_hash, false, %q", policy, strip, kept, want.Endpoint)
	}
	if !strings.Contains(want.Policy, "ring_hash") {
		t.Errorf("/debug/pick says gRPC runs %q for inventory", want.Policy)
	}
}
