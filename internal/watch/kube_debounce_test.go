package watch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ringxds/ringxds/internal/model"
)

// This file measures the coalescing defaults (docs/kubernetes.md,
// "Coalescing"): BenchmarkKubeDebounce replays Kubernetes event traces
// against the real KubeSource under several debounce settings, and
// TestKubeSourceDebounce checks the coalescing property itself.
//
// Both use client-go's fake clientset: its informers watch the object
// tracker, so an event reaches the source microseconds after the write (a
// local API server takes 6-12 ms, a constant that shifts every setting
// alike) and no API server is needed.

const kubeDebounceNS = "shop"

// kubeUncapped stands for "no MaxDelay": longer than any trace here, so
// only the quiet period ends a burst.
const kubeUncapped = time.Hour

// kubeDebounceTail is how long a replay waits after a repetition's last
// write: longer than the longest quiet period measured (2 s), so every
// setting has published a repetition before the next one starts and the
// repetitions do not bleed into each other.
const kubeDebounceTail = 2500 * time.Millisecond

// kubeDebounceSetting is one coalescing configuration under measurement.
type kubeDebounceSetting struct {
	debounce, maxDelay time.Duration
}

// option is the KubeOptions.Debounce value for the setting: a zero Debounce
// selects the default, so "no debounce" is asked for as 1 ns, which
// publishes as soon as the loop sees the event.
func (s kubeDebounceSetting) option() time.Duration { return max(s.debounce, time.Nanosecond) }

func kubeDurationName(d time.Duration) string {
	switch d {
	case 0:
		return "0"
	case kubeUncapped:
		return "none"
	}
	return d.String()
}

// kubeDebounceSettings is every debounce with MaxDelay 1 s (except 2 s,
// which the source rejects as longer than its cap) and every debounce
// uncapped (except 0, where the cap cannot act, so both rows would measure
// the same code path), plus tighter caps for the 100 ms default, to see
// whether the cap should come down.
func kubeDebounceSettings() []kubeDebounceSetting {
	debounces := []time.Duration{0, 25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
		150 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}
	var out []kubeDebounceSetting
	for _, d := range debounces {
		if d <= time.Second {
			out = append(out, kubeDebounceSetting{d, time.Second})
		}
		if d > 0 {
			out = append(out, kubeDebounceSetting{d, kubeUncapped})
		}
		if d == 100*time.Millisecond {
			out = append(out, kubeDebounceSetting{d, 250 * time.Millisecond}, kubeDebounceSetting{d, 500 * time.Millisecond})
		}
	}
	return out
}

// kubePodPhase is what the EndpointSlice controller writes for a Pod.
type kubePodPhase int

const (
	kubePodPending     kubePodPhase = iota // no IP yet: in no slice
	kubePodNotReady                        // IP assigned, readiness probe not yet passed
	kubePodReady                           // serving
	kubePodTerminating                     // deleted, still in its grace period
	kubePodGone                            // removed from the slice
)

type kubePodChange struct {
	at    time.Duration
	pod   int
	phase kubePodPhase
}

// kubeSimService is one Service's Pods and the EndpointSlice writes their
// changes cause. With EndpointUpdatesBatchPeriod at its default of 0 the
// controller syncs a Service as soon as it observes a Pod change, so every
// Pod change is one write of the slice that holds the Pod, carrying the
// slice's whole content. Which slice holds a Pod (index mod the slice
// count) only decides which object a write touches.
type kubeSimService struct {
	name    string
	nslices int
	ips     []string
	initial []kubePodPhase
	changes []kubePodChange
}

func (s *kubeSimService) addPod(ip string, phase kubePodPhase) int {
	s.ips = append(s.ips, ip)
	s.initial = append(s.initial, phase)
	return len(s.ips) - 1
}

func (s *kubeSimService) set(at time.Duration, pod int, phase kubePodPhase) {
	s.changes = append(s.changes, kubePodChange{at, pod, phase})
}

