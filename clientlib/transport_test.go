package clientlib_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringxds/ringxds/clientlib"
	"github.com/ringxds/ringxds/internal/testcp"
)

// serveHTTP runs handler on a loopback port for the test's lifetime.
func serveHTTP(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	l := listenOn(t, "127.0.0.1:0")
	hs := &http.Server{Handler: handler}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { _ = hs.Close() })
	return l.Addr().String()
}

// deadAddr is a loopback address nothing listens on: dials are refused.
func deadAddr(t *testing.T) string {
	t.Helper()
	l := listenOn(t, "127.0.0.1:0")
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func transportFor(b *clientlib.Balancer) *http.Client {
	return &http.Client{Transport: &clientlib.Transport{Balancer: b, Key: clientlib.HeaderKey("X-Key"),
		Base: &http.Transport{MaxIdleConnsPerHost: 64}}, Timeout: 5 * time.Second}
}

func keyed(ctx context.Context, method, key string, body []byte) *http.Request {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body) // sets GetBody: the body can be replayed
	}
	req, _ := http.NewRequestWithContext(ctx, method, "http://p/item", r)
	req.Header.Set("X-Key", key)
	return req
}

// A backend answering 503 at once must not look fast and draw traffic: its
// 5xx are failures, so it is ejected, and the 503s still reach the caller.
func TestTransportCountsServerErrors(t *testing.T) {
	var broken, healthy atomic.Int64
	bad := serveHTTP(t, func(w http.ResponseWriter, _ *http.Request) {
		broken.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	good := func(w http.ResponseWriter, _ *http.Request) {
		healthy.Add(1)
		time.Sleep(5 * time.Millisecond)
		_, _ = io.WriteString(w, "ok")
	}
	cp := startControlPlane(t, tempFile(t, testcp.ClusterYAML("p", "ring_hash", "x-key", "",
		[]string{bad, serveHTTP(t, good), serveHTTP(t, good)}, nil)), "")
	b := balancer(t, dial(t, cp.XDSAddr), "p")
	hc := transportFor(b)
	const n, workers = 1500, 16
	var unavailable atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				resp, err := hc.Do(keyed(context.Background(), http.MethodGet, "k-"+itoa(i), nil))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.StatusCode == http.StatusServiceUnavailable {
					unavailable.Add(1)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	share := float64(broken.Load()) / float64(broken.Load()+healthy.Load())
	t.Logf("the 503 backend took %.1f%% of %d requests (%d 503s returned); %+v", 100*share, n, unavailable.Load(), b.Stats())
	if st := b.Stats(); st.Ejections == 0 {
		t.Fatalf("the backend answering 503 was never ejected: %+v", st)
	}
	if share > 0.10 {
		t.Fatalf("the backend answering 503 took %.1f%% of the requests", 100*share)
	}
	if unavailable.Load() != broken.Load() {
		t.Fatalf("%d 503s answered, %d returned: failed responses must reach the caller", broken.Load(), unavailable.Load())
	}
}

func itoa(i int) string {
	return string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26))
}

// A call stays in flight until its response body is read or closed, so a
// backend that sends headers at once and then stalls counts as busy; the
// slot under the in-flight cap is free from the headers on.
func TestTransportHoldsCallUntilBodyIsDone(t *testing.T) {
	release := make(chan struct{})
	addr := serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		if r.Header.Get("X-Stall") != "" {
			<-release
		}
		_, _ = io.WriteString(w, "body")
	})
	cp := startControlPlane(t, tempFile(t, testcp.ClusterYAML("p", "ring_hash", "x-key", "", []string{addr}, nil)), "")
	b := balancer(t, dial(t, cp.XDSAddr), "p", clientlib.WithMaxInFlight(1, 0))
	hc := transportFor(b)
	req := keyed(context.Background(), http.MethodGet, "k", nil)
	req.Header.Set("X-Stall", "1")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Stats().InFlight; got != 1 {
		t.Fatalf("headers in, body not: %d calls in flight, want 1", got)
	}
	other, err := hc.Do(keyed(context.Background(), http.MethodGet, "k", nil))
	if err != nil {
		t.Fatalf("the in-flight cap is still held by a call past its headers: %v", err)
	}
	_ = other.Body.Close()
	close(release)
	if body, err := io.ReadAll(resp.Body); err != nil || string(body) != "body" {
		t.Fatalf("body %q, %v", body, err)
	}
	waitFor(t, time.Second, "the call to end with its body", func() bool { return b.Stats().InFlight == 0 })
	_ = resp.Body.Close()
	if st := b.Stats(); st.Calls != 2 || st.Failures != 0 || st.InFlight != 0 {
		t.Fatalf("after both bodies: %+v, want 2 calls, none failed or in flight", st)
	}
}

