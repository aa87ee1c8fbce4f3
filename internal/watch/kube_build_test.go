package watch

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringxds/ringxds/internal/model"
)

// kubeFixture is an in-memory stand-in for the informer caches.
type kubeFixture struct {
	svcs   []*corev1.Service
	slices map[string][]*discoveryv1.EndpointSlice
}

func (f *kubeFixture) slicesOf(ns, name string) []*discoveryv1.EndpointSlice {
	return f.slices[ns+"/"+name]
}

func kubeFixtureSlice(name string, family discoveryv1.AddressType, changed time.Time, addrs ...string) *discoveryv1.EndpointSlice {
	sl := kubeSlice("ns", "svc", name, family, "http", 8080, kubeReadyEPs(addrs...))
	sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: changed.Format(time.RFC3339Nano)}
	return sl
}

func kubeFixtureService(annotations map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc", Annotations: kubeOptIn(annotations)},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
}

func TestKubeBuildFadeIn(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f := &kubeFixture{
		svcs:   []*corev1.Service{kubeFixtureService(map[string]string{AnnotationFadeIn: "30s"})},
		slices: map[string][]*discoveryv1.EndpointSlice{"ns/svc": {kubeFixtureSlice("a", discoveryv1.AddressTypeIPv4, t0, "10.0.0.1")}},
	}
	b := kubeNewBuilder()
	s, _, next := b.build(f.svcs, f.slicesOf, t0.Add(time.Hour))
	if ep := s.Clusters[0].Endpoints[0]; !ep.FirstSeen.IsZero() || !next.IsZero() {
		t.Fatalf("first build: FirstSeen %v, next %v; want established and no timer", ep.FirstSeen, next)
	}

	joined := t0.Add(time.Hour)
	f.slices["ns/svc"] = []*discoveryv1.EndpointSlice{kubeFixtureSlice("a", discoveryv1.AddressTypeIPv4, joined, "10.0.0.1", "10.0.0.2")}
	s, _, next = b.build(f.svcs, f.slicesOf, joined.Add(time.Second))
	eps := s.Clusters[0].Endpoints
	if !eps[0].FirstSeen.IsZero() || !eps[1].FirstSeen.Equal(joined) {
		t.Fatalf("after join: %+v; want only 10.0.0.2 to fade in from the slice's trigger time", eps)
	}
	if !next.Equal(joined.Add(30 * time.Second)) {
		t.Fatalf("next = %v, want the end of the fade-in", next)
	}

	// A later slice change must not restart the fade-in of 10.0.0.2.
	later := joined.Add(10 * time.Second)
	f.slices["ns/svc"] = []*discoveryv1.EndpointSlice{kubeFixtureSlice("a", discoveryv1.AddressTypeIPv4, later, "10.0.0.1", "10.0.0.2", "10.0.0.3")}
	s, _, _ = b.build(f.svcs, f.slicesOf, later)
	if eps := s.Clusters[0].Endpoints; !eps[1].FirstSeen.Equal(joined) || !eps[2].FirstSeen.Equal(later) {
		t.Fatalf("after a second change: %+v", eps)
	}

	// 10.0.0.2's own window has passed, but 10.0.0.3 still fades: both
	// keep their starts (the ramp of 10.0.0.3 is replayed from both), and
	// the State is rebuilt when the last fade ends.
	s, _, next = b.build(f.svcs, f.slicesOf, joined.Add(35*time.Second))
	if eps := s.Clusters[0].Endpoints; !eps[1].FirstSeen.Equal(joined) || !eps[2].FirstSeen.Equal(later) {
		t.Fatalf("while the last fade runs: %+v", eps)
	}
	if !next.Equal(later.Add(30 * time.Second)) {
		t.Fatalf("next = %v, want the end of the last fade-in %v", next, later.Add(30*time.Second))
	}

	// Once every window has passed the endpoints read as established, the
	// same State a freshly started replica builds.
	s, _, next = b.build(f.svcs, f.slicesOf, later.Add(time.Minute))
	fresh, _, _ := kubeNewBuilder().build(f.svcs, f.slicesOf, later.Add(time.Minute))
	if !reflect.DeepEqual(s, fresh) || !next.IsZero() {
		t.Fatalf("after the fade-in: %+v (next %v), a fresh replica builds %+v", s, next, fresh)
	}
}

func TestKubeBuildDualStackAndDedup(t *testing.T) {
	now := time.Now()
	svc := kubeFixtureService(nil)
	f := &kubeFixture{
		svcs: []*corev1.Service{svc},
		slices: map[string][]*discoveryv1.EndpointSlice{"ns/svc": {
			kubeFixtureSlice("v6", discoveryv1.AddressTypeIPv6, now, "fd00::1"),
			kubeFixtureSlice("v4-b", discoveryv1.AddressTypeIPv4, now, "10.0.0.2", "10.0.0.1"),
			kubeFixtureSlice("v4-a", discoveryv1.AddressTypeIPv4, now, "10.0.0.1", "10.0.0.10"),
		}},
	}
	s, problems, _ := kubeNewBuilder().build(f.svcs, f.slicesOf, now)
	want := []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.10:8080"}
	if got := kubeAddrs(s, "svc.ns"); !reflect.DeepEqual(got, want) || len(problems) > 0 {
		t.Fatalf("got %v (problems %v), want %v: one family, deduplicated, numerically sorted", got, problems, want)
	}
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	s, _, _ = kubeNewBuilder().build(f.svcs, f.slicesOf, now)
	if got := kubeAddrs(s, "svc.ns"); !reflect.DeepEqual(got, []string{"[fd00::1]:8080"}) {
		t.Fatalf("IPv6-primary Service: got %v", got)
	}
}

func TestKubeBuildBadAddressIsSkipped(t *testing.T) {
	now := time.Now()
	sl := kubeFixtureSlice("a", discoveryv1.AddressTypeIPv4, now, "10.0.0.1", "fd00::1", "not-an-ip")
	f := &kubeFixture{svcs: []*corev1.Service{kubeFixtureService(nil)}, slices: map[string][]*discoveryv1.EndpointSlice{"ns/svc": {sl}}}
	s, problems, _ := kubeNewBuilder().build(f.svcs, f.slicesOf, now)
	if got := kubeAddrs(s, "svc.ns"); !reflect.DeepEqual(got, []string{"10.0.0.1:8080"}) {
		t.Fatalf("got %v", got)
	}
	if len(problems) != 2 || problems[0].Field != "endpoints[1].addresses" || problems[1].Field != "endpoints[2].addresses" {
		t.Fatalf("problems = %+v", problems)
	}
	if err := s.Normalize(); err != nil {
		t.Fatalf("built state does not validate: %v", err)
	}
	if s.Clusters[0].Policy != model.PolicyRingHash {
		t.Fatalf("defaults not applied: %+v", s.Clusters[0])
	}
}
