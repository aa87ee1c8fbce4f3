package watch_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/watch"
)

// fileWait bounds every wait for an event that must happen; it is generous
// for slow CI machines, and passing tests never use it up.
const fileWait = 5 * time.Second

// fileTestDebounce keeps tests fast; the burst test sets its own.
const fileTestDebounce = 30 * time.Millisecond

// fileYAML renders a single-cluster file with the given endpoint ports.
func fileYAML(ports ...int) string { return fileYAMLFade("10s", ports...) }

// fileYAMLFade is fileYAML with the given fade_in duration; "" omits
// fade_in.
func fileYAMLFade(fade string, ports ...int) string {
	var b strings.Builder
	b.WriteString("clusters:\n  - name: products\n")
	if fade != "" {
		fmt.Fprintf(&b, "    fade_in: {duration: %s}\n", fade)
	}
	b.WriteString("    endpoints:\n")
	for _, p := range ports {
		fmt.Fprintf(&b, "      - {address: 10.0.0.1, port: %d}\n", p)
	}
	return b.String()
}

func fileWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fileRun is a FileSource running in the background, its publications
// collected on a channel and its log kept for inspection.
type fileRun struct {
	src       *watch.FileSource
	reg       *prometheus.Registry
	logs      *observer.ObservedLogs
	published chan model.State
	done      chan error
}

func fileStart(t *testing.T, path string, debounce time.Duration) *fileRun {
	t.Helper()
	return fileStartWith(t, path, watch.FileOptions{Debounce: debounce})
}

// fileStartWith runs a FileSource with opts, its Logger and Registerer
// replaced by the test's, after passing it to each of setup.
func fileStartWith(t *testing.T, path string, opts watch.FileOptions, setup ...func(*watch.FileSource)) *fileRun {
	t.Helper()
	r := &fileRun{reg: prometheus.NewRegistry(), published: make(chan model.State, 100), done: make(chan error, 1)}
	core, logs := observer.New(zap.DebugLevel)
	r.logs = logs
	opts.Logger = zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
	opts.Registerer = r.reg
	src, err := watch.NewFileSource(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	r.src = src
	for _, f := range setup {
		f(src)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { r.done <- src.Run(ctx, func(s model.State) { r.published <- s }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("Run returned %v after cancel, want nil", err)
			}
		case <-time.After(fileWait):
			t.Error("Run did not return after cancel")
		}
	})
	return r
}

func (r *fileRun) next(t *testing.T) model.State {
	t.Helper()
	select {
	case s := <-r.published:
		return s
	case err := <-r.done:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(fileWait):
		t.Fatal("nothing published in time")
	}
	return model.State{}
}

// ports lists the ports of the only cluster, which is how these tests tell
// file versions apart.
func filePorts(s model.State) []uint32 {
	var out []uint32
	for _, c := range s.Clusters {
		for _, ep := range c.Endpoints {
			out = append(out, ep.Port)
		}
	}
	return out
}

func fileExpectPorts(t *testing.T, s model.State, want ...uint32) {
	t.Helper()
	if got := filePorts(s); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("published ports %v, want %v", got, want)
	}
}

// metric reads one sample of the file source's metrics from the registry.
func (r *fileRun) metric(t *testing.T, name, result string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["source"] != "file" || labels["result"] != result {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s{source=file,result=%q} not found", name, result)
	return 0
}

// waitProblems polls until the source reports problems matching want (nil:
// none), or fails at the deadline.
func (r *fileRun) waitProblems(t *testing.T, want func([]watch.Problem) bool) []watch.Problem {
	t.Helper()
	deadline := time.Now().Add(fileWait)
	for {
		ps := r.src.Problems()
		if want(ps) {
			return ps
		}
		if time.Now().After(deadline) {
			t.Fatalf("problems never reached the expected state; last %+v", ps)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFileReloadOnInPlaceWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, fileYAML(80))
	r := fileStart(t, path, fileTestDebounce)
	fileExpectPorts(t, r.next(t), 80)

	fileWrite(t, path, fileYAML(80, 81))
	fileExpectPorts(t, r.next(t), 80, 81)
}

func TestFileReloadOnAtomicRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "endpoints.yaml")
	fileWrite(t, path, fileYAML(80))
	r := fileStart(t, path, fileTestDebounce)
	fileExpectPorts(t, r.next(t), 80)

	tmp := filepath.Join(dir, ".endpoints.yaml.tmp")
	fileWrite(t, tmp, fileYAML(82))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	fileExpectPorts(t, r.next(t), 82)

	// A second rename proves the watch survived the first inode swap.
	fileWrite(t, tmp, fileYAML(83))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	fileExpectPorts(t, r.next(t), 83)
}