// slice is slice i's content with the Pods in the given phases.
func (s *kubeSimService) slice(i int, phase []kubePodPhase) *discoveryv1.EndpointSlice {
	yes, no := true, false
	var eps []discoveryv1.Endpoint
	for p, ph := range phase {
		if p%s.nslices != i {
			continue
		}
		// The conditions the controller writes (KEP-1672): a terminating
		// Pod is not ready but still serving.
		var c discoveryv1.EndpointConditions
		switch ph {
		case kubePodNotReady:
			c = discoveryv1.EndpointConditions{Ready: &no, Serving: &no, Terminating: &no}
		case kubePodReady:
			c = discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no}
		case kubePodTerminating:
			c = discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}
		default:
			continue
		}
		eps = append(eps, discoveryv1.Endpoint{Addresses: []string{s.ips[p]}, Conditions: c})
	}
	return kubeSlice(kubeDebounceNS, s.name, fmt.Sprintf("%s-%d", s.name, i), discoveryv1.AddressTypeIPv4, "http", 8080, eps)
}

// kubeTraceWrite is one slice update, at an offset from the replay start.
type kubeTraceWrite struct {
	at    time.Duration
	slice *discoveryv1.EndpointSlice
}

// kubeTrace is a replayable sequence of slice writes made of ops
// repetitions of one scenario, each on its own Service.
type kubeTrace struct {
	name    string
	ops     int
	initial []runtime.Object
	writes  []kubeTraceWrite
	end     time.Duration // the last write's offset
}

// add appends one repetition, starting kubeDebounceTail after the previous
// one's last write.
func (tr *kubeTrace) add(s *kubeSimService) {
	start := time.Duration(0)
	if tr.ops > 0 {
		start = tr.end + kubeDebounceTail
	}
	tr.ops++
	tr.initial = append(tr.initial, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: kubeDebounceNS, Name: s.name, Annotations: kubeOptIn(nil)},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	})
	phase := slices.Clone(s.initial)
	for i := range s.nslices {
		tr.initial = append(tr.initial, s.slice(i, phase))
	}
	changes := slices.Clone(s.changes)
	slices.SortStableFunc(changes, func(a, b kubePodChange) int { return int(a.at - b.at) })
	for _, c := range changes {
		phase[c.pod] = c.phase
		at := start + c.at
		tr.writes = append(tr.writes, kubeTraceWrite{at, s.slice(c.pod%s.nslices, phase)})
		tr.end = max(tr.end, at)
	}
}

func kubeUniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// Timing assumptions shared by the traces. They describe a healthy cluster:
// scheduling and the CNI give a new Pod its IP (and so its not-ready
// endpoint) 0.3-1 s after creation; controllers react to a status change
// 10-50 ms after it (informer delivery plus a sync); an application shuts
// down 0.1-1 s after SIGTERM, when its Pod and endpoint are removed.
var (
	kubeIPDelay    = [2]time.Duration{300 * time.Millisecond, time.Second}
	kubeReact      = [2]time.Duration{10 * time.Millisecond, 50 * time.Millisecond}
	kubeShutdown   = [2]time.Duration{100 * time.Millisecond, time.Second}
	kubeReadyDelay = [2]time.Duration{500 * time.Millisecond, 3 * time.Second}
)

// kubeIP is Pod i of a group (old or new Pods) in a repetition's /16.
func kubeIP(net, group, i int) string {
	return fmt.Sprintf("10.%d.%d.%d", net, 2*group+i/250, i%250+1)
}

