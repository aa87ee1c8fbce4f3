package debug_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringxds/ringxds/internal/debug"
)

func guarded(t *testing.T, opts debug.HostOptions) http.Handler {
	t.Helper()
	p := &fakePublisher{}
	p.set(exampleSnapshot(t))
	h, err := debug.CheckHost(debug.New(debug.Options{Server: p, Gatherer: prometheus.NewRegistry()}), opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func getHost(h http.Handler, host, path string, local net.Addr) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.Host = host
	if local != nil {
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, local))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestCheckHost(t *testing.T) {
	h := guarded(t, debug.HostOptions{
		Allowed:  []string{"debug.ops.example", "*.corp.example", "192.0.2.7", "Trailing.Dot.Example."},
		Hostname: "ringxds-7d9f8-abcde",
		Addrs:    []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00::3")},
	})
	for _, host := range []string{
		// Loopback names and addresses, with and without port.
		"127.0.0.1:18080", "127.0.0.1", "127.9.9.9:1", "localhost:18080", "LOCALHOST", "localhost.", "ringxds.localhost:18080",
		"[::1]:18080", "[::1]", "::1", "[::ffff:127.0.0.1]:18080",
		// This pod: its addresses and hostname.
		"10.1.2.3:18080", "[fd00::3]:18080", "ringxds-7d9f8-abcde:18081", "RINGXDS-7D9F8-ABCDE",
		// The flag's list.
		"debug.ops.example", "debug.ops.example:443", "a.corp.example", "a.b.corp.example:8080", "192.0.2.7:18080", "trailing.dot.example",
		// No Host header at all (HTTP/1.0): no browser sends that.
		"",
	} {
		if w := getHost(h, host, "/debug/snapshot", nil); w.Code != http.StatusOK {
			t.Errorf("Host %q: status %d, want 200: %s", host, w.Code, w.Body)
		}
	}
	for _, host := range []string{
		"rebind.attacker.example", "rebind.attacker.example:18080", "localhost.attacker.example", "127.0.0.1.attacker.example",
		"corp.example", "xcorp.example", "debug.ops.example.attacker.example", "10.1.2.4:18080", "192.0.2.8", "[fd00::4]:1",
		"ringxds-7d9f8-abcde.attacker.example", "[::1]x", "evil.example%00localhost",
	} {
		w := getHost(h, host, "/debug/snapshot", nil)
		body := w.Body.String()
		if w.Code != http.StatusForbidden || !strings.Contains(body, "--debug-allowed-hosts") || !strings.Contains(body, "DNS rebinding") {
			t.Errorf("Host %q: status %d, want 403 with an explanation: %s", host, w.Code, body)
		}
		if strings.Contains(body, `"kinds"`) {
			t.Errorf("Host %q: the snapshot leaked into the refusal", host)
		}
	}
	// Every route is guarded, pprof and the page included.
	for _, path := range []string{"/", "/debug/pprof/", "/debug/pprof/cmdline", "/debug/pick?cluster=products&key=k", "/debug/clients", "/metrics", "/healthz"} {
		if w := getHost(h, "rebind.attacker.example", path, nil); w.Code != http.StatusForbidden {
			t.Errorf("%s with a rebinding Host: status %d, want 403", path, w.Code)
		}
	}
	// The address a request came in on is this host's, whatever the
	// interfaces said at start-up.
	local := &net.TCPAddr{IP: net.ParseIP("10.7.7.7"), Port: 18080}
	if w := getHost(h, "10.7.7.7:18080", "/healthz", local); w.Code != http.StatusOK {
		t.Errorf("Host naming the local address: status %d", w.Code)
	}
	if w := getHost(h, "10.7.7.8:18080", "/healthz", local); w.Code != http.StatusForbidden {
		t.Errorf("Host naming another address: status %d", w.Code)
	}
}

// The refusal quotes what it refuses, never more than a bounded prefix, and
// is not rendered as HTML.
func TestCheckHostRefusalIsInert(t *testing.T) {
	h := guarded(t, debug.HostOptions{Hostname: "pod", Addrs: []netip.Addr{}})
	w := getHost(h, "<script>alert(1)</script>"+strings.Repeat("a", 5000)+".example", "/", nil)
	if w.Code != http.StatusForbidden {
		t.Fatalf("status %d", w.Code)
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") || w.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("refusal served as %q without nosniff", ct)
	}
	if w.Body.Len() > 1200 {
		t.Errorf("refusal echoes %d bytes", w.Body.Len())
	}
}

func TestCheckHostRefusesBadAllowedNames(t *testing.T) {
	for _, bad := range []string{"http://debug.example", "debug.example:8080", "*", "*.", "a..b", "-a.example", "with space", "a/b", "**.example"} {
		if _, err := debug.CheckHost(http.NotFoundHandler(), debug.HostOptions{Allowed: []string{bad}}); err == nil || !strings.Contains(err.Error(), "not a host name") {
			t.Errorf("allowed host %q: %v, want an error", bad, err)
		}
	}
}

// Probes serves the kubelet and the scraper, and nothing of /debug/* or
// pprof: it is what goes on the pod network.
func TestProbesServeNoDebug(t *testing.T) {
	p := &fakePublisher{}
	h := debug.New(debug.Options{Server: p, Gatherer: prometheus.NewRegistry()}).Probes()
	srv := httptest.NewServer(h)
	defer srv.Close()
	status := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz before a snapshot: %d, want 503", got)
	}
	p.set(exampleSnapshot(t))
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if got := status(path); got != http.StatusOK {
			t.Errorf("%s: %d, want 200", path, got)
		}
	}
	for _, path := range []string{"/", "/debug/snapshot", "/debug/pick?cluster=products&key=k", "/debug/clients", "/debug/problems",
		"/debug/pprof/", "/debug/pprof/profile?seconds=1", "/debug/pprof/cmdline", "/debug/pprof/trace?seconds=1", "/debug/page/clusters"} {
		if got := status(path); got != http.StatusNotFound {
			t.Errorf("%s on the probe handler: %d, want 404", path, got)
		}
	}
}
