package watch

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/kubetest"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// kubeTestLateChangeSameFade: a slice change that reaches the replicas
// more than 2 s after the Pod change it reports (its trigger time is 3 s
// old, as in a rollout whose slice writes lag) gives every replica the same
// fade start, however their builds are spread, and so the same weights at
// every fade step. Replicas used to clamp such a start to 2 s before their
// own clocks, and so started fades microseconds apart.
func kubeTestLateChangeSameFade(t *testing.T, env *kubetest.Env) {
	c := env.Client
	ns := env.Namespace(t)
	kubeCreateService(t, c, ns, "late", kubeOptIn(map[string]string{AnnotationFadeIn: "30s"}))
	sl := kubeSlice(ns, "late", "late-a", discoveryv1.AddressTypeIPv4, "http", 8080, kubeReadyEPs("10.13.0.1", "10.13.0.2", "10.13.0.3"))
	kubeApplySlice(t, c, sl)
	// Coalescing settings that spread the replicas' builds over most of a
	// second, so that they straddle a second boundary as often as not.
	replicas := []kubeRunning{
		kubeStartSource(t, c, KubeOptions{Namespace: ns, Debounce: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond}),
		kubeStartSource(t, c, KubeOptions{Namespace: ns}),
		kubeStartSource(t, c, KubeOptions{Namespace: ns, Debounce: 700 * time.Millisecond}),
	}
	name := KubeClusterName(ns, "late")
	for _, r := range replicas {
		r.rec.waitFor(t, "three endpoints", kubeHasAddrs(name, "10.13.0.1:8080", "10.13.0.2:8080", "10.13.0.3:8080"))
	}

	sl.Endpoints = append(sl.Endpoints, kubeEP("10.13.0.4"))
	sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().Add(-3 * time.Second).UTC().Format(time.RFC3339Nano)}
	kubeApplySlice(t, c, sl)
	stored, err := c.DiscoveryV1().EndpointSlices(ns).Get(kubeCtx(t), sl.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	written := kubeSliceChangeTime(stored)

	var states []model.State
	for i, r := range replicas {
		s := r.rec.waitFor(t, fmt.Sprintf("replica %d to see the new endpoint", i), kubeHasAddrs(name, "10.13.0.1:8080", "10.13.0.2:8080", "10.13.0.3:8080", "10.13.0.4:8080"))
		states = append(states, s)
	}
	cl, _ := states[0].Cluster(name)
	start := cl.Endpoints[3].FirstSeen
	if !start.Equal(written) {
		t.Fatalf("the new endpoint fades in from %v, want the write's time %v (its whole second)", start, written)
	}
	for i := 1; i < len(states); i++ {
		if !reflect.DeepEqual(states[0].Clusters, states[i].Clusters) {
			t.Fatalf("replica %d publishes another state:\n%+v\n%+v", i, states[0].Clusters, states[i].Clusters)
		}
	}

	// Identical states give identical resources; check it where clients
	// see it, at every fade step, for every kind.
	end := (fadein.Curve{Duration: 30 * time.Second}).EndStep(start)
	fading := 0
	for step := fadein.StepTime(start); !step.After(end); step = step.Add(fadein.StepInterval) {
		var first *snapshot.Snapshot
		for i, s := range states {
			snap, err := snapshot.Build(s, step)
			if err != nil {
				t.Fatalf("replica %d at %v: %v", i, step, err)
			}
			if i == 0 {
				first = snap
				if len(snap.Fading[name]) > 0 {
					fading++
				}
				continue
			}
			for _, k := range snapshot.AllKinds() {
				for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType} {
					if a, b := first.Kinds[k][typ][name], snap.Kinds[k][typ][name]; !proto.Equal(a, b) {
						t.Fatalf("at %v (step %v of the fade) replica %d publishes other %s %s:\n%v\n%v", step, step.Sub(start), i, k, typ, a, b)
					}
				}
			}
		}
	}
	if fading < 25 {
		t.Fatalf("the new endpoint fades over %d steps, want about 30: the check did not cover a fade", fading)
	}
}