// kubeRollout is a rolling update of a Deployment with maxSurge 25% (the
// controller rounds surge up: 8 Pods of 30) and maxUnavailable 0, its
// endpoints spread over three slices. The new ReplicaSet starts with the
// surge; each new Pod becomes ready 0.5-3 s after getting its IP. Every
// time a new Pod is ready the Deployment controller (after 10-50 ms) scales
// the old ReplicaSet down by one, whose Pod turns terminating and is
// removed 0.1-1 s later, and scales the new one up by one while it has
// fewer Pods than replicas.
func kubeRollout(replicas int) func(*rand.Rand, string, int) *kubeSimService {
	return func(rng *rand.Rand, name string, net int) *kubeSimService {
		surge := (replicas + 3) / 4
		s := &kubeSimService{name: name, nslices: 3}
		var old []int
		for i := range replicas {
			old = append(old, s.addPod(kubeIP(net, 0, i), kubePodReady))
		}
		var readyAt []time.Duration // new Pods' ready times, not yet reacted to
		created := 0
		create := func(at time.Duration) {
			p := s.addPod(kubeIP(net, 1, created), kubePodPending)
			created++
			ip := at + kubeUniform(rng, kubeIPDelay[0], kubeIPDelay[1])
			ready := ip + kubeUniform(rng, kubeReadyDelay[0], kubeReadyDelay[1])
			s.set(ip, p, kubePodNotReady)
			s.set(ready, p, kubePodReady)
			readyAt = append(readyAt, ready)
		}
		for range surge {
			create(0)
		}
		for len(readyAt) > 0 {
			i := slices.Index(readyAt, slices.Min(readyAt))
			ready := readyAt[i]
			readyAt = slices.Delete(readyAt, i, i+1)
			react := ready + kubeUniform(rng, kubeReact[0], kubeReact[1])
			j := rng.IntN(len(old))
			victim := old[j]
			old = slices.Delete(old, j, j+1)
			s.set(react, victim, kubePodTerminating)
			s.set(react+kubeUniform(rng, kubeShutdown[0], kubeShutdown[1]), victim, kubePodGone)
			if created < replicas {
				create(react)
			}
		}
		return s
	}
}

// kubeScaleUp is an HPA scale-up from 10 to 20 Pods over two slices: the
// ten new Pods get their IPs 0.3-0.8 s after the scale-up and are ready
// 0.3-1.5 s after that, so they arrive within about 2 s.
func kubeScaleUp(rng *rand.Rand, name string, net int) *kubeSimService {
	s := &kubeSimService{name: name, nslices: 2}
	for i := range 10 {
		s.addPod(kubeIP(net, 0, i), kubePodReady)
	}
	for i := range 10 {
		p := s.addPod(kubeIP(net, 1, i), kubePodPending)
		ip := kubeUniform(rng, 300*time.Millisecond, 800*time.Millisecond)
		s.set(ip, p, kubePodNotReady)
		s.set(ip+kubeUniform(rng, 300*time.Millisecond, 1500*time.Millisecond), p, kubePodReady)
	}
	return s
}

// kubeRestart is one Pod of 12 (one slice) deleted, as by an eviction or
// kubectl delete: it turns terminating and is removed 0.1-1 s later; its
// ReplicaSet creates a replacement 10-50 ms after the deletion, which gets
// its IP 0.3-1 s later and is ready 0.5-3 s after that. The ring changes
// twice, each change alone: the lone-change latency.
func kubeRestart(rng *rand.Rand, name string, net int) *kubeSimService {
	s := &kubeSimService{name: name, nslices: 1}
	for i := range 12 {
		s.addPod(kubeIP(net, 0, i), kubePodReady)
	}
	victim := rng.IntN(12)
	s.set(0, victim, kubePodTerminating)
	s.set(kubeUniform(rng, kubeShutdown[0], kubeShutdown[1]), victim, kubePodGone)
	p := s.addPod(kubeIP(net, 1, 0), kubePodPending)
	ip := kubeUniform(rng, kubeReact[0], kubeReact[1]) + kubeUniform(rng, kubeIPDelay[0], kubeIPDelay[1])
	s.set(ip, p, kubePodNotReady)
	s.set(ip+kubeUniform(rng, kubeReadyDelay[0], kubeReadyDelay[1]), p, kubePodReady)
	return s
}

