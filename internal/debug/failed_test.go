package debug_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// A cluster the source has but the builder could not translate has nothing
// to pick from: /debug/pick says so with a 4xx naming the failure, not a
// 500, and /debug/snapshot lists it under failed.
func TestPickOnAClusterThatFailedToBuild(t *testing.T) {
	good := model.Cluster{Name: "good", Endpoints: []model.Endpoint{{Address: "10.0.0.1", Port: 80}}}
	good.ApplyDefaults()
	bad := good.Clone()
	bad.Name = "bad"
	bad.Endpoints[0].Weight = 0 // not normalized: the builder refuses it
	snap, err := snapshot.Build(model.State{Clusters: []model.Cluster{bad, good}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler(&fakePublisher{snap: snap})
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Host = "127.0.0.1"
		h.ServeHTTP(rec, req)
		return rec
	}
	rec := get("/debug/pick?cluster=bad&key=k")
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "not published") {
		t.Fatalf("pick on the failed cluster: %d %s", rec.Code, rec.Body)
	}
	if rec := get("/debug/pick?cluster=good&key=k"); rec.Code != http.StatusOK {
		t.Fatalf("pick on the good cluster: %d %s", rec.Code, rec.Body)
	}
	var out struct {
		Failed map[string]string `json:"failed"`
	}
	rec = get("/debug/snapshot")
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Failed["bad"] == "" {
		t.Fatalf("/debug/snapshot failed = %v (%v)", out.Failed, err)
	}
}
