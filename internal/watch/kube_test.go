package watch

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/ringxds/ringxds/internal/kubetest"
	"github.com/ringxds/ringxds/internal/model"
)

// kubeWait bounds every wait for a State; informer events arrive in
// milliseconds, the rest is headroom for a loaded 2-core machine.
const kubeWait = 20 * time.Second

// kubeRecorder collects the States a source publishes.
type kubeRecorder struct {
	mu     sync.Mutex
	states []model.State
	notify chan struct{}
}

func (r *kubeRecorder) publish(s model.State) {
	r.mu.Lock()
	r.states = append(r.states, s)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *kubeRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.states)
}

func (r *kubeRecorder) last() (model.State, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.states) == 0 {
		return model.State{}, false
	}
	return r.states[len(r.states)-1], true
}

// waitFor returns the latest State once it satisfies ok, or fails t.
func (r *kubeRecorder) waitFor(t *testing.T, what string, ok func(model.State) bool) model.State {
	t.Helper()
	deadline := time.After(kubeWait)
	for {
		if s, have := r.last(); have && ok(s) {
			return s
		}
		select {
		case <-r.notify:
		case <-deadline:
			s, _ := r.last()
			t.Fatalf("timed out after %v waiting for %s; last state: %s", kubeWait, what, kubeDescribe(s))
		}
	}
}

type kubeRunning struct {
	src *KubeSource
	rec *kubeRecorder
}

func kubeStartSource(t *testing.T, client kubernetes.Interface, opts KubeOptions) kubeRunning {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = zaptest.NewLogger(t)
	}
	src, err := NewKubeSource(client, opts)
	if err != nil {
		t.Fatalf("NewKubeSource: %v", err)
	}
	rec := &kubeRecorder{notify: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, rec.publish) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return within 10s of cancellation")
		}
	})
	rec.waitFor(t, "the initial state", func(model.State) bool { return true })
	return kubeRunning{src: src, rec: rec}
}

func kubeDescribe(s model.State) string {
	var b strings.Builder
	for _, c := range s.Clusters {
		fmt.Fprintf(&b, "%s[%s]:", c.Name, c.Policy)
		for _, e := range c.Endpoints {
			fmt.Fprintf(&b, " %s", e.HostPort())
		}
		b.WriteString("; ")
	}
	if b.Len() == 0 {
		return "no clusters"
	}
	return b.String()
}

// kubeAddrs lists a cluster's endpoints as host:port, or nil if absent.
func kubeAddrs(s model.State, name string) []string {
	c, ok := s.Cluster(name)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(c.Endpoints))
	for _, e := range c.Endpoints {
		out = append(out, e.HostPort())
	}
	return out
}

func kubeHasAddrs(name string, want ...string) func(model.State) bool {
	return func(s model.State) bool { return reflect.DeepEqual(kubeAddrs(s, name), want) }
}

func kubeAbsent(name string) func(model.State) bool {
	return func(s model.State) bool { _, ok := s.Cluster(name); return !ok }
}

func kubeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), kubeWait)
	t.Cleanup(cancel)
	return ctx
}

func kubeCreateService(t *testing.T, c kubernetes.Interface, ns, name string, annotations map[string]string, ports ...corev1.ServicePort) *corev1.Service {
	t.Helper()
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}
	}
	svc, err := c.CoreV1().Services(ns).Create(kubeCtx(t), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       corev1.ServiceSpec{Ports: ports},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s/%s: %v", ns, name, err)
	}
	return svc
}

func kubeOptIn(extra map[string]string) map[string]string {
	a := map[string]string{AnnotationEnabled: "true"}
	for k, v := range extra {
		a[k] = v
	}
	return a
}

// kubeEP is a ready endpoint unless changed by the caller.
func kubeEP(addr string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr}}
}

func kubeReadyEPs(addrs ...string) []discoveryv1.Endpoint {
	out := make([]discoveryv1.Endpoint, len(addrs))
	for i, a := range addrs {
		out[i] = kubeEP(a)
	}
	return out
}

func kubeSlice(ns, svc, name string, family discoveryv1.AddressType, portName string, port int32, eps []discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	p := discoveryv1.EndpointPort{Name: &portName, Port: &port}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc},
		},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{p},
		Endpoints:   eps,
	}
}