// kubeDebounceTraces builds the traces from fixed seeds, so every run
// replays the same writes at the same offsets. Repetitions are chosen to
// keep the whole benchmark under three minutes of wall time.
func kubeDebounceTraces() []*kubeTrace {
	scenarios := []struct {
		name string
		seed uint64 // per scenario, so adding one leaves the others' writes alone
		reps int
		gen  func(*rand.Rand, string, int) *kubeSimService
	}{
		{"rollout", 1, 2, kubeRollout(30)},
		// A large Deployment: 300 Pods fill three slices of 100 (the
		// controller's default maximum), and its events come so densely
		// that only the cap ends a burst.
		{"rollout300", 2, 1, kubeRollout(300)},
		{"scaleup", 3, 4, kubeScaleUp},
		{"restart", 4, 16, kubeRestart},
	}
	var out []*kubeTrace
	for _, sc := range scenarios {
		rng := rand.New(rand.NewPCG(2026, sc.seed))
		tr := &kubeTrace{name: sc.name}
		for r := range sc.reps {
			tr.add(sc.gen(rng, fmt.Sprintf("%s-%d", sc.name, r), r+1))
		}
		out = append(out, tr)
	}
	return out
}

// kubeDebouncePush is one published State and when it was published.
type kubeDebouncePush struct {
	at    time.Time
	state model.State
}

// kubeDebounceRecorder collects what one source publishes.
type kubeDebounceRecorder struct {
	mu      sync.Mutex
	pushes  []kubeDebouncePush
	started chan struct{} // closed at the first (initial) State
	notify  chan struct{}
	once    sync.Once
}

func kubeNewDebounceRecorder() *kubeDebounceRecorder {
	return &kubeDebounceRecorder{started: make(chan struct{}), notify: make(chan struct{}, 1)}
}

func (r *kubeDebounceRecorder) publish(s model.State) {
	now := time.Now()
	r.mu.Lock()
	r.pushes = append(r.pushes, kubeDebouncePush{now, s})
	r.mu.Unlock()
	r.once.Do(func() { close(r.started) })
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// reset forgets what was published so far (the initial State).
func (r *kubeDebounceRecorder) reset() {
	r.mu.Lock()
	r.pushes = nil
	r.mu.Unlock()
}

func (r *kubeDebounceRecorder) snapshot() []kubeDebouncePush {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.pushes)
}

// latencies are the sorted publish-minus-ChangedAt times of the pushes:
// how long the earliest event each State reflects waited for it.
func (r *kubeDebounceRecorder) latencies() []time.Duration {
	var out []time.Duration
	for _, p := range r.snapshot() {
		out = append(out, p.at.Sub(p.state.ChangedAt))
	}
	slices.Sort(out)
	return out
}

// kubeDebounceEnv is a fake clientset with sources running on it.
type kubeDebounceEnv struct {
	client  *fake.Clientset
	watches atomic.Int64
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	recs    []*kubeDebounceRecorder
}

func kubeNewDebounceEnv(objs ...runtime.Object) *kubeDebounceEnv {
	e := &kubeDebounceEnv{client: fake.NewClientset(objs...)}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	// The informers list, then watch; the fake delivers an event written
	// before the watch opens only when it opens, late. Counting the watches
	// lets the writes start once all are open.
	e.client.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
		e.watches.Add(1)
		return false, nil, nil
	})
	return e
}

func (e *kubeDebounceEnv) start(tb testing.TB, debounce, maxDelay time.Duration) *kubeDebounceRecorder {
	tb.Helper()
	src, err := NewKubeSource(e.client, KubeOptions{Namespace: kubeDebounceNS, Debounce: debounce, MaxDelay: maxDelay})
	if err != nil {
		tb.Fatalf("NewKubeSource(debounce %v, max delay %v): %v", debounce, maxDelay, err)
	}
	rec := kubeNewDebounceRecorder()
	e.recs = append(e.recs, rec)
	e.wg.Go(func() {
		if err := src.Run(e.ctx, rec.publish); err != nil {
			tb.Errorf("Run: %v", err)
		}
	})
	return rec
}

