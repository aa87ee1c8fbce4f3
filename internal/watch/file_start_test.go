package watch_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/watch"
)

// okReloads reads ringxds_source_reloads_total{result="ok"} from reg.
func okReloads(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ringxds_source_reloads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "ok" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatal("no ringxds_source_reloads_total{result=\"ok\"}")
	return 0
}

// One start is one reload, as xds-server starts a source: Load to check
// the content, then Run to serve it. Run reads the file again once its
// watch is in place, but content Load already read is no new reload.
func TestFileOneStartCountsOneReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, fileYAML(80))
	for name, newSource := range map[string]func(watch.FileOptions) (*watch.FileSource, error){
		"file": func(o watch.FileOptions) (*watch.FileSource, error) { return watch.NewFileSource(path, o) },
		"embedded": func(o watch.FileOptions) (*watch.FileSource, error) {
			return watch.NewFileSourceFromBytes(examples.DefaultEndpointsName, examples.DefaultEndpoints, o)
		},
	} {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			core, logs := observer.New(zap.InfoLevel)
			src, err := newSource(watch.FileOptions{Registerer: reg, Logger: zap.New(core), Debounce: fileTestDebounce})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := src.Load(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			published := make(chan model.State, 2)
			go func() { _ = src.Run(ctx, func(s model.State) { published <- s }) }()
			select {
			case <-published:
			case <-time.After(fileWait):
				t.Fatal("nothing published")
			}
			if n := okReloads(t, reg); n != 1 {
				t.Errorf("ok reloads after one start = %v, want 1", n)
			}
			if n := logs.FilterMessageSnippet("loaded").Len(); n != 1 {
				t.Errorf("%d 'loaded' log lines after one start, want 1: %v", n, logs.All())
			}
			if name == "embedded" {
				// The embedded copy is not the file in the repository:
				// editing that changes nothing, so the log does not name
				// it as a file.
				for _, e := range logs.All() {
					if _, ok := e.ContextMap()["file"]; ok {
						t.Errorf("embedded content logged as a file: %s %v", e.Message, e.ContextMap())
					}
				}
			}
		})
	}
}

// A file rejected before anything was loaded keeps nothing, and the log
// does not claim it does.
func TestFileRejectedAtStartKeepsNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, "clusters:\n  - name: a\n    lb_policy: round_robin\n    endpoints: [{address: 10.0.0.1, port: 80}]\n")
	core, logs := observer.New(zap.InfoLevel)
	src, err := watch.NewFileSource(path, watch.FileOptions{Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Load(); err == nil {
		t.Fatal("an invalid file loaded")
	}
	if logs.Len() == 0 {
		t.Fatal("the rejection was not logged")
	}
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "keeping the last good state") {
			t.Errorf("start-up logs %q with no state to keep", e.Message)
		}
	}
}
