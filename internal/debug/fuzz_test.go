package debug_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/debug"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/watch"
)

// fuzzPaths are the debug endpoints that read a query, by the fuzzer's
// choice.
var fuzzPaths = []string{"/debug/pick", "/debug/snapshot", "/debug/rings", "/debug/page/clusters", "/"}

var fuzzHandler = sync.OnceValues(func() (*debug.Handler, error) {
	state, err := watch.ParseFile(examples.DefaultEndpointsName, examples.DefaultEndpoints)
	if err != nil {
		return nil, err
	}
	// One endpoint of the first cluster fading in, so that queries meet
	// the fade-in rings too.
	now := time.Now()
	state.Clusters[0].Endpoints[2].FirstSeen = now.Add(-5 * time.Second)
	snap, err := snapshot.Build(state, now)
	if err != nil {
		return nil, err
	}
	return newHandler(&fakePublisher{snap: snap}), nil
})

// FuzzDebugQuery sends fuzzed query strings to /debug/pick,
// /debug/snapshot and the debug page's query-reading endpoints of a
// handler publishing examples/endpoints.yaml. Whatever the query, the
// answer must be 2xx (304 for the page's ETag) or 4xx, never a panic or a
// 5xx; a 4xx must be a JSON error that says what is wrong. A pick that
// succeeds must answer for the cluster and key asked, with the key's hash
// and an endpoint of that cluster, for every predicted client.
func FuzzDebugQuery(f *testing.F) {
	f.Add(uint8(0), "cluster=products&key=user-42")
	f.Fuzz(func(t *testing.T, path uint8, query string) {
		h, err := fuzzHandler()
		if err != nil {
			t.Fatal(err)
		}
		p := fuzzPaths[int(path)%len(fuzzPaths)]
		req := httptest.NewRequest(http.MethodGet, p, nil)
		req.URL.RawQuery = query
		req.RequestURI = p + "?" + query
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		code, body := rec.Code, rec.Body.Bytes()
		switch {
		case code >= 200 && code < 300, code == http.StatusNotModified:
		case code >= 400 && code < 500:
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || strings.TrimSpace(e.Error) == "" {
				t.Fatalf("GET %s?%s: %d with body %q, want a JSON error", p, query, code, body)
			}
			return
		default:
			t.Fatalf("GET %s?%s: %d %s", p, query, code, body)
		}
		if p != "/debug/pick" {
			if strings.HasPrefix(p, "/debug/") && p != "/debug/page/clusters" && !json.Valid(body) {
				t.Fatalf("GET %s?%s: invalid JSON %q", p, query, body)
			}
			return
		}
		// As the handler reads it: the pairs that parse.
		q, _ := url.ParseQuery(query)
		var res debug.PickResult
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatalf("GET %s?%s: %v in %q", p, query, err, body)
		}
		cluster, key := q.Get("cluster"), q.Get("key")
		if res.Cluster != cluster || res.Key != key || res.Hash != strconv.FormatUint(ringhash.HashKey(key), 10) {
			t.Fatalf("GET %s?%s answers cluster %q key %q hash %s; asked %q, %q", p, query, res.Cluster, res.Key, res.Hash, cluster, key)
		}
		state, _ := watch.ParseFile(examples.DefaultEndpointsName, examples.DefaultEndpoints)
		c, ok := state.Cluster(cluster)
		if !ok {
			t.Fatalf("GET %s?%s picks from unknown cluster %q", p, query, cluster)
		}
		members := map[string]bool{}
		for _, ep := range c.Endpoints {
			members[ep.HostPort()] = true
		}
		if !members[res.Endpoint] || len(res.ByClient) == 0 {
			t.Fatalf("GET %s?%s picks %q (by client %v), not an endpoint of %s", p, query, res.Endpoint, res.ByClient, cluster)
		}
		for client, ep := range res.ByClient {
			if !members[ep] {
				t.Fatalf("GET %s?%s: %s picks %q, not an endpoint of %s", p, query, client, ep, cluster)
			}
		}
		if c.Policy == model.PolicyRingHash && res.Policy != ringhash.PolicyRingHash {
			t.Fatalf("GET %s?%s: a ring_hash cluster picks with %q", p, query, res.Policy)
		}
	})
}