// fileConfigMapVersion writes one ConfigMap version the way the kubelet
// does: a timestamped directory, then an atomic swap of the ..data symlink.
func fileConfigMapVersion(t *testing.T, dir, version, content string) {
	t.Helper()
	vdir := filepath.Join(dir, "..2026_01_01_00_00_0"+version)
	if err := os.Mkdir(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	fileWrite(t, filepath.Join(vdir, "endpoints.yaml"), content)
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(vdir), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func TestFileReloadOnConfigMapSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	fileConfigMapVersion(t, dir, "1", fileYAML(80))
	path := filepath.Join(dir, "endpoints.yaml")
	if err := os.Symlink(filepath.Join("..data", "endpoints.yaml"), path); err != nil {
		t.Fatal(err)
	}
	r := fileStart(t, path, fileTestDebounce)
	fileExpectPorts(t, r.next(t), 80)

	// Only ..data changes; endpoints.yaml itself sees no event.
	fileConfigMapVersion(t, dir, "2", fileYAML(84))
	fileExpectPorts(t, r.next(t), 84)
	fileConfigMapVersion(t, dir, "3", fileYAML(85))
	fileExpectPorts(t, r.next(t), 85)
}

func TestFileBurstOfWritesPublishesOnceWithFinalContent(t *testing.T) {
	const debounce = 250 * time.Millisecond
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, fileYAML(80))
	r := fileStart(t, path, debounce)
	fileExpectPorts(t, r.next(t), 80)

	start := time.Now()
	for i := 1; i <= 20; i++ {
		fileWrite(t, path, fileYAML(80, 1000+i))
	}
	if took := time.Since(start); took >= debounce {
		t.Skipf("the 20 writes took %v, longer than the debounce; the machine is too slow to test coalescing", took)
	}
	var got []model.State
	for {
		s := r.next(t)
		got = append(got, s)
		if fmt.Sprint(filePorts(s)) == "[80 1020]" {
			break
		}
	}
	// Anything still in flight would arrive within one more debounce.
	select {
	case s := <-r.published:
		got = append(got, s)
	case <-time.After(2 * debounce):
	}
	if len(got) > 2 {
		t.Errorf("a burst of 20 writes published %d times, want 1 (at most 2)", len(got))
	}
	fileExpectPorts(t, got[len(got)-1], 80, 1020)
}

func TestFileInvalidFileKeepsLastGoodStateUntilFixed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, fileYAML(80))
	r := fileStart(t, path, fileTestDebounce)
	fileExpectPorts(t, r.next(t), 80)
	if n := r.metric(t, "ringxds_source_reloads_total", "error"); n != 0 {
		t.Fatalf("error reloads = %v before any bad input", n)
	}

	// Line 6 gets a port out of range.
	fileWrite(t, path, fileYAML(80, 70000))
	ps := r.waitProblems(t, func(ps []watch.Problem) bool { return len(ps) > 0 })
	p := ps[0]
	if p.Source != "file" || p.Object != path || !strings.Contains(p.Field, "line 6") ||
		!strings.Contains(p.Field, "clusters[0].endpoints[1].port") || !strings.Contains(p.Message, "outside 1..65535") {
		t.Errorf("problem %+v does not locate the bad port on line 6", p)
	}
	if p.Since.IsZero() {
		t.Error("problem has no Since")
	}
	if n := r.metric(t, "ringxds_source_reloads_total", "error"); n != 1 {
		t.Errorf("error reloads = %v, want 1", n)
	}
	if n := r.metric(t, "ringxds_source_problems", ""); n != 1 {
		t.Errorf("problems gauge = %v, want 1", n)
	}

	// The next publication must be the fix: the bad file published nothing.
	fileWrite(t, path, fileYAML(80, 81))
	fileExpectPorts(t, r.next(t), 80, 81)
	if ps := r.src.Problems(); len(ps) != 0 {
		t.Errorf("problems %+v remain after the fix", ps)
	}
	if n := r.metric(t, "ringxds_source_problems", ""); n != 0 {
		t.Errorf("problems gauge = %v after the fix, want 0", n)
	}
	if n := r.metric(t, "ringxds_source_reloads_total", "ok"); n < 2 {
		t.Errorf("ok reloads = %v, want at least 2", n)
	}
}

