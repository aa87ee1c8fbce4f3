package watch

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringxds/ringxds/internal/fadein"
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
	b := kubeNewBuilder(DefaultKubeMaxRingSize)
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
	fresh, _, _ := kubeNewBuilder(DefaultKubeMaxRingSize).build(f.svcs, f.slicesOf, later.Add(time.Minute))
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
	s, problems, _ := kubeNewBuilder(DefaultKubeMaxRingSize).build(f.svcs, f.slicesOf, now)
	want := []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.10:8080"}
	if got := kubeAddrs(s, "svc.ns"); !reflect.DeepEqual(got, want) || len(problems) > 0 {
		t.Fatalf("got %v (problems %v), want %v: one family, deduplicated, numerically sorted", got, problems, want)
	}
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	s, _, _ = kubeNewBuilder(DefaultKubeMaxRingSize).build(f.svcs, f.slicesOf, now)
	if got := kubeAddrs(s, "svc.ns"); !reflect.DeepEqual(got, []string{"[fd00::1]:8080"}) {
		t.Fatalf("IPv6-primary Service: got %v", got)
	}
}

func TestKubeBuildBadAddressIsSkipped(t *testing.T) {
	now := time.Now()
	sl := kubeFixtureSlice("a", discoveryv1.AddressTypeIPv4, now, "10.0.0.1", "fd00::1", "not-an-ip")
	f := &kubeFixture{svcs: []*corev1.Service{kubeFixtureService(nil)}, slices: map[string][]*discoveryv1.EndpointSlice{"ns/svc": {sl}}}
	s, problems, _ := kubeNewBuilder(DefaultKubeMaxRingSize).build(f.svcs, f.slicesOf, now)
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

// kubeBuildSet points the fixture's only slice at addrs, changed at changed.
func (f *kubeFixture) kubeBuildSet(changed time.Time, addrs ...string) {
	f.slices["ns/svc"] = []*discoveryv1.EndpointSlice{kubeFixtureSlice("a", discoveryv1.AddressTypeIPv4, changed, addrs...)}
}

// kubeBuildEndpoint is the endpoint hp of the only cluster of s.
func kubeBuildEndpoint(t *testing.T, s model.State, hp string) model.Endpoint {
	t.Helper()
	for _, ep := range s.Clusters[0].Endpoints {
		if ep.HostPort() == hp {
			return ep
		}
	}
	t.Fatalf("%s is not in %+v", hp, s.Clusters[0].Endpoints)
	return model.Endpoint{}
}

func TestKubeBuildDeparturesDuringFadeIn(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f := &kubeFixture{svcs: []*corev1.Service{kubeFixtureService(map[string]string{AnnotationFadeIn: "30s"})}, slices: map[string][]*discoveryv1.EndpointSlice{}}
	f.kubeBuildSet(t0, "10.0.0.1", "10.0.0.2")
	b := kubeNewBuilder(DefaultKubeMaxRingSize)
	s, _, _ := b.build(f.svcs, f.slicesOf, t0)
	b2 := kubeBuildEndpoint(t, s, "10.0.0.2:8080")

	joined := t0.Add(time.Hour)
	f.kubeBuildSet(joined, "10.0.0.1", "10.0.0.2", "10.0.0.3")
	if s, _, _ = b.build(f.svcs, f.slicesOf, joined); s.Clusters[0].Departed != nil {
		t.Fatalf("an arrival recorded departures: %+v", s.Clusters[0].Departed)
	}

	// 10.0.0.2 leaves while 10.0.0.3 fades: the plan must still replay it.
	gone := joined.Add(10 * time.Second)
	f.kubeBuildSet(gone, "10.0.0.1", "10.0.0.3")
	s, _, next := b.build(f.svcs, f.slicesOf, gone)
	want := []model.Departure{{Endpoint: b2, Gone: gone}}
	if got := s.Clusters[0].Departed; !reflect.DeepEqual(got, want) {
		t.Fatalf("after a removal mid-fade: Departed %+v, want %+v", got, want)
	}
	if got := kubeAddrs(s, "svc.ns"); !reflect.DeepEqual(got, []string{"10.0.0.1:8080", "10.0.0.3:8080"}) {
		t.Fatalf("endpoints %v: a departure must not be served", got)
	}
	if !next.Equal(joined.Add(30 * time.Second)) {
		t.Fatalf("next = %v, want the end of the fade %v", next, joined.Add(30*time.Second))
	}

	// Later builds carry it, also when it comes back and fades in again.
	s, _, _ = b.build(f.svcs, f.slicesOf, joined.Add(15*time.Second))
	if got := s.Clusters[0].Departed; !reflect.DeepEqual(got, want) {
		t.Fatalf("a later build: Departed %+v, want %+v", got, want)
	}
	back := joined.Add(20 * time.Second)
	f.kubeBuildSet(back, "10.0.0.1", "10.0.0.2", "10.0.0.3")
	s, _, next = b.build(f.svcs, f.slicesOf, back)
	if got := s.Clusters[0].Departed; !reflect.DeepEqual(got, want) {
		t.Fatalf("after it came back: Departed %+v, want %+v", got, want)
	}
	if ep := kubeBuildEndpoint(t, s, "10.0.0.2:8080"); !ep.FirstSeen.Equal(back) {
		t.Fatalf("the returning endpoint has FirstSeen %v, want %v", ep.FirstSeen, back)
	}
	if !next.Equal(back.Add(30 * time.Second)) {
		t.Fatalf("next = %v, want the end of the returning endpoint's fade %v", next, back.Add(30*time.Second))
	}

	// Once the last fade is over the departures go with the starts, and
	// the State is the one a fresh replica builds.
	end := back.Add(30 * time.Second)
	s, _, next = b.build(f.svcs, f.slicesOf, end)
	fresh, _, _ := kubeNewBuilder(DefaultKubeMaxRingSize).build(f.svcs, f.slicesOf, end)
	if !reflect.DeepEqual(s, fresh) || !next.IsZero() || s.Clusters[0].Departed != nil {
		t.Fatalf("after the fades: %+v (next %v), a fresh replica builds %+v", s, next, fresh)
	}
	if len(b.departed) != 0 {
		t.Fatalf("the builder still remembers departures %+v", b.departed)
	}

	// A removal from a steady cluster records nothing.
	f.kubeBuildSet(end, "10.0.0.1", "10.0.0.3")
	if s, _, next = b.build(f.svcs, f.slicesOf, end.Add(time.Minute)); s.Clusters[0].Departed != nil || !next.IsZero() {
		t.Fatalf("a removal with no fade under way: Departed %+v, next %v", s.Clusters[0].Departed, next)
	}

	// The Service going away takes its memory with it.
	b.build(nil, f.slicesOf, end.Add(2*time.Minute))
	if len(b.joined) != 0 || len(b.departed) != 0 {
		t.Fatalf("memory of a Service no longer served: joined %v, departed %v", b.joined, b.departed)
	}
}

func TestKubeBuildDepartedFadeKeepsStarts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f := &kubeFixture{svcs: []*corev1.Service{kubeFixtureService(map[string]string{AnnotationFadeIn: "30s"})}, slices: map[string][]*discoveryv1.EndpointSlice{}}
	f.kubeBuildSet(t0, "10.0.0.1")
	b := kubeNewBuilder(DefaultKubeMaxRingSize)
	b.build(f.svcs, f.slicesOf, t0)

	b1 := t0.Add(time.Hour)
	f.kubeBuildSet(b1, "10.0.0.1", "10.0.0.2")
	b.build(f.svcs, f.slicesOf, b1)
	c1 := b1.Add(10 * time.Second)
	f.kubeBuildSet(c1, "10.0.0.1", "10.0.0.2", "10.0.0.3")
	s, _, _ := b.build(f.svcs, f.slicesOf, c1)
	leaving := kubeBuildEndpoint(t, s, "10.0.0.3:8080")

	// 10.0.0.3 leaves while fading; 10.0.0.2 still fades too.
	gone := c1.Add(5 * time.Second)
	f.kubeBuildSet(gone, "10.0.0.1", "10.0.0.2")
	s, _, next := b.build(f.svcs, f.slicesOf, gone)
	want := []model.Departure{{Endpoint: leaving, Gone: gone}}
	if got := s.Clusters[0].Departed; !reflect.DeepEqual(got, want) || !leaving.FirstSeen.Equal(c1) {
		t.Fatalf("Departed %+v, want %+v with its start %v", got, want, c1)
	}
	if !next.Equal(c1.Add(30 * time.Second)) {
		t.Fatalf("next = %v, want the end of the departed endpoint's fade %v", next, c1.Add(30*time.Second))
	}

	// 10.0.0.2's window is over but the departed one's would still run:
	// the replay needs 10.0.0.2's start until then.
	s, _, next = b.build(f.svcs, f.slicesOf, b1.Add(35*time.Second))
	if ep := kubeBuildEndpoint(t, s, "10.0.0.2:8080"); !ep.FirstSeen.Equal(b1) {
		t.Fatalf("10.0.0.2 has FirstSeen %v while a departed fade runs, want %v", ep.FirstSeen, b1)
	}
	if got := s.Clusters[0].Departed; !reflect.DeepEqual(got, want) || !next.Equal(c1.Add(30*time.Second)) {
		t.Fatalf("Departed %+v (next %v), want %+v until %v", got, next, want, c1.Add(30*time.Second))
	}

	s, _, next = b.build(f.svcs, f.slicesOf, c1.Add(30*time.Second))
	if ep := kubeBuildEndpoint(t, s, "10.0.0.2:8080"); !ep.FirstSeen.IsZero() || s.Clusters[0].Departed != nil || !next.IsZero() {
		t.Fatalf("after the departed fade's end: 10.0.0.2 FirstSeen %v, Departed %+v, next %v", ep.FirstSeen, s.Clusters[0].Departed, next)
	}
}