// ready waits for every source's initial State and open watches (two per
// source), then forgets the initial States.
func (e *kubeDebounceEnv) ready(tb testing.TB) {
	tb.Helper()
	deadline := time.After(kubeWait)
	for _, rec := range e.recs {
		select {
		case <-rec.started:
		case <-deadline:
			tb.Fatalf("sources did not publish their initial state within %v", kubeWait)
		}
	}
	for e.watches.Load() < int64(2*len(e.recs)) {
		select {
		case <-deadline:
			tb.Fatalf("%d of %d watches open after %v", e.watches.Load(), 2*len(e.recs), kubeWait)
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The reactor runs just before the tracker registers the watch.
	time.Sleep(100 * time.Millisecond)
	for _, rec := range e.recs {
		rec.reset()
	}
}

func (e *kubeDebounceEnv) stop() {
	e.cancel()
	e.wg.Wait()
}

func (e *kubeDebounceEnv) update(tb testing.TB, sl *discoveryv1.EndpointSlice) {
	tb.Helper()
	if _, err := e.client.DiscoveryV1().EndpointSlices(sl.Namespace).Update(e.ctx, sl, metav1.UpdateOptions{}); err != nil {
		tb.Fatalf("update slice %s: %v", sl.Name, err)
	}
}

// kubeReplay runs one source per setting side by side on one fake
// clientset and replays tr against them in real time. Running the settings
// together costs one replay instead of one per setting, and every source
// sees the same events at the same instants; each rebuild takes
// microseconds, so the sources barely compete for the CPU.
func kubeReplay(tb testing.TB, tr *kubeTrace, settings []kubeDebounceSetting) []*kubeDebounceRecorder {
	tb.Helper()
	e := kubeNewDebounceEnv(tr.initial...)
	defer e.stop()
	for _, s := range settings {
		e.start(tb, s.option(), s.maxDelay)
	}
	e.ready(tb)
	var lag time.Duration
	start := time.Now()
	for _, w := range tr.writes {
		time.Sleep(time.Until(start.Add(w.at)))
		lag = max(lag, time.Since(start.Add(w.at)))
		e.update(tb, w.slice)
	}
	time.Sleep(kubeDebounceTail)
	if lag > 20*time.Millisecond {
		// The figures stay meaningful, but a loaded machine stretches the
		// trace; say so next to them.
		tb.Logf("%s: a write was up to %v late", tr.name, lag.Round(time.Millisecond))
	}
	return e.recs
}

// kubePercentile is the nearest-rank q-quantile of sorted.
func kubePercentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func kubeMillis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkKubeDebounce reports, per trace and setting, the States
// published per operation (a rollout, a scale-up, a restart) and the
// change-to-publish latency of those States. It runs in real time, about
// two and a half minutes; run it with
//
//	go test -run '^$' -bench KubeDebounce -benchtime 1x ./internal/watch/
//
// Each sub-benchmark only reports figures measured by its trace's replay,
// so ns/op is suppressed.
func BenchmarkKubeDebounce(b *testing.B) {
	settings := kubeDebounceSettings()
	for _, tr := range kubeDebounceTraces() {
		b.Run(tr.name, func(b *testing.B) {
			results := kubeReplay(b, tr, settings)
			// Group by debounce so each debounce is one sub-benchmark with
			// one child per MaxDelay.
			var debounces []time.Duration
			for _, s := range settings {
				if !slices.Contains(debounces, s.debounce) {
					debounces = append(debounces, s.debounce)
				}
			}
			for _, d := range debounces {
				b.Run("debounce="+kubeDurationName(d), func(b *testing.B) {
					for i, s := range settings {
						if s.debounce != d {
							continue
						}
						lat := results[i].latencies()
						b.Run("max="+kubeDurationName(s.maxDelay), func(b *testing.B) {
							for range b.N {
							}
							b.ReportMetric(0, "ns/op")
							b.ReportMetric(float64(len(tr.writes))/float64(tr.ops), "writes/op")
							b.ReportMetric(float64(len(lat))/float64(tr.ops), "pushes/op")
							b.ReportMetric(kubeMillis(kubePercentile(lat, 0.5)), "p50_ms")
							b.ReportMetric(kubeMillis(kubePercentile(lat, 0.99)), "p99_ms")
							b.ReportMetric(kubeMillis(kubePercentile(lat, 1)), "max_ms")
						})
					}
				})
			}
		})
	}
}

// TestKubeSourceDebounce checks the coalescing rule on the real source: a
// burst of writes inside the quiet period is published as one State, and a
// trickle faster than the quiet period is still published within MaxDelay.
// The writes are microseconds apart (or 50 ms, against a 300 ms quiet
// period), so only a stall of hundreds of milliseconds could change the
// outcome.
func TestKubeSourceDebounce(t *testing.T) {
	eps := func(net, n int) []discoveryv1.Endpoint {
		var out []discoveryv1.Endpoint
		for i := range n {
			out = append(out, kubeEP(fmt.Sprintf("10.%d.%d.%d", net, i/250, i%250+1)))
		}
		return out
	}
	service := func(name string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: kubeDebounceNS, Name: name, Annotations: kubeOptIn(nil)},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}
	}
	slice := func(name string, eps []discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return kubeSlice(kubeDebounceNS, name, name+"-0", discoveryv1.AddressTypeIPv4, "http", 8080, eps)
	}
	size := func(s model.State, name string) int {
		c, ok := s.Cluster(KubeClusterName(kubeDebounceNS, name))
		if !ok {
			return 0
		}
		return len(c.Endpoints)
	}

	t.Run("BurstIsOneState", func(t *testing.T) {
		t.Parallel()
		const debounce, writes = 500 * time.Millisecond, 20
		e := kubeNewDebounceEnv(service("burst"), slice("burst", eps(1, 1)))
		t.Cleanup(e.stop)
		rec := e.start(t, debounce, 10*time.Second)
		e.ready(t)

		before := time.Now()
		for n := 2; n <= writes+1; n++ {
			e.update(t, slice("burst", eps(1, n)))
		}
		// Long enough for the State and for any second one.
		time.Sleep(3 * debounce)
		pushes := rec.snapshot()
		if len(pushes) != 1 {
			t.Fatalf("%d writes within the quiet period published %d states, want 1", writes, len(pushes))
		}
		p := pushes[0]
		if got := size(p.state, "burst"); got != writes+1 {
			t.Fatalf("the state has %d endpoints, want all %d", got, writes+1)
		}
		// The quiet timer starts at the first event, so the State waits at
		// least the quiet period, and ChangedAt is that first event.
		if p.state.ChangedAt.Before(before) || p.at.Sub(p.state.ChangedAt) < debounce {
			t.Fatalf("ChangedAt %v, published %v after it; want after the first write (%v) and at least %v before publishing",
				p.state.ChangedAt, p.at.Sub(p.state.ChangedAt), before, debounce)
		}
	})

	t.Run("TrickleIsCapped", func(t *testing.T) {
		t.Parallel()
		const (
			debounce = 300 * time.Millisecond
			maxDelay = time.Second
			every    = 50 * time.Millisecond
			writes   = 60 // 3 s of writes
			// Headroom for timers on a loaded 2-core machine; without the
			// cap the first State would wait for the whole trickle.
			slack = 500 * time.Millisecond
		)
		e := kubeNewDebounceEnv(service("trickle"), slice("trickle", eps(2, 1)))
		t.Cleanup(e.stop)
		rec := e.start(t, debounce, maxDelay)
		e.ready(t)

		start := time.Now()
		for i := range writes {
			time.Sleep(time.Until(start.Add(time.Duration(i) * every)))
			e.update(t, slice("trickle", eps(2, i+2)))
		}
		last := time.Now()
		time.Sleep(2 * debounce)
		pushes := rec.snapshot()
		during := 0
		for _, p := range pushes {
			if p.at.Before(last) {
				during++
			}
			if wait := p.at.Sub(p.state.ChangedAt); wait > maxDelay+slack {
				t.Errorf("a state waited %v for publishing, want at most the max delay %v (+%v slack)", wait, maxDelay, slack)
			}
		}
		// A 3 s trickle with a 1 s cap: states at about 1, 2 and 3 s, and
		// one after the trickle; far fewer than one per write.
		if during < 2 || len(pushes) > 8 {
			t.Fatalf("%d writes every %v published %d states, %d during the writes; want at least 2 during them and at most 8 in all",
				writes, every, len(pushes), during)
		}
		if got := size(pushes[len(pushes)-1].state, "trickle"); got != writes+1 {
			t.Fatalf("the last state has %d endpoints, want %d", got, writes+1)
		}
	})
}