func kubeApplySlice(t *testing.T, c kubernetes.Interface, sl *discoveryv1.EndpointSlice) {
	t.Helper()
	api := c.DiscoveryV1().EndpointSlices(sl.Namespace)
	cur, err := api.Get(kubeCtx(t), sl.Name, metav1.GetOptions{})
	if err == nil {
		sl.ResourceVersion = cur.ResourceVersion
		_, err = api.Update(kubeCtx(t), sl, metav1.UpdateOptions{})
	} else {
		_, err = api.Create(kubeCtx(t), sl, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("apply slice %s/%s: %v", sl.Namespace, sl.Name, err)
	}
}

func kubeUpdateService(t *testing.T, c kubernetes.Interface, ns, name string, mutate func(*corev1.Service)) {
	t.Helper()
	api := c.CoreV1().Services(ns)
	svc, err := api.Get(kubeCtx(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get service: %v", err)
	}
	mutate(svc)
	if _, err := api.Update(kubeCtx(t), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update service: %v", err)
	}
}

func kubeNoProblem(t *testing.T, src *KubeSource) {
	t.Helper()
	if p := src.Problems(); len(p) > 0 {
		t.Fatalf("unexpected problems: %+v", p)
	}
}

// TestKubeSource runs the Kubernetes source against one real API server;
// each subtest has its own namespace and source.
func TestKubeSource(t *testing.T) {
	env := kubetest.Start(t)
	c := env.Client
	v4 := discoveryv1.AddressTypeIPv4

	t.Run("ServiceBecomesCluster", func(t *testing.T) {
		ns := env.Namespace(t)
		h2c := kubeAppProtocolH2C
		kubeCreateService(t, c, ns, "web", kubeOptIn(map[string]string{
			AnnotationLBPolicy: "maglev", AnnotationHashHeader: "x-user",
		}))
		sl := kubeSlice(ns, "web", "web-a", v4, "http", 8080, nil)
		sl.Ports[0].AppProtocol = &h2c
		zone := "zone-b"
		ready, notReady := true, false
		sl.Endpoints = []discoveryv1.Endpoint{
			{Addresses: []string{"10.1.0.3"}, Zone: &zone, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
			{Addresses: []string{"10.1.0.1"}, Zone: &zone},
			{Addresses: []string{"10.1.0.2"}, Zone: &zone},
			{Addresses: []string{"10.1.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &notReady}},
		}
		kubeApplySlice(t, c, sl)
		// A Service without the opt-in is ignored, slices and all.
		kubeCreateService(t, c, ns, "other", nil)
		kubeApplySlice(t, c, kubeSlice(ns, "other", "other-a", v4, "http", 8080, kubeReadyEPs("10.1.1.1")))

		before := time.Now()
		r := kubeStartSource(t, c, KubeOptions{Namespace: ns})
		name := KubeClusterName(ns, "web")
		s := r.rec.waitFor(t, "web with 3 endpoints", kubeHasAddrs(name, "10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080"))
		if len(s.Clusters) != 1 {
			t.Fatalf("want only the opted-in Service, got %s", kubeDescribe(s))
		}
		cl := s.Clusters[0]
		if cl.Name != "web."+ns || cl.Policy != model.PolicyMaglev || cl.HashHeader != "x-user" || cl.TableSize != model.DefaultMaglevTableSize || cl.FadeIn != nil {
			t.Fatalf("cluster settings = %+v", cl)
		}
		for _, e := range cl.Endpoints {
			if e.Scheme != "h2c" || e.Zone != "zone-b" || e.Weight != 1 || !e.FirstSeen.IsZero() {
				t.Fatalf("endpoint %+v: want h2c, zone-b, weight 1, established", e)
			}
		}
		if s.ChangedAt.IsZero() || s.ChangedAt.After(time.Now()) || s.ChangedAt.Before(before.Add(-time.Minute)) {
			t.Fatalf("ChangedAt = %v, want a recent event time", s.ChangedAt)
		}
		kubeNoProblem(t, r.src)

		// A later change carries the time of its first event.
		changed := time.Now()
		sl.Endpoints = append(sl.Endpoints, kubeEP("10.1.0.4"))
		kubeApplySlice(t, c, sl)
		s = r.rec.waitFor(t, "the fourth endpoint", kubeHasAddrs(name, "10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080", "10.1.0.4:8080"))
		if s.ChangedAt.Before(changed) || time.Since(s.ChangedAt) > kubeWait {
			t.Fatalf("ChangedAt = %v, want after the write at %v", s.ChangedAt, changed)
		}
	})

	t.Run("ScaleUpAndDown", func(t *testing.T) {
		ns := env.Namespace(t)
		kubeCreateService(t, c, ns, "api", kubeOptIn(map[string]string{AnnotationFadeIn: "1h"}))
		sl := kubeSlice(ns, "api", "api-a", v4, "http", 8080, kubeReadyEPs("10.2.0.1", "10.2.0.2"))
		kubeApplySlice(t, c, sl)
		r := kubeStartSource(t, c, KubeOptions{Namespace: ns})
		name := KubeClusterName(ns, "api")
		s := r.rec.waitFor(t, "two endpoints", kubeHasAddrs(name, "10.2.0.1:8080", "10.2.0.2:8080"))
		for _, e := range s.Clusters[0].Endpoints {
			if !e.FirstSeen.IsZero() {
				t.Fatalf("endpoint present at start-up fades in: %+v", e)
			}
		}

		sl.Endpoints = kubeReadyEPs("10.2.0.1", "10.2.0.2", "10.2.0.3", "10.2.0.4", "10.2.0.5")
		kubeApplySlice(t, c, sl)
		s = r.rec.waitFor(t, "five endpoints", kubeHasAddrs(name, "10.2.0.1:8080", "10.2.0.2:8080", "10.2.0.3:8080", "10.2.0.4:8080", "10.2.0.5:8080"))
		for i, e := range s.Clusters[0].Endpoints {
			if joined := i >= 2; joined == e.FirstSeen.IsZero() {
				t.Fatalf("endpoint %s: FirstSeen %v; want set only for the three that joined", e.HostPort(), e.FirstSeen)
			}
			if i >= 2 && time.Since(e.FirstSeen) > time.Minute {
				t.Fatalf("endpoint %s: FirstSeen %v is not the time of the change", e.HostPort(), e.FirstSeen)
			}
		}

		sl.Endpoints = kubeReadyEPs("10.2.0.4")
		kubeApplySlice(t, c, sl)
		r.rec.waitFor(t, "one endpoint", kubeHasAddrs(name, "10.2.0.4:8080"))

		// Scaled to zero the cluster is withdrawn; it returns with the
		// first ready endpoint, established, as a replica started now
		// would see it (there is nothing to fade in against); the next
		// one fades in.
		sl.Endpoints = nil
		kubeApplySlice(t, c, sl)
		r.rec.waitFor(t, "the cluster to be withdrawn", kubeAbsent(name))
		sl.Endpoints = kubeReadyEPs("10.2.0.6")
		kubeApplySlice(t, c, sl)
		s = r.rec.waitFor(t, "the new endpoint", kubeHasAddrs(name, "10.2.0.6:8080"))
		if !s.Clusters[0].Endpoints[0].FirstSeen.IsZero() {
			t.Fatalf("the first endpoint after scale-to-zero fades in from %v; want established", s.Clusters[0].Endpoints[0].FirstSeen)
		}
		sl.Endpoints = kubeReadyEPs("10.2.0.6", "10.2.0.7")
		kubeApplySlice(t, c, sl)
		s = r.rec.waitFor(t, "the second endpoint", kubeHasAddrs(name, "10.2.0.6:8080", "10.2.0.7:8080"))
		if s.Clusters[0].Endpoints[1].FirstSeen.IsZero() {
			t.Fatalf("an endpoint joining the restored cluster should fade in")
		}
		kubeNoProblem(t, r.src)
	})

	t.Run("SeveralSlicesNamedPorts", func(t *testing.T) {
		ns := env.Namespace(t)
		kubeCreateService(t, c, ns, "multi", kubeOptIn(map[string]string{AnnotationPort: "80"}),
			corev1.ServicePort{Name: "metrics", Port: 9100, TargetPort: intstr.FromInt32(9100)},
			corev1.ServicePort{Name: "grpc", Port: 80, TargetPort: intstr.FromString("grpc-port")})
		// Two slices, as the controller makes when Pods resolve the named
		// targetPort to different numbers; 10.3.0.2 appears in both.
		a := kubeSlice(ns, "multi", "multi-a", v4, "grpc", 9090, kubeReadyEPs("10.3.0.1", "10.3.0.2"))
		a.Ports = append(a.Ports, discoveryv1.EndpointPort{Name: kubePtr("metrics"), Port: kubePtr(int32(9100))})
		b := kubeSlice(ns, "multi", "multi-b", v4, "grpc", 9090, kubeReadyEPs("10.3.0.2", "10.3.0.3"))
		other := kubeSlice(ns, "multi", "multi-c", v4, "grpc", 7070, kubeReadyEPs("10.3.0.4"))
		for _, sl := range []*discoveryv1.EndpointSlice{a, b, other} {
			kubeApplySlice(t, c, sl)
		}
		r := kubeStartSource(t, c, KubeOptions{Namespace: ns})
		name := KubeClusterName(ns, "multi")
		r.rec.waitFor(t, "the union of three slices", kubeHasAddrs(name, "10.3.0.1:9090", "10.3.0.2:9090", "10.3.0.3:9090", "10.3.0.4:7070"))

		if err := c.DiscoveryV1().EndpointSlices(ns).Delete(kubeCtx(t), "multi-a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// 10.3.0.2 stays: it is still in multi-b.
		r.rec.waitFor(t, "multi-a's own endpoint to leave", kubeHasAddrs(name, "10.3.0.2:9090", "10.3.0.3:9090", "10.3.0.4:7070"))
		kubeNoProblem(t, r.src)
	})

	t.Run("IPv6", func(t *testing.T) {
		ns := env.Namespace(t)
		kubeCreateService(t, c, ns, "six", kubeOptIn(nil))
		kubeApplySlice(t, c, kubeSlice(ns, "six", "six-a", discoveryv1.AddressTypeIPv6, "http", 8080,
			kubeReadyEPs("fd00:10::2", "fd00:10::1")))
		r := kubeStartSource(t, c, KubeOptions{Namespace: ns})
		r.rec.waitFor(t, "bracketed IPv6 endpoints", kubeHasAddrs(KubeClusterName(ns, "six"), "[fd00:10::1]:8080", "[fd00:10::2]:8080"))
	})

	t.Run("TerminatingThenRemoved", func(t *testing.T) {
		ns := env.Namespace(t)
		kubeCreateService(t, c, ns, "drain", kubeOptIn(nil))
		sl := kubeSlice(ns, "drain", "drain-a", v4, "http", 8080, kubeReadyEPs("10.4.0.1", "10.4.0.2", "10.4.0.3"))
		kubeApplySlice(t, c, sl)
		r := kubeStartSource(t, c, KubeOptions{Namespace: ns})
		name := KubeClusterName(ns, "drain")
		r.rec.waitFor(t, "three endpoints", kubeHasAddrs(name, "10.4.0.1:8080", "10.4.0.2:8080", "10.4.0.3:8080"))

		// What the controller writes for a Pod being deleted: still
		// serving, not ready, terminating.
		yes, no := true, false
		sl.Endpoints[1].Conditions = discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}
		kubeApplySlice(t, c, sl)
		r.rec.waitFor(t, "the terminating endpoint to leave", kubeHasAddrs(name, "10.4.0.1:8080", "10.4.0.3:8080"))

		n := r.rec.count()
		sl.Endpoints = append(sl.Endpoints[:1], sl.Endpoints[2])
		kubeApplySlice(t, c, sl)
		// Removing an endpoint that already left changes nothing, so
		// nothing is published; a follow-up change proves the event was
		// processed.
		sl.Endpoints = append(sl.Endpoints, kubeEP("10.4.0.4"))
		kubeApplySlice(t, c, sl)
		r.rec.waitFor(t, "the new endpoint", kubeHasAddrs(name, "10.4.0.1:8080", "10.4.0.3:8080", "10.4.0.4:8080"))
		if got := r.rec.count() - n; got != 1 {
			t.Fatalf("%d states published for the removal and the addition, want 1 (identical states are not republished)", got)
		}
	})

	t.Run("AllTerminatingFallsBackToServing", func(t *testing.T) {
		// A one-replica Deployment whose Pod is replaced (deleted, evicted,
		// or rolled with maxSurge 0): the old Pod terminates while still
		// serving, and its replacement is not ready yet. kube-proxy keeps
		// sending to the serving terminating Pod (KEP-1669); so does the
		// ring, until the replacement is ready.
		ns := env.Namespace(t)
		kubeCreateService(t, c, ns, "one", kubeOptIn(nil))
		kubeCreateService(t, c, ns, "other", kubeOptIn(nil))
		yes, no := true, false
		old := kubeEP("10.11.0.1")
		sl := kubeSlice(ns, "one", "one-a", v4, "http", 8080, []discoveryv1.Endpoint{old})
		kubeApplySlice(t, c, sl)
		// Another Service with a terminating endpoint among ready ones: the
		// fallback is per Service and does not apply there.
		otherSlice := kubeSlice(ns, "other", "other-a", v4, "http", 8080, kubeReadyEPs("10.11.1.1", "10.11.1.2"))
		otherSlice.Endpoints[1].Conditions = discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}
		kubeApplySlice(t, c, otherSlice)
		r := kubeStartSource(t, c, KubeOptions{Namespace: ns})
		one, other := KubeClusterName(ns, "one"), KubeClusterName(ns, "other")
		r.rec.waitFor(t, "the old pod", kubeHasAddrs(one, "10.11.0.1:8080"))

		// What the EndpointSlice controller writes: the old Pod ready=false,
		// serving=true, terminating=true; the new one not ready.
		old.Conditions = discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}
		replacement := kubeEP("10.11.0.2")
		replacement.Conditions = discoveryv1.EndpointConditions{Ready: &no, Serving: &no, Terminating: &no}
		sl.Endpoints = []discoveryv1.Endpoint{old, replacement}
		kubeApplySlice(t, c, sl)
		// A follow-up write proves the first one was processed: nothing
		// about "one" changed, so its cluster must still be there.
		otherSlice.Endpoints = append(otherSlice.Endpoints, kubeEP("10.11.1.3"))
		kubeApplySlice(t, c, otherSlice)
		s := r.rec.waitFor(t, "the other Service's new endpoint", kubeHasAddrs(other, "10.11.1.1:8080", "10.11.1.3:8080"))
		if got := kubeAddrs(s, one); !reflect.DeepEqual(got, []string{"10.11.0.1:8080"}) {
			t.Fatalf("with every endpoint terminating the cluster holds %v, want the serving terminating pod", got)
		}
		if got := testutil.ToFloat64(r.src.metrics.drainingClusters); got != 1 {
			t.Fatalf("ringxds_kube_draining_clusters = %v, want 1", got)
		}

		// The replacement turns ready: the terminating Pod leaves at once.
		replacement.Conditions = discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no}
		sl.Endpoints = []discoveryv1.Endpoint{old, replacement}
		kubeApplySlice(t, c, sl)
		r.rec.waitFor(t, "the ready replacement only", kubeHasAddrs(one, "10.11.0.2:8080"))
		if got := testutil.ToFloat64(r.src.metrics.drainingClusters); got != 0 {
			t.Fatalf("ringxds_kube_draining_clusters = %v, want 0", got)
		}

		// A terminating Pod that stops serving is not a fallback: with
		// nothing serving the Service is withdrawn.
		old.Conditions = discoveryv1.EndpointConditions{Ready: &no, Serving: &no, Terminating: &yes}
		replacement.Conditions = discoveryv1.EndpointConditions{Ready: &no, Serving: &no, Terminating: &no}
		sl.Endpoints = []discoveryv1.Endpoint{old, replacement}
		kubeApplySlice(t, c, sl)
		r.rec.waitFor(t, "the Service to be withdrawn", kubeAbsent(one))
		kubeNoProblem(t, r.src)
	})

	t.Run("ServingDecidesNotReady", func(t *testing.T) {
		// publishNotReadyAddresses: the controller writes ready=true for
		// every Pod, ready or not; serving keeps the Pod's readiness.
		ns := env.Namespace(t)
		kubeCreateService(t, c, ns, "pub", kubeOptIn(nil))
		kubeUpdateService(t, c, ns, "pub", func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true })
		yes, no := true, false
		eps := kubeReadyEPs("10.12.0.1", "10.12.0.2", "10.12.0.3", "10.12.0.4", "10.12.0.5")
		eps[0].Conditions = discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no}
		eps[1].Conditions = discoveryv1.EndpointConditions{Ready: &yes, Serving: &no, Terminating: &no} // unready Pod
		eps[2].Conditions = discoveryv1.EndpointConditions{Ready: &no}                                  // serving unset: read ready
		eps[3].Conditions = discoveryv1.EndpointConditions{}                                            // all unknown: ready
		eps[4].Conditions = discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &yes}
		kubeApplySlice(t, c, kubeSlice(ns, "pub", "pub-a", v4, "http", 8080, eps))
		r := kubeStartSource(t, c, KubeOptions{Namespace: ns})
		r.rec.waitFor(t, "only the serving, non-terminating endpoints", kubeHasAddrs(KubeClusterName(ns, "pub"), "10.12.0.1:8080", "10.12.0.4:8080"))
		kubeNoProblem(t, r.src)
	})

	t.Run("LateChangeSameFadeOnEveryReplica", func(t *testing.T) { kubeTestLateChangeSameFade(t, env) })

	t.Run("IndirectChangesSameFadeOnEveryReplica", func(t *testing.T) { kubeTestIndirectChangesSameFade(t, env) })

	t.Run("BadAnnotationSameOnEveryReplica", func(t *testing.T) { kubeTestBadAnnotationReplicas(t, env) })

	t.Run("HashKeyKeepsRingPositionsAcrossRestart", func(t *testing.T) { kubeTestHashKeyRestart(t, env) })

	t.Run("RingSizeCapped", func(t *testing.T) { kubeTestRingSizeCap(t, env) })

	t.Run("BadSliceData", func(t *testing.T) {
		ns := env.Namespace(t)
		kubeCreateService(t, c, ns, "slc", kubeOptIn(nil))
		kubeApplySlice(t, c, kubeSlice(ns, "slc", "slc-good", v4, "http", 8080, kubeReadyEPs("10.6.0.1")))
		// A hand-written slice whose port is not the Service's.
		kubeApplySlice(t, c, kubeSlice(ns, "slc", "slc-bad", v4, "web", 8080, kubeReadyEPs("10.6.0.2")))
		r := kubeStartSource(t, c, KubeOptions{Namespace: ns})
		r.rec.waitFor(t, "only the good slice", kubeHasAddrs(KubeClusterName(ns, "slc"), "10.6.0.1:8080"))
		p := r.src.Problems()
		if len(p) != 1 || p[0].Object != ns+"/slc-bad" || p[0].Field != "ports" {
			t.Fatalf("problems = %+v, want one on %s/slc-bad ports", p, ns)
		}
	})

	t.Run("ServiceLosesOptIn", func(t *testing.T) {
		ns := env.Namespace(t)
		kubeCreateService(t, c, ns, "opt", kubeOptIn(nil))
		kubeCreateService(t, c, ns, "stay", kubeOptIn(nil))
		kubeApplySlice(t, c, kubeSlice(ns, "opt", "opt-a", v4, "http", 8080, kubeReadyEPs("10.7.0.1")))
		kubeApplySlice(t, c, kubeSlice(ns, "stay", "stay-a", v4, "http", 8080, kubeReadyEPs("10.7.1.1")))
		r := kubeStartSource(t, c, KubeOptions{Namespace: ns})
		opt, stay := KubeClusterName(ns, "opt"), KubeClusterName(ns, "stay")
		r.rec.waitFor(t, "both", func(s model.State) bool { return len(s.Clusters) == 2 })

		kubeUpdateService(t, c, ns, "opt", func(s *corev1.Service) { delete(s.Annotations, AnnotationEnabled) })
		s := r.rec.waitFor(t, "opt to be withdrawn", kubeAbsent(opt))
		if _, ok := s.Cluster(stay); !ok {
			t.Fatalf("the other Service went too: %s", kubeDescribe(s))
		}
		kubeUpdateService(t, c, ns, "opt", func(s *corev1.Service) { s.Annotations = kubeOptIn(nil) })
		r.rec.waitFor(t, "opt to return", kubeHasAddrs(opt, "10.7.0.1:8080"))
		if err := c.CoreV1().Services(ns).Delete(kubeCtx(t), "opt", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		r.rec.waitFor(t, "the deleted Service to be withdrawn", kubeAbsent(opt))
	})

	t.Run("ServiceSelector", func(t *testing.T) {
		ns := env.Namespace(t)
		kubeCreateService(t, c, ns, "picked", kubeOptIn(nil))
		kubeUpdateService(t, c, ns, "picked", func(s *corev1.Service) { s.Labels = map[string]string{"team": "a"} })
		kubeCreateService(t, c, ns, "skipped", kubeOptIn(nil))
		// Slices carry their Service's labels, as the EndpointSlice
		// controller writes them; the selector filters slices by them.
		picked := kubeSlice(ns, "picked", "picked-a", v4, "http", 8080, kubeReadyEPs("10.8.0.1"))
		picked.Labels["team"] = "a"
		kubeApplySlice(t, c, picked)
		kubeApplySlice(t, c, kubeSlice(ns, "skipped", "skipped-a", v4, "http", 8080, kubeReadyEPs("10.8.1.1")))
		r := kubeStartSource(t, c, KubeOptions{Namespace: ns, ServiceSelector: "team=a"})
		s := r.rec.waitFor(t, "the selected Service", kubeHasAddrs(KubeClusterName(ns, "picked"), "10.8.0.1:8080"))
		if len(s.Clusters) != 1 {
			t.Fatalf("selector not applied: %s", kubeDescribe(s))
		}
		if n := testutil.ToFloat64(r.src.metrics.cached.WithLabelValues("endpointslice")); n != 1 {
			t.Fatalf("%v slices cached, want only the selected Service's", n)
		}
	})

	t.Run("ReplicasPublishIdenticalStates", func(t *testing.T) {
		ns := env.Namespace(t)
		kubeCreateService(t, c, ns, "a", kubeOptIn(map[string]string{AnnotationFadeIn: "1h"}))
		kubeCreateService(t, c, ns, "b", kubeOptIn(map[string]string{AnnotationLBPolicy: "skipper"}))
		sa := kubeSlice(ns, "a", "a-1", v4, "http", 8080, kubeReadyEPs("10.9.0.1", "10.9.0.2"))
		kubeApplySlice(t, c, sa)
		kubeApplySlice(t, c, kubeSlice(ns, "b", "b-1", v4, "http", 8080, kubeReadyEPs("10.9.1.2", "10.9.1.1")))
		r1 := kubeStartSource(t, c, KubeOptions{Namespace: ns})
		r2 := kubeStartSource(t, c, KubeOptions{Namespace: ns, Debounce: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond})

		// A burst of writes the replicas coalesce differently.
		sb := kubeSlice(ns, "b", "b-1", v4, "http", 8080, kubeReadyEPs("10.9.1.2", "10.9.1.1"))
		for i := 3; i <= 8; i++ {
			sb.Endpoints = append(sb.Endpoints, kubeEP(fmt.Sprintf("10.9.1.%d", i)))
			kubeApplySlice(t, c, sb)
		}
		// Endpoints joining a fading cluster: one write per slice, so both
		// replicas see the same slice versions (see docs/kubernetes.md on
		// bursts).
		sa.Endpoints = append(sa.Endpoints, kubeReadyEPs("10.9.0.3", "10.9.0.4", "10.9.0.5")...)
		kubeApplySlice(t, c, sa)
		kubeApplySlice(t, c, kubeSlice(ns, "a", "a-2", v4, "http", 8080, kubeReadyEPs("10.9.2.1")))
		done := func(s model.State) bool {
			return len(kubeAddrs(s, KubeClusterName(ns, "a"))) == 6 && len(kubeAddrs(s, KubeClusterName(ns, "b"))) == 8
		}
		s1 := r1.rec.waitFor(t, "replica 1 to see all changes", done)
		s2 := r2.rec.waitFor(t, "replica 2 to see all changes", done)
		if !reflect.DeepEqual(s1.Clusters, s2.Clusters) {
			t.Fatalf("replicas differ:\n%+v\n%+v", s1.Clusters, s2.Clusters)
		}
		joined := 0
		for _, e := range s1.Clusters[0].Endpoints {
			if !e.FirstSeen.IsZero() {
				joined++
			}
		}
		if joined != 4 {
			t.Fatalf("%d endpoints fade in, want the 4 that joined", joined)
		}

		// An endpoint leaving mid-fade: both replicas record the same
		// departure, dated by the slice change rather than by their clocks.
		sa.Endpoints = slices.DeleteFunc(sa.Endpoints, func(e discoveryv1.Endpoint) bool { return e.Addresses[0] == "10.9.0.2" })
		kubeApplySlice(t, c, sa)
		left := func(s model.State) bool { return len(kubeAddrs(s, KubeClusterName(ns, "a"))) == 5 }
		s1 = r1.rec.waitFor(t, "replica 1 to see the departure", left)
		s2 = r2.rec.waitFor(t, "replica 2 to see the departure", left)
		if !reflect.DeepEqual(s1.Clusters, s2.Clusters) {
			t.Fatalf("replicas differ after a departure:\n%+v\n%+v", s1.Clusters, s2.Clusters)
		}
		if d := s1.Clusters[0].Departed; len(d) != 1 || d[0].Endpoint.HostPort() != "10.9.0.2:8080" {
			t.Fatalf("Departed %+v, want 10.9.0.2:8080", d)
		}
	})
}