func TestKubeBuildNoDeparturesWithoutFadeIn(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f := &kubeFixture{svcs: []*corev1.Service{kubeFixtureService(nil)}, slices: map[string][]*discoveryv1.EndpointSlice{}}
	f.kubeBuildSet(t0, "10.0.0.1", "10.0.0.2")
	b := kubeNewBuilder(DefaultKubeMaxRingSize)
	b.build(f.svcs, f.slicesOf, t0)
	f.kubeBuildSet(t0.Add(time.Second), "10.0.0.1", "10.0.0.3")
	b.build(f.svcs, f.slicesOf, t0.Add(time.Second))
	f.kubeBuildSet(t0.Add(2*time.Second), "10.0.0.3")
	if s, _, _ := b.build(f.svcs, f.slicesOf, t0.Add(2*time.Second)); s.Clusters[0].Departed != nil || len(b.departed) != 0 {
		t.Fatalf("a cluster without fade-in recorded departures: %+v", s.Clusters[0].Departed)
	}
}

// TestKubeBuildDepartureTimeFromSlices: a departure is dated by the slice
// change Kubernetes recorded, so replicas that build at different moments
// agree, put on the fade step grid as a start is (kubeFadeTime).
func TestKubeBuildDepartureTimeFromSlices(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	joined := t0.Add(time.Hour)
	removed := joined.Add(10 * time.Second)
	for _, tc := range []struct {
		name        string
		built, want time.Time
	}{
		{"seen 1.5 s after the change", removed.Add(1500 * time.Millisecond), removed},
		{"seen 5 s after the change", removed.Add(5 * time.Second), removed.Add(5*time.Second - fadein.FreezeLag)},
		{"stamped ahead of our clock", removed.Add(-time.Second), removed.Add(-time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &kubeFixture{svcs: []*corev1.Service{kubeFixtureService(map[string]string{AnnotationFadeIn: "30s"})}, slices: map[string][]*discoveryv1.EndpointSlice{}}
			f.kubeBuildSet(t0, "10.0.0.1", "10.0.0.2")
			b := kubeNewBuilder(DefaultKubeMaxRingSize)
			b.build(f.svcs, f.slicesOf, t0)
			f.kubeBuildSet(joined, "10.0.0.1", "10.0.0.2", "10.0.0.3")
			b.build(f.svcs, f.slicesOf, joined)
			f.kubeBuildSet(removed, "10.0.0.1", "10.0.0.3")
			s, _, _ := b.build(f.svcs, f.slicesOf, tc.built)
			if d := s.Clusters[0].Departed; len(d) != 1 || !d[0].Gone.Equal(tc.want) {
				t.Fatalf("Departed %+v, want 10.0.0.2 gone at %v", d, tc.want)
			}
		})
	}
}