func TestFileDeletedThenRecreated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, fileYAML(80))
	r := fileStart(t, path, fileTestDebounce)
	fileExpectPorts(t, r.next(t), 80)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	r.waitProblems(t, func(ps []watch.Problem) bool {
		return len(ps) == 1 && strings.Contains(ps[0].Message, "does not exist")
	})
	fileWrite(t, path, fileYAML(86))
	fileExpectPorts(t, r.next(t), 86)
	r.waitProblems(t, func(ps []watch.Problem) bool { return len(ps) == 0 })
}

func TestFileUnchangedClustersAreNotRepublished(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, fileYAML(80))
	r := fileStart(t, path, fileTestDebounce)
	fileExpectPorts(t, r.next(t), 80)

	fileWrite(t, path, "# a comment changes nothing\n"+fileYAML(80))
	// Wait until the comment-only version has been read, then change for
	// real: the next publication must be the real change.
	deadline := time.Now().Add(fileWait)
	for r.metric(t, "ringxds_source_reloads_total", "ok") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the comment-only change was never reloaded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	fileWrite(t, path, fileYAML(87))
	fileExpectPorts(t, r.next(t), 87)
}

func TestFileFirstSeenMarksOnlyEndpointsAddedLater(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, fileYAML(80, 81))
	r := fileStart(t, path, fileTestDebounce)
	s := r.next(t)
	for _, ep := range s.Clusters[0].Endpoints {
		if !ep.FirstSeen.IsZero() {
			t.Errorf("endpoint %s present at the first load has FirstSeen %v, want zero (established)", ep.HostPort(), ep.FirstSeen)
		}
	}

	firstSeen := func(s model.State) map[uint32]time.Time {
		m := map[uint32]time.Time{}
		for _, ep := range s.Clusters[0].Endpoints {
			m[ep.Port] = ep.FirstSeen
		}
		return m
	}

	before := time.Now()
	fileWrite(t, path, fileYAML(80, 81, 82))
	s2 := r.next(t)
	fs2 := firstSeen(s2)
	if s2.ChangedAt.Before(before) || s2.ChangedAt.After(time.Now()) {
		t.Errorf("ChangedAt %v is not the time of the change (after %v)", s2.ChangedAt, before)
	}
	if !fs2[80].IsZero() || !fs2[81].IsZero() {
		t.Errorf("endpoints that stayed lost their established FirstSeen: %v", fs2)
	}
	if !fs2[82].Equal(s2.ChangedAt) {
		t.Errorf("added endpoint FirstSeen %v, want ChangedAt %v", fs2[82], s2.ChangedAt)
	}

	// 81 goes; 82 stays and keeps its FirstSeen.
	fileWrite(t, path, fileYAML(80, 82))
	s3 := r.next(t)
	if fs3 := firstSeen(s3); !fs3[82].Equal(fs2[82]) || !fs3[80].IsZero() {
		t.Errorf("FirstSeen changed for endpoints that stayed: %v, before %v", fs3, fs2)
	}

	// 81 comes back: it is new again.
	fileWrite(t, path, fileYAML(80, 81, 82))
	s4 := r.next(t)
	fs4 := firstSeen(s4)
	if !fs4[81].Equal(s4.ChangedAt) || !s4.ChangedAt.After(s2.ChangedAt) {
		t.Errorf("re-added endpoint FirstSeen %v, want the new ChangedAt %v", fs4[81], s4.ChangedAt)
	}
	if !fs4[82].Equal(fs2[82]) || !fs4[80].IsZero() {
		t.Errorf("FirstSeen changed for endpoints that stayed: %v", fs4)
	}
}

