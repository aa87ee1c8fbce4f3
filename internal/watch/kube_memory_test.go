package watch

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ringxds/ringxds/internal/kubetest"
	"github.com/ringxds/ringxds/internal/model"
)

// kubeLiveHeap is the heap still in use after a full collection.
func kubeLiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// kubeCreateLabelled creates a Service with labels (not opted in unless
// optIn) and one slice of eps endpoints carrying the Service's labels, as
// the EndpointSlice controller writes it.
func kubeCreateLabelled(ctx context.Context, c kubernetes.Interface, ns, name string, lbls map[string]string, optIn bool, eps int) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
		// Headless: the test API server's Service IP range is too small
		// for 501 Services.
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if optIn {
		svc.Annotations = kubeOptIn(nil)
	}
	created, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("service %s: %w", name, err)
	}
	sl := kubeControllerSlice(nopTB{}, ns, name, lbls["team"], eps)
	sl.UID, sl.ResourceVersion, sl.CreationTimestamp, sl.ManagedFields = "", "", metav1.Time{}, nil
	sl.OwnerReferences[0].UID = created.UID
	for k, v := range lbls {
		sl.Labels[k] = v
	}
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("slice of %s: %w", name, err)
	}
	return nil
}

// nopTB lets kubeControllerSlice run off the test goroutine; its JSON round
// trip cannot fail.
type nopTB struct{ testing.TB }

func (nopTB) Helper()           {}
func (nopTB) Fatal(args ...any) { panic(fmt.Sprint(args...)) }

// TestKubeSliceCacheSelected runs the source against 500 Services outside
// its selector and one inside, each with a slice of 20 endpoints: with the
// selector it caches the one Service and its slice only, and publishes the
// same State either way. It logs the live heap each configuration adds
// (docs/kubernetes.md, "Memory and sizing"), asserting on counts only.
func TestKubeSliceCacheSelected(t *testing.T) {
	const others, eps = 500, 20
	env := kubetest.Start(t)
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 5000, 5000
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	kubeCreateMany(t, c, ns, others, eps)

	for _, tc := range []struct {
		selector string
		whole    bool
		cached   int
	}{
		{"team=a", false, 1},
		{"team=a", true, 1},
		{"", false, others + 1},
		{"", true, others + 1},
	} {
		t.Run(fmt.Sprintf("selector=%q/transform=%v", tc.selector, !tc.whole), func(t *testing.T) {
			before := kubeLiveHeap()
			r, stop := kubeRunQuiet(t, c, KubeOptions{Namespace: ns, ServiceSelector: tc.selector}, tc.whole)
			after := kubeLiveHeap()
			defer stop()
			for _, kind := range []string{"service", "endpointslice"} {
				if n := testutil.ToFloat64(r.src.metrics.cached.WithLabelValues(kind)); n != float64(tc.cached) {
					t.Errorf("%v %s objects cached, want %d", n, kind, tc.cached)
				}
			}
			if n := testutil.ToFloat64(r.src.metrics.events.WithLabelValues("endpointslice", "add")); n != float64(tc.cached) {
				t.Errorf("%v slice events, want %d", n, tc.cached)
			}
			s, _ := r.rec.last()
			if len(s.Clusters) != 1 || len(kubeAddrs(s, KubeClusterName(ns, "picked"))) != kubeReadyOf(eps) {
				t.Errorf("state %s, want picked.%s alone with its ready endpoints", kubeDescribe(s), ns)
			}
			runtime.KeepAlive(r)
			t.Logf("live heap added: %d KiB for %d Services and %d slices of %d endpoints",
				(int64(after)-int64(before))/1024, tc.cached, tc.cached, eps)
		})
	}
}

// kubeReadyOf is how many of n endpoints kubeControllerSlice makes ready.
func kubeReadyOf(n int) int {
	ready := 0
	for i := range n {
		if i%7 != 3 {
			ready++
		}
	}
	return ready
}

// kubeCreateMany creates n Services labelled team=other and one, picked,
// labelled team=a and opted in, each with one slice, from a few goroutines.
func kubeCreateMany(t *testing.T, c kubernetes.Interface, ns string, n, eps int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	names := make(chan int)
	errs := make(chan error, n+1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range names {
				name, lbls, optIn := fmt.Sprintf("other-%03d", i), map[string]string{"team": "other", "app": "x"}, false
				if i < 0 {
					name, lbls, optIn = "picked", map[string]string{"team": "a", "app": "picked"}, true
				}
				errs <- kubeCreateLabelled(ctx, c, ns, name, lbls, optIn, eps)
			}
		})
	}
	for i := -1; i < n; i++ {
		names <- i
	}
	close(names)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("created %d Services and slices in %v", n+1, time.Since(start).Round(time.Millisecond))
}

// kubeRunQuiet runs a source without logging (the logger's buffers would
// count as heap) until its first State, and returns it with a stop func.
func kubeRunQuiet(t *testing.T, c kubernetes.Interface, opts KubeOptions, whole bool) (kubeRunning, func()) {
	t.Helper()
	opts.Logger = zap.NewNop()
	src, err := NewKubeSource(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	src.keepWhole = whole
	rec := &kubeRecorder{notify: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, rec.publish) }()
	rec.waitFor(t, "the initial state", func(model.State) bool { return true })
	return kubeRunning{src: src, rec: rec}, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// kubeCacheHeap is the live heap n slices of eps endpoints take in an
// indexer like the informer's, whole or transformed.
func kubeCacheHeap(tb testing.TB, n, eps int, transform bool) float64 {
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{kubeIndexByService: kubeSliceServiceKey})
	before := kubeLiveHeap()
	for i := range n {
		var obj any = kubeControllerSlice(tb, "shop", fmt.Sprintf("svc-%04d", i), "a", eps)
		if transform {
			obj, _ = kubeTransformSlice(obj)
		}
		if err := store.Add(obj); err != nil {
			tb.Fatal(err)
		}
	}
	after := kubeLiveHeap()
	runtime.KeepAlive(store)
	return float64(int64(after) - int64(before))
}

// BenchmarkKubeSliceCacheHeap reports the bytes a cached slice costs, and
// each of its endpoints, whole and transformed: the fit of two cache sizes
// (500 slices of 1 and of 100 endpoints). Run with -benchtime=1x; the
// figures feed docs/kubernetes.md, "Memory and sizing".
func BenchmarkKubeSliceCacheHeap(b *testing.B) {
	const n, small, large = 500, 1, 100
	for _, transform := range []bool{false, true} {
		b.Run(fmt.Sprintf("transform=%v", transform), func(b *testing.B) {
			var perSlice, perEndpoint float64
			for b.Loop() {
				hs := kubeCacheHeap(b, n, small, transform)
				hl := kubeCacheHeap(b, n, large, transform)
				perEndpoint = (hl - hs) / float64(n*(large-small))
				perSlice = hs/n - perEndpoint*small
			}
			b.ReportMetric(perSlice, "B/slice")
			b.ReportMetric(perEndpoint, "B/endpoint")
		})
	}
}