// TestKubeAPIServerRestart stops the API server under a running source: the
// last State stays, the informers reconnect, and changes made after the
// restart arrive.
func TestKubeAPIServerRestart(t *testing.T) {
	env := kubetest.Start(t)
	c := env.Client
	ns := env.Namespace(t)
	kubeCreateService(t, c, ns, "svc", kubeOptIn(nil))
	sl := kubeSlice(ns, "svc", "svc-a", discoveryv1.AddressTypeIPv4, "http", 8080, kubeReadyEPs("10.10.0.1"))
	kubeApplySlice(t, c, sl)
	r := kubeStartSource(t, c, KubeOptions{Namespace: ns})
	name := KubeClusterName(ns, "svc")
	r.rec.waitFor(t, "the service", kubeHasAddrs(name, "10.10.0.1:8080"))
	n := r.rec.count()

	if err := env.StopAPIServer(); err != nil {
		t.Fatalf("stop API server: %v", err)
	}
	// Long enough for the watches to break and the reflectors to retry.
	time.Sleep(3 * time.Second)
	if got := r.rec.count(); got != n {
		s, _ := r.rec.last()
		t.Fatalf("published %d states while the API server was down (last: %s)", got-n, kubeDescribe(s))
	}
	if err := env.StartAPIServer(); err != nil {
		t.Fatalf("restart API server: %v", err)
	}
	// Written immediately, likely before the informers have reconnected.
	sl.Endpoints = kubeReadyEPs("10.10.0.1", "10.10.0.2")
	kubeApplySlice(t, c, sl)
	kubeCreateService(t, c, ns, "late", kubeOptIn(nil))
	kubeApplySlice(t, c, kubeSlice(ns, "late", "late-a", discoveryv1.AddressTypeIPv4, "http", 8080, kubeReadyEPs("10.10.1.1")))
	// Reflector back-off after an outage can reach several seconds.
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, _ := r.rec.last()
		if reflect.DeepEqual(kubeAddrs(s, name), []string{"10.10.0.1:8080", "10.10.0.2:8080"}) &&
			reflect.DeepEqual(kubeAddrs(s, KubeClusterName(ns, "late")), []string{"10.10.1.1:8080"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("changes after the restart did not arrive within 60s; last state: %s", kubeDescribe(s))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func kubePtr[T any](v T) *T { return &v }