// TestKubeFadeTime: replicas that build a recorded change at any moment up
// to FreezeLag after its step agree on its start; a replica later than
// that, or one whose clock is behind, uses its own step, still on the grid.
func TestKubeFadeTime(t *testing.T) {
	written := time.Date(2026, 1, 1, 12, 0, 5, 0, time.UTC)
	for _, tc := range []struct {
		name            string
		recorded, built time.Time
		want            time.Time
	}{
		{"built at once", written, written.Add(100 * time.Millisecond), written},
		{"built in the next second", written, written.Add(1900 * time.Millisecond), written},
		{"built just before the window closes", written, written.Add(2999 * time.Millisecond), written},
		{"a trigger time within the second", written.Add(700 * time.Millisecond), written.Add(2 * time.Second), written},
		{"learned late", written, written.Add(3 * time.Second), written.Add(time.Second)},
		{"learned much later", written, written.Add(time.Hour + 400*time.Millisecond), written.Add(time.Hour - fadein.FreezeLag)},
		{"recorded ahead of our clock", written, written.Add(-300 * time.Millisecond), written.Add(-time.Second)},
		{"nothing recorded", time.Time{}, written.Add(300 * time.Millisecond), written.Add(-fadein.FreezeLag)},
	} {
		if got := kubeFadeTime(tc.recorded, tc.built); !got.Equal(tc.want) {
			t.Errorf("%s: kubeFadeTime(%v, %v) = %v, want %v", tc.name, tc.recorded, tc.built, got, tc.want)
		}
	}
}