func TestFileLoadRefusesAnInvalidOrMissingFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "endpoints.yaml")

	src, err := watch.NewFileSource(path, watch.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Load(); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Load of a missing file: %v, want a does-not-exist error", err)
	}

	fileWrite(t, path, "clusters:\n  - name: products\n    lb_polcy: maglev\n    endpoints: [{address: 10.0.0.1, port: 80}]\n")
	_, err = src.Load()
	if err == nil || !strings.HasPrefix(err.Error(), path+":3:5: clusters[0].lb_polcy") {
		t.Errorf("Load of an invalid file: %v, want an error at %s:3:5", err, path)
	}
	if ps := src.Problems(); len(ps) != 1 || ps[0].Field != "line 3, clusters[0].lb_polcy" {
		t.Errorf("Problems after a failed Load = %+v", ps)
	}

	fileWrite(t, path, fileYAML(80))
	st, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	fileExpectPorts(t, st, 80)
	if ps := src.Problems(); len(ps) != 0 {
		t.Errorf("Problems after a good Load = %+v", ps)
	}
}

func TestFileRunAfterLoadPublishesTheLoadedState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, fileYAML(80))
	src, err := watch.NewFileSource(path, watch.FileOptions{Debounce: fileTestDebounce})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Load(); err != nil {
		t.Fatal(err)
	}
	// The file goes bad between Load and Run: Run still serves what Load saw.
	fileWrite(t, path, "clusters: [\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	published := make(chan model.State, 1)
	go func() { _ = src.Run(ctx, func(s model.State) { published <- s }) }()
	select {
	case s := <-published:
		fileExpectPorts(t, s, 80)
	case <-time.After(fileWait):
		t.Fatal("Run published nothing")
	}
}

func TestFileFromBytesPublishesOnceAndWaits(t *testing.T) {
	src, err := watch.NewFileSourceFromBytes(examples.DefaultEndpointsName, examples.DefaultEndpoints, watch.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	published := make(chan model.State, 2)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, func(s model.State) { published <- s }) }()
	select {
	case s := <-published:
		if len(s.Clusters) != 3 {
			t.Errorf("published %d clusters, want the example's 3", len(s.Clusters))
		}
	case <-time.After(fileWait):
		t.Fatal("nothing published")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v after cancel", err)
		}
	case <-time.After(fileWait):
		t.Fatal("Run did not return after cancel")
	}
	if len(published) != 0 {
		t.Errorf("in-memory content was published more than once")
	}

	bad, err := watch.NewFileSourceFromBytes("builtin.yaml", []byte("clusters: 3\n"), watch.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Run(context.Background(), func(model.State) { t.Error("invalid content was published") })
	if err == nil || !strings.Contains(err.Error(), "builtin.yaml:1:11: clusters") {
		t.Errorf("Run on invalid in-memory content: %v, want an error at builtin.yaml:1:11", err)
	}
}

func TestFileOptionsAreChecked(t *testing.T) {
	if _, err := watch.NewFileSource("", watch.FileOptions{}); err == nil {
		t.Error("an empty path was accepted")
	}
	if _, err := watch.NewFileSource("x.yaml", watch.FileOptions{Debounce: -time.Second}); err == nil {
		t.Error("a negative debounce was accepted")
	}
	// Two sources on one registry share the metrics instead of failing.
	reg := prometheus.NewRegistry()
	for range 2 {
		if _, err := watch.NewFileSource("x.yaml", watch.FileOptions{Registerer: reg}); err != nil {
			t.Fatalf("second source on one registry: %v", err)
		}
	}
}

