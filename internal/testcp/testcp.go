package testcp

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ringxds/ringxds/internal/debug"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/watch"
)

// ControlPlane is one running in-process xds-server.
type ControlPlane struct {
	t testing.TB
	// File is the endpoints file it watches.
	File     string
	Source   *watch.FileSource
	Server   *server.Server
	Registry *prometheus.Registry
	// Logs holds every entry the control plane logged at info or above.
	Logs *observer.ObservedLogs
	// XDSAddr is the xDS gRPC address; DebugURL the debug server's base URL.
	XDSAddr  string
	DebugURL string

	stop func()
}

type options struct {
	xdsAddr string
	now     func() time.Time
	applied func(model.State)
}

// Option configures Start.
type Option func(*options)

// WithXDSAddr serves xDS on addr instead of a free port, so a test can
// restart a control plane where clients expect it.
func WithXDSAddr(addr string) Option { return func(o *options) { o.xdsAddr = addr } }

// WithClock makes the server compute fade-in steps against now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithApplied calls applied with every state the source publishes, once
// the server has applied it: what the server published, in order, which
// clients may see only part of.
func WithApplied(applied func(model.State)) Option { return func(o *options) { o.applied = applied } }

// Start serves file and waits for the first snapshot.
func Start(t testing.TB, file string, opts ...Option) *ControlPlane {
	t.Helper()
	o := options{xdsAddr: "127.0.0.1:0"}
	for _, opt := range opts {
		opt(&o)
	}
	observed, logs := observer.New(zap.InfoLevel)
	log := zap.New(observed)
	if tt, ok := t.(*testing.T); ok {
		log = zap.New(zapcore.NewTee(zaptest.NewLogger(tt, zaptest.Level(zap.WarnLevel)).Core(), observed))
	}
	reg := prometheus.NewRegistry()
	// The source dates changes by the server's clock, as both read the
	// wall clock in production: a test holding the clock must not see
	// the source judge a fade over that the server still runs.
	src, err := watch.NewFileSource(file, watch.FileOptions{Logger: log.Named("file"), Registerer: reg, Debounce: 20 * time.Millisecond, Now: o.now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Load(); err != nil {
		t.Fatalf("initial load: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := server.New(ctx, server.Options{Logger: log.Named("xds"), Registerer: reg, Now: o.now})
	g, err := server.NewGRPCServer(server.GRPCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Register(g)
	xl := Listen(t, o.xdsAddr)
	dl := Listen(t, "127.0.0.1:0")
	go func() {
		// As cmd/xds-server: serve xDS only once a snapshot exists.
		if srv.WaitReady(ctx) == nil {
			_ = g.Serve(xl)
		}
	}()
	hs := &http.Server{Handler: debug.New(debug.Options{Server: srv, Problems: src.Problems, Gatherer: reg, Logger: log.Named("debug")})}
	go func() { _ = hs.Serve(dl) }()
	srcDone := make(chan struct{})
	go func() {
		defer close(srcDone)
		_ = src.Run(ctx, func(st model.State) {
			if err := srv.Apply(st); err != nil {
				t.Errorf("apply: %v", err)
			} else if o.applied != nil {
				o.applied(st)
			}
		})
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			g.Stop()
			_ = hs.Close()
			<-srcDone
		})
	}
	t.Cleanup(stop)
	cp := &ControlPlane{t: t, File: file, Source: src, Server: srv, Registry: reg, Logs: logs,
		XDSAddr: xl.Addr().String(), DebugURL: "http://" + dl.Addr().String(), stop: stop}
	WaitFor(t, 5*time.Second, "first snapshot", srv.Ready)
	return cp
}

// Stop shuts the control plane down now (it also stops at cleanup).
func (cp *ControlPlane) Stop() { cp.stop() }

// GetJSON decodes a debug endpoint's JSON answer into v and returns the
// HTTP status.
func (cp *ControlPlane) GetJSON(path string, v any) int {
	cp.t.Helper()
	resp, err := http.Get(cp.DebugURL + path)
	if err != nil {
		cp.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, v); err != nil {
		cp.t.Fatalf("GET %s: status %d, body not JSON: %v: %s", path, resp.StatusCode, err, body)
	}
	return resp.StatusCode
}

// Pick asks /debug/pick where key goes for a client kind.
func (cp *ControlPlane) Pick(cluster, key, client string) debug.PickResult {
	cp.t.Helper()
	var res debug.PickResult
	q := url.Values{"cluster": {cluster}, "key": {key}, "client": {client}}
	if code := cp.GetJSON("/debug/pick?"+q.Encode(), &res); code != http.StatusOK {
		cp.t.Fatalf("/debug/pick %s: status %d", q.Encode(), code)
	}
	return res
}

// Listen listens on addr, retrying briefly: a port a stopped server just
// released can take a moment to be free again.
func Listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	var err error
	for range 50 {
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			return l
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal(err)
	return nil
}

// WaitFor polls cond until it holds or the deadline passes.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WriteFile replaces path atomically, as editors and ConfigMap updates do.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TempFile writes content to a fresh endpoints.yaml and returns its path.
func TempFile(t testing.TB, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "endpoints.yaml")
	WriteFile(t, p, content)
	return p
}