// TestKubeSliceChangeTime: the API server's write time wins over the
// controller's trigger time, which is a fallback, as the creation time is.
func TestKubeSliceChangeTime(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 1, 1, 11, 0, 0, 0, time.UTC))
	trigger := time.Date(2026, 1, 1, 12, 0, 0, 123, time.UTC)
	w1, w2 := metav1.NewTime(trigger.Add(-time.Minute).Truncate(time.Second)), metav1.NewTime(trigger.Add(3*time.Second).Truncate(time.Second))
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{
		CreationTimestamp: created,
		Annotations:       map[string]string{corev1.EndpointsLastChangeTriggerTime: trigger.Format(time.RFC3339Nano)},
		ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: "a", Time: &w2}, {Manager: "b", Time: &w1}},
	}}
	if got := kubeSliceChangeTime(sl); !got.Equal(w2.Time) {
		t.Fatalf("with managedFields: %v, want the newest write %v", got, w2.Time)
	}
	sl.ManagedFields = nil
	if got := kubeSliceChangeTime(sl); !got.Equal(trigger) {
		t.Fatalf("without managedFields: %v, want the trigger time %v", got, trigger)
	}
	sl.Annotations = nil
	if got := kubeSliceChangeTime(sl); !got.Equal(created.Time) {
		t.Fatalf("with neither: %v, want the creation time %v", got, created.Time)
	}
}

