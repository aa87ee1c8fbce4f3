package watch

import (
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ringxds/ringxds/internal/model"
)

// An API server that refuses connections (down, or restarting) is the
// common outage, and the reflectors retry such watches without calling
// the watch error handler. Each refused watch must still be counted in
// ringxds_kube_watch_errors_total and logged, once, or the outage leaves
// no trace while the served State is frozen; once the API server answers
// again the source carries on.
func TestKubeRefusedWatchIsReported(t *testing.T) {
	client := fake.NewClientset()
	var down atomic.Bool
	var refused, opened atomic.Int64
	down.Store(true)
	client.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
		if !down.Load() {
			opened.Add(1)
			return false, nil, nil
		}
		refused.Add(1)
		return true, nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	})
	core, logs := observer.New(zap.WarnLevel)
	r := kubeStartSource(t, client, KubeOptions{Namespace: "ns", Logger: zap.New(core), Registerer: prometheus.NewRegistry()})

	// Both informers have listed; their first watches are refused at once.
	deadline := time.Now().Add(kubeWait)
	for refused.Load() < 2 || testutil.ToFloat64(r.src.metrics.watchErrors) < float64(refused.Load()) {
		if time.Now().After(deadline) {
			t.Fatalf("%d watches refused, %v counted in ringxds_kube_watch_errors_total", refused.Load(), testutil.ToFloat64(r.src.metrics.watchErrors))
		}
		time.Sleep(10 * time.Millisecond)
	}
	down.Store(false)
	n := refused.Load()
	if got := testutil.ToFloat64(r.src.metrics.watchErrors); got != float64(n) {
		t.Fatalf("%d watches refused, %v counted: each must count once", n, got)
	}
	if got := logs.FilterMessageSnippet("watch interrupted").Len(); got != int(n) {
		t.Fatalf("%d watches refused, %d logged", n, got)
	}

	// The reflectors retry within their first backoff (0.8 to 1.6 s). The
	// fake delivers no event written before a watch opens, so the write
	// waits for both; the reactor runs just before the watch is registered.
	for opened.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 watches reopened", opened.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	kubeCreateService(t, client, "ns", "svc", kubeOptIn(nil))
	kubeApplySlice(t, client, kubeSlice("ns", "svc", "svc-a", discoveryv1.AddressTypeIPv4, "http", 8080, kubeReadyEPs("10.0.0.1")))
	r.rec.waitFor(t, "a Service created after the watches were refused", func(s model.State) bool {
		_, ok := s.Cluster(KubeClusterName("ns", "svc"))
		return ok
	})
}
