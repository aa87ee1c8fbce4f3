package debug_test

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/debug"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/watch"
)

// fakePublisher serves a fixed snapshot and client list, so the page can be
// shown states (fading endpoints, NACKs, hostile names) a live server would
// take long to reach.
type fakePublisher struct {
	mu      sync.Mutex
	snap    *snapshot.Snapshot
	clients []server.ClientStatus
}

func (f *fakePublisher) Current() *snapshot.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snap
}

func (f *fakePublisher) Ready() bool { return f.Current() != nil }

func (f *fakePublisher) Clients() []server.ClientStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clients
}

func (f *fakePublisher) RefusedConnections() []server.RefusedConnection { return nil }

func (f *fakePublisher) set(s *snapshot.Snapshot) {
	f.mu.Lock()
	f.snap = s
	f.mu.Unlock()
}

// exampleSnapshot builds the snapshot xds-server publishes for
// examples/endpoints.yaml.
func exampleSnapshot(t *testing.T) *snapshot.Snapshot {
	t.Helper()
	state, err := watch.ParseFile(examples.DefaultEndpointsName, examples.DefaultEndpoints)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := snapshot.Build(state, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func get(t *testing.T, h http.Handler, path string, header http.Header) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newHandler(p debug.Publisher) *debug.Handler {
	return debug.New(debug.Options{Server: p, Gatherer: prometheus.NewRegistry()})
}

var arcGroupRE = regexp.MustCompile(`<g class="arcs" data-endpoint="([^"]*)"`)

// sectionOf returns the HTML of one cluster's section.
func sectionOf(t *testing.T, page, cluster string) string {
	t.Helper()
	start := strings.Index(page, `<section class="cluster" data-cluster="`+cluster+`"`)
	if start < 0 {
		t.Fatalf("no section for cluster %s", cluster)
	}
	rest := page[start:]
	return rest[:strings.Index(rest, "</section>")]
}

func TestPageDrawsEveryClusterWithOneGroupPerEndpoint(t *testing.T) {
	snap := exampleSnapshot(t)
	h := newHandler(&fakePublisher{snap: snap})
	resp := get(t, h, "/", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Fatalf("Content-Security-Policy %q", csp)
	}
	page := body(t, resp)
	for _, c := range snap.State.Clusters {
		sec := sectionOf(t, page, c.Name)
		var got []string
		for _, m := range arcGroupRE.FindAllStringSubmatch(sec, -1) {
			got = append(got, m[1])
		}
		var want []string
		for _, ep := range c.Endpoints {
			want = append(want, ep.HostPort())
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: arc groups for %q, want %q", c.Name, got, want)
		}
		if n := strings.Count(sec, "<svg class=\"drawing"); n != 1 {
			t.Errorf("%s: %d drawings, want 1", c.Name, n)
		}
	}
	// Maglev is a strip for clientlib (the default) and a ring for gRPC,
	// which receives the cluster as ring_hash.
	if !strings.Contains(sectionOf(t, page, "inventory"), `class="drawing strip"`) {
		t.Error("inventory (maglev) not drawn as a strip for clientlib")
	}
	grpcPage := body(t, get(t, h, "/?client=grpc", nil))
	if sec := sectionOf(t, grpcPage, "inventory"); !strings.Contains(sec, `class="drawing ring"`) || !strings.Contains(sec, `data-policy="ring_hash"`) {
		t.Error("inventory not drawn as the ring_hash ring gRPC clients build")
	}
	if resp := get(t, h, "/?client=nginx", nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("unknown client kind: status %d", resp.StatusCode)
	}
}

func TestPageShowsFadeInAndClientState(t *testing.T) {
	snap := exampleSnapshot(t)
	snap.Fading = map[string][]snapshot.FadeStatus{"products": {{
		Endpoint: "127.0.0.1:9103", Start: time.Now().Add(-15 * time.Second),
		Duration: 30 * time.Second, Exponent: 2.5, Share: 0.1768, Weight: 1,
	}}}
	now := time.Now()
	clients := []server.ClientStatus{{
		StreamID: 1, Protocol: server.ProtocolSotW, NodeID: `<script>alert("node")</script>`, Kind: snapshot.KindGRPC,
		Peer: "127.0.0.1:5555", ConnectedAt: now.Add(-time.Minute),
		Types: map[string]*server.TypeStatus{
			"cds": {Subscribed: 1, SentVersion: "v2", SentNonce: "2", AckedVersion: "v1", AckedNonce: "1", Nacks: 1,
				LastNack: &server.Nack{Version: "v2", Nonce: "2", Message: `unexpected lbPolicy MAGLEV <b>`, At: now}},
			"eds": {Subscribed: 1, SentVersion: "v1", SentNonce: "3", AckedVersion: "v1", AckedNonce: "3"},
			"lds": {Subscribed: 1, SentVersion: "v1", SentNonce: "4"},
		},
	}}
	h := newHandler(&fakePublisher{snap: snap, clients: clients})
	page := body(t, get(t, h, "/", nil))

	sec := sectionOf(t, page, "products")
	row := sec[strings.Index(sec, `<tr data-endpoint="127.0.0.1:9103">`):]
	row = row[:strings.Index(row, "</tr>")]
	if !strings.Contains(row, `<progress max="100" value="18">`) || !strings.Contains(row, "fading in") {
		t.Errorf("fading endpoint row lacks its progress: %s", row)
	}
	other := sec[strings.Index(sec, `<tr data-endpoint="127.0.0.1:9101">`):]
	if !strings.Contains(other[:strings.Index(other, "</tr>")], `value="100"`) {
		t.Error("an endpoint that is not fading does not show 100%")
	}

	if strings.Contains(page, "<script>alert") || strings.Contains(page, "MAGLEV <b>") {
		t.Fatal("client-supplied text reached the page unescaped")
	}
	if !strings.Contains(page, "&lt;script&gt;alert(&#34;node&#34;)&lt;/script&gt;") {
		t.Error("node ID not shown escaped")
	}
	for typ, state := range map[string]string{"cds": "nack", "eds": "ack", "lds": "pending"} {
		if !strings.Contains(page, `data-type="`+typ+`" data-state="`+state+`"`) {
			t.Errorf("%s not shown as %s", typ, state)
		}
	}
	if lds, cds := strings.Index(page, `data-type="lds"`), strings.Index(page, `data-type="cds"`); lds > cds {
		t.Error("resource types not in dependency order (lds before cds)")
	}
}

func TestClustersFragmentChangesOnlyWithTheSnapshot(t *testing.T) {
	pub := &fakePublisher{snap: exampleSnapshot(t)}
	h := newHandler(pub)
	first := get(t, h, "/debug/page/clusters?client=envoy", nil)
	etag := first.Header.Get("ETag")
	if first.StatusCode != http.StatusOK || etag == "" {
		t.Fatalf("status %d, ETag %q", first.StatusCode, etag)
	}
	if again := get(t, h, "/debug/page/clusters?client=envoy", http.Header{"If-None-Match": {etag}}); again.StatusCode != http.StatusNotModified {
		t.Fatalf("unchanged snapshot: status %d, want 304", again.StatusCode)
	}
	if other := get(t, h, "/debug/page/clusters?client=clientlib", http.Header{"If-None-Match": {etag}}); other.StatusCode != http.StatusOK {
		t.Fatalf("another kind's drawing answered %d to the envoy ETag", other.StatusCode)
	}

	// A new snapshot with a different endpoint set must be redrawn.
	state, err := watch.ParseFile("changed.yaml", []byte(strings.Replace(string(examples.DefaultEndpoints), "port: 9103", "port: 9104", 1)))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := snapshot.Build(state, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pub.set(snap)
	changed := get(t, h, "/debug/page/clusters?client=envoy", http.Header{"If-None-Match": {etag}})
	if changed.StatusCode != http.StatusOK || changed.Header.Get("ETag") == etag {
		t.Fatalf("new snapshot: status %d, ETag %q", changed.StatusCode, changed.Header.Get("ETag"))
	}
	if !strings.Contains(body(t, changed), `data-endpoint="127.0.0.1:9104"`) {
		t.Fatal("redrawn page lacks the new endpoint")
	}
}

func TestRingsJSON(t *testing.T) {
	h := newHandler(&fakePublisher{snap: exampleSnapshot(t)})
	resp := get(t, h, "/debug/rings?client=envoy", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var out struct {
		Client   string `json:"client"`
		Clusters []struct {
			Name, Policy string
			Size         int
			Strip        bool
			Endpoints    []struct {
				Endpoint string
				Share    float64
				Path     string
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"products": "ring_hash", "inventory": "maglev", "catalog": "ring_hash"}
	if len(out.Clusters) != len(want) {
		t.Fatalf("%d clusters", len(out.Clusters))
	}
	for _, c := range out.Clusters {
		if want[c.Name] != c.Policy {
			t.Errorf("%s: policy %q for envoy, want %q", c.Name, c.Policy, want[c.Name])
		}
		if c.Strip != (c.Policy == "maglev") {
			t.Errorf("%s: strip=%v for %s", c.Name, c.Strip, c.Policy)
		}
		var sum float64
		for _, ep := range c.Endpoints {
			sum += ep.Share
			if ep.Path == "" {
				t.Errorf("%s: %s has nothing drawn", c.Name, ep.Endpoint)
			}
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("%s: shares sum to %v", c.Name, sum)
		}
	}
	// products weighs 1:1:2, and every data plane's ring says so.
	for _, ep := range out.Clusters[2].Endpoints {
		if ep.Endpoint == "127.0.0.1:9103" && math.Abs(ep.Share-0.5) > 0.05 {
			t.Errorf("products: weight-2 endpoint owns %v", ep.Share)
		}
	}
}

func TestPageBeforeTheFirstSnapshot(t *testing.T) {
	h := newHandler(&fakePublisher{})
	resp := get(t, h, "/", nil)
	if page := body(t, resp); resp.StatusCode != http.StatusOK || !strings.Contains(page, "No snapshot published yet.") {
		t.Fatalf("status %d: %s", resp.StatusCode, page)
	}
	if resp := get(t, h, "/debug/rings", nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/debug/rings before a snapshot: status %d", resp.StatusCode)
	}
}

func TestPageAssetsAreServed(t *testing.T) {
	h := newHandler(&fakePublisher{})
	for path, ctype := range map[string]string{"/debug/page/assets/page.js": "javascript", "/debug/page/assets/page.css": "text/css"} {
		resp := get(t, h, path, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), ctype) {
			t.Errorf("%s: status %d, type %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
}