// TestKubeBuildHashKey: endpoints take the key the annotation names; one
// without it is hashed by its address and reported; a key held twice is
// kept by the first endpoint in address order only, so the model (and
// Envoy) never see one ring identity twice.
func TestKubeBuildHashKey(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	sl := kubeFixtureSlice("a", discoveryv1.AddressTypeIPv4, t0, "10.0.0.4", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.5")
	sl.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "db-0"} // same Pod name as 10.0.0.1
	sl.Endpoints[1].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "db-0"}
	sl.Endpoints[2].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "db-1"}
	sl.Endpoints[3].TargetRef = &corev1.ObjectReference{Kind: "Node", Name: "n1"} // not a Pod
	// A hand-written name spelled as the address key of 10.0.0.3.
	sl.Endpoints[4].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "10.0.0.3:8080"}
	f := &kubeFixture{
		svcs:   []*corev1.Service{kubeFixtureService(map[string]string{AnnotationHashKey: KubeHashKeyPodName})},
		slices: map[string][]*discoveryv1.EndpointSlice{"ns/svc": {sl}},
	}
	s, problems, _ := kubeNewBuilder(DefaultKubeMaxRingSize).build(f.svcs, f.slicesOf, t0)
	if err := s.Normalize(); err != nil {
		t.Fatalf("the state is invalid: %v", err)
	}
	var got []string
	for _, e := range s.Clusters[0].Endpoints {
		got = append(got, e.HostPort()+"="+e.HashKey)
	}
	want := []string{"10.0.0.1:8080=db-0", "10.0.0.2:8080=db-1", "10.0.0.3:8080="}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("endpoints = %v, want %v", got, want)
	}
	var msgs []string
	for _, p := range problems {
		msgs = append(msgs, p.Field+": "+p.Message)
	}
	wantMsgs := []string{
		`endpoints[3]: has no Pod targetRef for ringxds.io/hash-key "pod-name"; the endpoint is hashed by its address`,
		`endpoints[0]: hash key "db-0" is also 10.0.0.1:8080's ring key; the endpoint is skipped`,
		`endpoints[4]: hash key "10.0.0.3:8080" is also 10.0.0.3:8080's ring key; the endpoint is skipped`,
	}
	if !reflect.DeepEqual(msgs, wantMsgs) {
		t.Fatalf("problems = %q, want %q", msgs, wantMsgs)
	}

	f.svcs[0].Annotations[AnnotationHashKey] = "pod"
	if s, problems, _ := kubeNewBuilder(DefaultKubeMaxRingSize).build(f.svcs, f.slicesOf, t0); len(s.Clusters) != 0 || len(problems) != 1 || problems[0].Field != AnnotationHashKey {
		t.Fatalf("a bad hash-key: clusters %v, problems %+v; want the Service withdrawn and the annotation named", s.Clusters, problems)
	}
}

// TestKubeBuildHashKeyChangeStartsOver: switching a fading Service to hash
// keys changes every identity at once; the cluster starts over with its
// endpoints established rather than fading all of them in and replaying
// all of them as departed.
func TestKubeBuildHashKeyChangeStartsOver(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	sl := kubeFixtureSlice("a", discoveryv1.AddressTypeIPv4, t0, "10.0.0.1", "10.0.0.2")
	for i, name := range []string{"db-0", "db-1"} {
		sl.Endpoints[i].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: name}
	}
	f := &kubeFixture{
		svcs:   []*corev1.Service{kubeFixtureService(map[string]string{AnnotationFadeIn: "30s"})},
		slices: map[string][]*discoveryv1.EndpointSlice{"ns/svc": {sl}},
	}
	b := kubeNewBuilder(DefaultKubeMaxRingSize)
	b.build(f.svcs, f.slicesOf, t0)
	f.svcs[0].Annotations[AnnotationHashKey] = KubeHashKeyPodName
	s, _, next := b.build(f.svcs, f.slicesOf, t0.Add(time.Second))
	c := s.Clusters[0]
	if len(c.Departed) != 0 || !next.IsZero() || !c.Endpoints[0].FirstSeen.IsZero() || !c.Endpoints[1].FirstSeen.IsZero() {
		t.Fatalf("after the switch: %+v, next %v; want established endpoints, no departures, no fade", c, next)
	}
}

