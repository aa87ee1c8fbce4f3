package loadgen_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/ringxds/ringxds/internal/loadgen"
)

// TestProfileInProcess is the profiling harness: a full-size run against
// the in-process server, so `go test -cpuprofile` sees the server's hot
// paths. It runs only when RINGXDS_LOADGEN_PROFILE names a directory, which
// also receives heap.pprof, taken with every client connected and at rest:
//
//	RINGXDS_LOADGEN_PROFILE=/tmp/prof go test -run ProfileInProcess \
//	    -cpuprofile /tmp/prof/cpu.pprof -timeout 20m ./internal/loadgen/
//
// RINGXDS_LOADGEN_CLIENTS, _CLUSTERS, _ENDPOINTS and _CHANGES size it
// (default 1000 x 100 x 10000, 20 changes). Client stacks (grpc client
// transport, internal/loadgen) share the profile; filter on the server's
// packages when reading it.
func TestProfileInProcess(t *testing.T) {
	dir := os.Getenv("RINGXDS_LOADGEN_PROFILE")
	if dir == "" {
		t.Skip("set RINGXDS_LOADGEN_PROFILE to a directory to profile an in-process run")
	}
	env := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv("RINGXDS_LOADGEN_" + name)); err == nil {
			return v
		}
		return def
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	lc := &inProcess{t: t, file: file, log: log}
	t.Cleanup(func() { _ = lc.Stop(context.Background()) })
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		File: file, Lifecycle: lc,
		Clients: env("CLIENTS", 1000), Clusters: env("CLUSTERS", 100), Endpoints: env("ENDPOINTS", 10000),
		Changes: env("CHANGES", 20), ChangeInterval: 500 * time.Millisecond,
		GRPCFraction: 0.2, DeltaFraction: 0.5, Timeout: 5 * time.Minute, Seed: 1,
		Logger: log,
		OnConverged: func() {
			runtime.GC()
			f, err := os.Create(filepath.Join(dir, "heap.pprof"))
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			if err := pprof.WriteHeapProfile(f); err != nil {
				t.Error(err)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Line())
}