// Retries follow what is safe: any transport error of an idempotent
// request, a refused connection for any method with a replayable body, and
// nothing else.
func TestTransportRetriesSafely(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	ok := serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(body))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})
	reset := serveHTTP(t, func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close() // the request was read; the connection dies
		}
	})
	// Two clusters, so that each retry has one healthy place to go.
	dead := deadAddr(t)
	twoClusters := testcp.ClusterYAML("resets", "ring_hash", "x-key", "", []string{ok, reset}, nil) +
		strings.TrimPrefix(testcp.ClusterYAML("refuses", "ring_hash", "x-key", "", []string{ok, dead}, nil), "clusters:\n")
	cp := startControlPlane(t, tempFile(t, twoClusters), "")
	client := dial(t, cp.XDSAddr)
	resets := balancer(t, client, "resets", clientlib.WithBoundedLoad(false))
	refuses := balancer(t, client, "refuses", clientlib.WithBoundedLoad(false))
	toReset := keyOwnedBy(t, resets, reset)
	toDead := keyOwnedBy(t, refuses, dead)

	for _, c := range []struct {
		name, method, key string
		b                 *clientlib.Balancer
		body              []byte
		retried           bool
	}{
		{"GET, connection reset", http.MethodGet, toReset, resets, nil, true},
		{"POST, connection refused", http.MethodPost, toDead, refuses, []byte("order-1"), true},
		{"POST, connection reset", http.MethodPost, toReset, resets, []byte("order-2"), false},
	} {
		before := c.b.Stats().Retries
		resp, err := transportFor(c.b).Do(keyed(context.Background(), c.method, c.key, c.body))
		retried := c.b.Stats().Retries > before
		if err == nil {
			_ = resp.Body.Close()
		}
		switch {
		case c.retried && (err != nil || !retried):
			t.Errorf("%s: %v (retried %v), want a retry that succeeds", c.name, err, retried)
		case !c.retried && (err == nil || retried):
			t.Errorf("%s: err %v, retried %v; want the error and no retry", c.name, err, retried)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 2 || bodies[1] != "order-1" {
		t.Fatalf("bodies received %q, want the GET's and the retried POST's intact", bodies)
	}
}

// Long-lived streams end their call with the headers: an open event stream
// must not hold its endpoint over the load bound and move its keys. Nor is
// an empty body (HTTP/2 gives one that is not http.NoBody) held.
func TestTransportDoesNotHoldStreams(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	addr := serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Stream") != "" {
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			<-release
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	cp := startControlPlane(t, tempFile(t, testcp.ClusterYAML("p", "ring_hash", "x-key", "",
		[]string{addr, deadAddr(t), deadAddr(t)}, nil)), "")
	b := balancer(t, dial(t, cp.XDSAddr), "p")
	key := keyOwnedBy(t, b, addr)
	req := keyed(context.Background(), http.MethodGet, key, nil)
	req.Header.Set("X-Stream", "1")
	resp, err := transportFor(b).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := b.Stats().InFlight; got != 0 {
		t.Fatalf("an open event stream counts as %d calls in flight, want 0", got)
	}
	for range 50 {
		if ep, _ := b.Pick(key); ep.Addr != addr {
			t.Fatalf("with an event stream open, the key went to %s, not its owner", ep.Addr)
		}
	}

	empty := &http.Response{StatusCode: http.StatusOK, ContentLength: 0, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}}
	tr := &clientlib.Transport{Balancer: b, Key: clientlib.HeaderKey("X-Key"),
		Base: roundTripFunc(func(*http.Request) (*http.Response, error) { return empty, nil })}
	if _, err := tr.RoundTrip(keyed(context.Background(), http.MethodGet, key, nil)); err != nil {
		t.Fatal(err)
	}
	if got := b.Stats().InFlight; got != 0 {
		t.Fatalf("a response with an empty body is held: %d calls in flight", got)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