// TestKubeAdmit pins how conditions are read, including what hand-written
// slices and older publishers leave unset: kube-proxy reads an unset
// serving as serving, and the controller writes ready=false for every
// terminating Pod, so a terminating endpoint with serving unset is a
// fallback whatever its ready says.
func TestKubeAdmit(t *testing.T) {
	y, n := kubePtr(true), kubePtr(false)
	for _, tc := range []struct {
		name                 string
		c                    discoveryv1.EndpointConditions
		wantAdmit, wantDrain bool
	}{
		{"all unset", discoveryv1.EndpointConditions{}, true, false},
		{"ready", discoveryv1.EndpointConditions{Ready: y, Serving: y, Terminating: n}, true, false},
		{"publishNotReadyAddresses, unready", discoveryv1.EndpointConditions{Ready: y, Serving: n, Terminating: n}, false, false},
		{"serving unset, not ready", discoveryv1.EndpointConditions{Ready: n}, false, false},
		{"terminating, serving", discoveryv1.EndpointConditions{Ready: n, Serving: y, Terminating: y}, false, true},
		{"terminating, not serving", discoveryv1.EndpointConditions{Ready: n, Serving: n, Terminating: y}, false, false},
		{"terminating, serving unset", discoveryv1.EndpointConditions{Ready: n, Terminating: y}, false, true},
	} {
		if admit, drain := kubeAdmit(tc.c); admit != tc.wantAdmit || drain != tc.wantDrain {
			t.Errorf("%s: admit=%v draining=%v, want %v %v", tc.name, admit, drain, tc.wantAdmit, tc.wantDrain)
		}
	}
}

// TestKubeBuildFirstEndpointsAreEstablished: a Service served first with no
// endpoints (its slices not yet labelled for the selector, or scaled to
// zero) gets its first endpoints established, as a replica started after
// they arrived sees them; they used to fade in on the replica that had
// built the empty cluster.
func TestKubeBuildFirstEndpointsAreEstablished(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f := &kubeFixture{
		svcs:   []*corev1.Service{kubeFixtureService(map[string]string{AnnotationFadeIn: "30s"})},
		slices: map[string][]*discoveryv1.EndpointSlice{},
	}
	running := kubeNewBuilder(DefaultKubeMaxRingSize)
	if s, _, _ := running.build(f.svcs, f.slicesOf, t0); len(s.Clusters) != 0 {
		t.Fatalf("clusters %v with no endpoints", s.Clusters)
	}
	f.slices["ns/svc"] = []*discoveryv1.EndpointSlice{kubeFixtureSlice("a", discoveryv1.AddressTypeIPv4, t0.Add(time.Second), "10.0.0.1", "10.0.0.2")}
	a, _, _ := running.build(f.svcs, f.slicesOf, t0.Add(2*time.Second))
	b, _, _ := kubeNewBuilder(DefaultKubeMaxRingSize).build(f.svcs, f.slicesOf, t0.Add(2*time.Second))
	if !reflect.DeepEqual(a.Clusters, b.Clusters) {
		t.Fatalf("the running replica publishes %+v, a fresh one %+v", a.Clusters, b.Clusters)
	}
	for _, e := range a.Clusters[0].Endpoints {
		if !e.FirstSeen.IsZero() {
			t.Fatalf("%s fades in from %v; a cluster's first endpoints are established", e.HostPort(), e.FirstSeen)
		}
	}
}

// ringxds.io/readers reaches the cluster's readers; a bad entry withdraws
// the Service like any bad annotation, naming it.
func TestKubeBuildReaders(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f := &kubeFixture{
		svcs:   []*corev1.Service{kubeFixtureService(map[string]string{AnnotationReaders: "checkout, spiffe://cluster.local/ns/web/sa/frontend"})},
		slices: map[string][]*discoveryv1.EndpointSlice{"ns/svc": {kubeFixtureSlice("a", discoveryv1.AddressTypeIPv4, t0, "10.0.0.1")}},
	}
	s, problems, _ := kubeNewBuilder(DefaultKubeMaxRingSize).build(f.svcs, f.slicesOf, t0)
	if len(problems) != 0 || len(s.Clusters) != 1 || !reflect.DeepEqual(s.Clusters[0].Readers, []string{"checkout", "spiffe://cluster.local/ns/web/sa/frontend"}) {
		t.Fatalf("clusters %+v, problems %+v; want the readers on the cluster", s.Clusters, problems)
	}
	f.svcs[0].Annotations[AnnotationReaders] = "checkout,Web"
	s, problems, _ = kubeNewBuilder(DefaultKubeMaxRingSize).build(f.svcs, f.slicesOf, t0)
	if len(s.Clusters) != 0 || len(problems) != 1 || problems[0].Field != AnnotationReaders || !strings.Contains(problems[0].Message, `"Web"`) {
		t.Fatalf("clusters %+v, problems %+v; want the Service withdrawn and the reader named", s.Clusters, problems)
	}
}