func TestFileRemovedDirectoryIsLogged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "conf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "endpoints.yaml")
	fileWrite(t, path, fileYAML(80))
	core, logs := observer.New(zap.ErrorLevel)
	src, err := watch.NewFileSource(path, watch.FileOptions{Logger: zap.New(core), Debounce: fileTestDebounce})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	published := make(chan model.State, 10)
	go func() { _ = src.Run(ctx, func(s model.State) { published <- s }) }()
	select {
	case <-published:
	case <-time.After(fileWait):
		t.Fatal("nothing published")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(fileWait)
	for logs.FilterMessageSnippet("directory was removed").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no log said the directory was removed; logs: %v", logs.All())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fileLoad writes content and loads it, failing the test on an error.
func fileLoad(t *testing.T, src *watch.FileSource, path, content string) model.State {
	t.Helper()
	fileWrite(t, path, content)
	st, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// fileEndpoint is the endpoint of the only cluster with the given port.
func fileEndpoint(t *testing.T, s model.State, port uint32) model.Endpoint {
	t.Helper()
	for _, ep := range s.Clusters[0].Endpoints {
		if ep.Port == port {
			return ep
		}
	}
	t.Fatalf("port %d is not in %+v", port, s.Clusters[0].Endpoints)
	return model.Endpoint{}
}

// fileExpectDeparted checks the only cluster's departures.
func fileExpectDeparted(t *testing.T, s model.State, want ...model.Departure) {
	t.Helper()
	got := s.Clusters[0].Departed
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = reflect.DeepEqual(got[i].Endpoint, want[i].Endpoint) && got[i].Gone.Equal(want[i].Gone)
	}
	if !ok {
		t.Fatalf("Departed %+v, want %+v", got, want)
	}
}

func TestFileDeparturesDuringFadeIn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	src, err := watch.NewFileSource(path, watch.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := fileLoad(t, src, path, fileYAML(80, 81))
	b := fileEndpoint(t, st, 81)
	if st = fileLoad(t, src, path, fileYAML(80, 81, 82)); st.Clusters[0].Departed != nil {
		t.Fatalf("an arrival recorded departures: %+v", st.Clusters[0].Departed)
	}

	// 81 leaves while 82 fades: the plan must still replay it.
	st = fileLoad(t, src, path, fileYAML(80, 82))
	want := model.Departure{Endpoint: b, Gone: st.ChangedAt}
	fileExpectDeparted(t, st, want)
	fileExpectPorts(t, st, 80, 82)

	// Later reloads carry it, also when it comes back and fades in again.
	fileExpectDeparted(t, fileLoad(t, src, path, "# unchanged\n"+fileYAML(80, 82)), want)
	st = fileLoad(t, src, path, fileYAML(80, 81, 82))
	fileExpectDeparted(t, st, want)
	if ep := fileEndpoint(t, st, 81); !ep.FirstSeen.Equal(st.ChangedAt) {
		t.Fatalf("the returning endpoint has FirstSeen %v, want the reload time %v", ep.FirstSeen, st.ChangedAt)
	}
}

func TestFileNoDeparturesWithoutAFade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	src, err := watch.NewFileSource(path, watch.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A removal from a steady cluster needs no replay.
	fileLoad(t, src, path, fileYAML(80, 81))
	if st := fileLoad(t, src, path, fileYAML(80)); st.Clusters[0].Departed != nil {
		t.Fatalf("a removal with no fade under way recorded %+v", st.Clusters[0].Departed)
	}

	// Nor does a cluster without fade_in, whatever its FirstSeen says.
	fileLoad(t, src, path, fileYAMLFade("", 80, 81))
	fileLoad(t, src, path, fileYAMLFade("", 80, 81, 82))
	if st := fileLoad(t, src, path, fileYAMLFade("", 80, 82)); st.Clusters[0].Departed != nil {
		t.Fatalf("a cluster without fade_in recorded %+v", st.Clusters[0].Departed)
	}
}

func TestFileDeparturesEndWithTheLastFade(t *testing.T) {
	// The file source reads the wall clock, so the fade is short, but long
	// enough for three reloads on a loaded machine; fades end on whole
	// seconds (fadein.Curve.EndStep), so this waits 2 to 3 s.
	const fade = 2 * time.Second
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, fileYAMLFade(fade.String(), 80, 81))
	r := fileStart(t, path, fileTestDebounce)
	b := fileEndpoint(t, r.next(t), 81)

	fileWrite(t, path, fileYAMLFade(fade.String(), 80, 81, 82))
	start := fileEndpoint(t, r.next(t), 82).FirstSeen
	end := fadein.Curve{Duration: fade}.EndStep(start)

	fileWrite(t, path, fileYAMLFade(fade.String(), 80, 82))
	st := r.next(t)
	if !st.ChangedAt.Before(end) {
		t.Skipf("the removal was read at %v, after the fade ended at %v; the machine is too slow for this test", st.ChangedAt, end)
	}
	fileExpectDeparted(t, st, model.Departure{Endpoint: b, Gone: st.ChangedAt})

	// Once the fade is over, a reload drops the departure; the State
	// differs in nothing else, and is published all the same.
	time.Sleep(time.Until(end))
	fileWrite(t, path, "# touched\n"+fileYAMLFade(fade.String(), 80, 82))
	st = r.next(t)
	fileExpectPorts(t, st, 80, 82)
	fileExpectDeparted(t, st)
	if got := fileEndpoint(t, st, 82).FirstSeen; !got.Equal(start) {
		t.Fatalf("82 has FirstSeen %v after the fade, want its start %v kept", got, start)
	}
}
