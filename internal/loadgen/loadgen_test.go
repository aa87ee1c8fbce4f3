package loadgen_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/ringxds/ringxds/internal/debug"
	"github.com/ringxds/ringxds/internal/loadgen"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/watch"
)

// inProcess runs the control plane as cmd/xds-server wires it, inside the
// test, and restarts it on the same addresses.
type inProcess struct {
	t                  *testing.T
	file               string
	log                *zap.Logger
	debounce           time.Duration // zero: the source's default
	xdsAddr, debugAddr string
	stop               func()
}

func (p *inProcess) Start(ctx context.Context) (string, string, error) {
	if p.stop != nil {
		return "", "", errors.New("already running")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	src, err := watch.NewFileSource(p.file, watch.FileOptions{Logger: p.log.Named("file"), Registerer: reg, Debounce: p.debounce})
	if err != nil {
		return "", "", err
	}
	if _, err := src.Load(); err != nil {
		return "", "", err
	}
	xl, err := listenOn(p.xdsAddr)
	if err != nil {
		return "", "", err
	}
	dl, err := listenOn(p.debugAddr)
	if err != nil {
		_ = xl.Close()
		return "", "", err
	}
	p.xdsAddr, p.debugAddr = xl.Addr().String(), dl.Addr().String()
	sctx, cancel := context.WithCancel(context.Background())
	srv := server.New(sctx, server.Options{Logger: p.log.Named("xds"), Registerer: reg})
	g, err := server.NewGRPCServer(server.GRPCOptions{})
	if err != nil {
		cancel()
		return "", "", err
	}
	srv.Register(g)
	hs := &http.Server{Handler: debug.New(debug.Options{Server: srv, Problems: src.Problems, Gatherer: reg, Logger: p.log.Named("debug")})}
	go func() { _ = hs.Serve(dl) }()
	srcDone := make(chan struct{})
	go func() {
		defer close(srcDone)
		_ = src.Run(sctx, func(st model.State) {
			if err := srv.Apply(st); err != nil {
				p.t.Errorf("apply: %v", err)
			}
		})
	}()
	p.stop = func() {
		cancel()
		g.Stop()
		_ = hs.Close()
		<-srcDone
	}
	deadline := time.Now().Add(10 * time.Second)
	for !srv.Ready() {
		if time.Now().After(deadline) {
			_ = xl.Close()
			p.stop()
			p.stop = nil
			return "", "", errors.New("no snapshot within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// xDS is served only once the first snapshot is published: a client
	// reconnecting earlier would be told that every resource it holds is
	// gone (empty caches), which the run counts as withdrawn.
	go func() { _ = g.Serve(xl) }()
	return p.xdsAddr, p.debugAddr, nil
}

func (p *inProcess) Stop(context.Context) error {
	if p.stop != nil {
		p.stop()
		p.stop = nil
	}
	return nil
}

// listenOn binds addr, or a free loopback port when addr is empty. A
// restart binds the previous address again.
func listenOn(addr string) (net.Listener, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	return net.Listen("tcp", addr)
}

// A few hundred clients of every kind converge on every change, never see
// stale content, and all resync after the server restarts under them. Only
// correctness is asserted: timings on a shared test machine mean nothing.
func TestShortRunConvergesAndResyncsAfterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a few hundred xDS clients")
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	lc := &inProcess{t: t, file: file, log: log, debounce: 20 * time.Millisecond}
	t.Cleanup(func() { _ = lc.Stop(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()

	res, err := loadgen.Run(ctx, loadgen.Config{
		File: file, Lifecycle: lc,
		Clients: 200, Clusters: 4, Endpoints: 40, Changes: 6,
		ChangeInterval: 100 * time.Millisecond,
		GRPCFraction:   0.3, DeltaFraction: 0.5, GRPCClusters: 2,
		Timeout: 20 * time.Second, Seed: 7, ReconnectJitter: 50 * time.Millisecond,
		Storm:  true,
		Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	line := res.Line()
	t.Log(line)
	if !res.OK() {
		t.Fatalf("run failed: %s\nerrors: %s", line, strings.Join(res.Errors, "\n"))
	}
	if res.Samples == 0 {
		t.Fatalf("no propagation samples recorded: %s", line)
	}
	if !strings.HasPrefix(line, "clients=200 clusters=4 endpoints=40 changes=6 converged=200/200 ") {
		t.Fatalf("summary line does not start with the run's shape: %s", line)
	}
	for _, key := range []string{"propagation_p50_ms=", "propagation_p99_ms=", "propagation_max_ms=", "server_rss_mb=", "bytes_per_change=", " withdrawn=0 ", "storm_resynced=200/200"} {
		if !strings.Contains(line, key) {
			t.Errorf("summary line lacks %s: %s", key, line)
		}
	}
}

// Clients spread over two replicas of the server on one file receive
// identical versions for identical content, whichever replica serves
// them, and both replicas' clients resync after both restart.
func TestTwoReplicasSendIdenticalVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two servers and a few dozen xDS clients")
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	var reps []loadgen.Lifecycle
	for range 2 {
		lc := &inProcess{t: t, file: file, log: log, debounce: 20 * time.Millisecond}
		t.Cleanup(func() { _ = lc.Stop(context.Background()) })
		reps = append(reps, lc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	res, err := loadgen.Run(ctx, loadgen.Config{
		File: file, Replicas: reps,
		Clients: 24, Clusters: 4, Endpoints: 40, Changes: 4,
		ChangeInterval: 100 * time.Millisecond,
		GRPCFraction:   0.25, DeltaFraction: 0.5, GRPCClusters: 2,
		Timeout: 20 * time.Second, Seed: 3, ReconnectJitter: 50 * time.Millisecond,
		Storm: true, Settle: 10 * time.Millisecond,
		Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	line := res.Line()
	t.Log(line)
	if !res.OK() {
		t.Fatalf("run failed: %s\nerrors: %s\nversions: %s", line, strings.Join(res.Errors, "\n"), strings.Join(res.VersionExamples, "\n"))
	}
	if len(res.Replicas) != 2 || res.Replicas[0].Clients != 12 || res.Replicas[1].Clients != 12 {
		t.Fatalf("clients not split evenly over two replicas: %+v", res.Replicas)
	}
	if res.VersionsCompared == 0 {
		t.Fatalf("no content reached clients of both replicas, so nothing was compared: %s", line)
	}
	for _, key := range []string{" replicas=2 ", " replica_versions_identical=true ", " replica0_converged=12/12 ", " replica1_converged=12/12 ", "storm_resynced=24/24"} {
		if !strings.Contains(line, key) {
			t.Errorf("summary line lacks %q: %s", key, line)
		}
	}
}