// kubeTestIndirectChangesSameFade: an endpoint that joins the ring through
// a write to another object (another slice's last serving Pod fails, so a
// terminating one becomes the fallback; a ringxds.io/port change gives
// every endpoint a new identity) fades in from that write, on every
// replica. Its own slice's time is old there, and replicas used to move it
// each to its own clock, publishing different weights for most of the
// fade. The replicas' coalescing differs and the writes land late in a
// second, so their builds straddle a second boundary.
func kubeTestIndirectChangesSameFade(t *testing.T, env *kubetest.Env) {
	c := env.Client
	ns := env.Namespace(t)
	v4 := discoveryv1.AddressTypeIPv4
	kubeCreateService(t, c, ns, "fb", kubeOptIn(map[string]string{AnnotationFadeIn: "30s"}))
	term := kubeEP("10.23.0.1")
	term.Conditions = discoveryv1.EndpointConditions{Ready: kubePtr(false), Serving: kubePtr(true), Terminating: kubePtr(true)}
	kubeApplySlice(t, c, kubeSlice(ns, "fb", "fb-a", v4, "http", 8080, []discoveryv1.Endpoint{term}))
	serving := kubeSlice(ns, "fb", "fb-b", v4, "http", 8080, kubeReadyEPs("10.23.0.2"))
	kubeApplySlice(t, c, serving)
	kubeCreateService(t, c, ns, "pc", kubeOptIn(map[string]string{AnnotationFadeIn: "30s", AnnotationPort: "http"}),
		corev1.ServicePort{Name: "http", Port: 80}, corev1.ServicePort{Name: "alt", Port: 81})
	sl := kubeSlice(ns, "pc", "pc-a", v4, "http", 8080, kubeReadyEPs("10.22.0.1", "10.22.0.2"))
	sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: kubePtr("alt"), Port: kubePtr(int32(9090))})
	kubeApplySlice(t, c, sl)

	replicas := []kubeRunning{
		kubeStartSource(t, c, KubeOptions{Namespace: ns, Debounce: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond}),
		kubeStartSource(t, c, KubeOptions{Namespace: ns, Debounce: 500 * time.Millisecond}),
	}
	fb, pc := KubeClusterName(ns, "fb"), KubeClusterName(ns, "pc")
	before := func(s model.State) bool {
		return kubeHasAddrs(fb, "10.23.0.2:8080")(s) && kubeHasAddrs(pc, "10.22.0.1:8080", "10.22.0.2:8080")(s)
	}
	for _, r := range replicas {
		r.rec.waitFor(t, "the first state", before)
	}
	// Older than fadein.FreezeLag, so that a start read from the untouched
	// objects would have to be moved.
	time.Sleep(fadein.FreezeLag + time.Second)
	kubeLateInSecond(t)
	serving.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: kubePtr(false), Serving: kubePtr(false), Terminating: kubePtr(false)}
	kubeApplySlice(t, c, serving)
	kubeUpdateService(t, c, ns, "pc", func(s *corev1.Service) { s.Annotations[AnnotationPort] = "alt" })
	after := func(s model.State) bool {
		return kubeHasAddrs(fb, "10.23.0.1:8080")(s) && kubeHasAddrs(pc, "10.22.0.1:9090", "10.22.0.2:9090")(s)
	}
	a := replicas[0].rec.waitFor(t, "the fallback and the new port", after)
	b := replicas[1].rec.waitFor(t, "the fallback and the new port", after)
	if !reflect.DeepEqual(a.Clusters, b.Clusters) {
		t.Fatalf("replicas publish different states:\n%+v\n%+v", a.Clusters, b.Clusters)
	}
	for _, name := range []string{fb, pc} {
		cl, _ := a.Cluster(name)
		if cl.Endpoints[0].FirstSeen.IsZero() || time.Since(cl.Endpoints[0].FirstSeen) > fadein.FreezeLag+time.Second {
			t.Fatalf("%s fades in from %v, want the second of the write that admitted it", name, cl.Endpoints[0].FirstSeen)
		}
	}
}

// kubeLateInSecond waits until the wall clock is 700-800 ms into a second,
// so that what follows is likely to be built in two different seconds by
// replicas that coalesce differently.
func kubeLateInSecond(t *testing.T) {
	t.Helper()
	for range 400 {
		if ms := time.Now().Nanosecond() / 1e6; ms >= 700 && ms < 800 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the clock never reached 700 ms into a second")
}
