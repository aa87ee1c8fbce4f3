package watch

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ringxds/ringxds/internal/kubetest"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// kubeTestBadAnnotationReplicas: a replica that served a Service before its
// annotation went bad and a replica started while it is bad publish the same
// state, and the same again once it is fixed. A replica used to keep the
// last valid settings in memory and serve them, while a new one served
// nothing; a rolling upgrade then withdrew the Service everywhere.
func kubeTestBadAnnotationReplicas(t *testing.T, env *kubetest.Env) {
	c := env.Client
	ns := env.Namespace(t)
	kubeCreateService(t, c, ns, "cfg", kubeOptIn(map[string]string{AnnotationLBPolicy: "maglev", AnnotationFadeIn: "30s"}))
	sl := kubeSlice(ns, "cfg", "cfg-a", discoveryv1.AddressTypeIPv4, "http", 8080, kubeReadyEPs("10.5.0.1"))
	kubeApplySlice(t, c, sl)
	kubeCreateService(t, c, ns, "ok", kubeOptIn(nil))
	okSlice := kubeSlice(ns, "ok", "ok-a", discoveryv1.AddressTypeIPv4, "http", 8080, kubeReadyEPs("10.5.1.1"))
	kubeApplySlice(t, c, okSlice)
	old := kubeStartSource(t, c, KubeOptions{Namespace: ns})
	name, okName := KubeClusterName(ns, "cfg"), KubeClusterName(ns, "ok")
	old.rec.waitFor(t, "cfg", kubeHasAddrs(name, "10.5.0.1:8080"))

	kubeUpdateService(t, c, ns, "cfg", func(s *corev1.Service) { s.Annotations[AnnotationLBPolicy] = "maglev2" })
	old.rec.waitFor(t, "the bad Service to be withdrawn", kubeAbsent(name))
	// Endpoints change while the annotation is bad; a replica starts.
	sl.Endpoints = kubeReadyEPs("10.5.0.1", "10.5.0.2")
	kubeApplySlice(t, c, sl)
	fresh := kubeStartSource(t, c, KubeOptions{Namespace: ns})
	okSlice.Endpoints = kubeReadyEPs("10.5.1.1", "10.5.1.2")
	kubeApplySlice(t, c, okSlice)
	both := kubeHasAddrs(okName, "10.5.1.1:8080", "10.5.1.2:8080")
	a := old.rec.waitFor(t, "the other Service's change", both)
	b := fresh.rec.waitFor(t, "the other Service's change", both)
	if !reflect.DeepEqual(a.Clusters, b.Clusters) {
		t.Fatalf("with the bad annotation the replicas differ:\nold   %s\nfresh %s", kubeDescribe(a), kubeDescribe(b))
	}
	for _, r := range []kubeRunning{old, fresh} {
		probs := r.src.Problems()
		if len(probs) != 1 || probs[0].Object != ns+"/cfg" || probs[0].Field != AnnotationLBPolicy ||
			!strings.Contains(probs[0].Message, "maglev2") || !strings.Contains(probs[0].Message, "not served") {
			t.Fatalf("problems = %+v, want one naming %s, the bad value and that the Service is not served", probs, AnnotationLBPolicy)
		}
	}

	// Fixed: both replicas serve the same, with both endpoints established
	// (neither remembers the Service from before the mistake).
	kubeUpdateService(t, c, ns, "cfg", func(s *corev1.Service) { s.Annotations[AnnotationLBPolicy] = "maglev" })
	fixed := kubeHasAddrs(name, "10.5.0.1:8080", "10.5.0.2:8080")
	a = old.rec.waitFor(t, "the fixed Service", fixed)
	b = fresh.rec.waitFor(t, "the fixed Service", fixed)
	if !reflect.DeepEqual(a.Clusters, b.Clusters) {
		t.Fatalf("after the fix the replicas differ:\nold   %s\nfresh %s", kubeDescribe(a), kubeDescribe(b))
	}
	if cl, _ := a.Cluster(name); cl.Policy != model.PolicyMaglev || !cl.Endpoints[0].FirstSeen.IsZero() || !cl.Endpoints[1].FirstSeen.IsZero() {
		t.Fatalf("fixed cluster = %+v, want maglev with established endpoints", cl)
	}
	kubeNoProblem(t, old.src)
	kubeNoProblem(t, fresh.src)
}

// kubeTestHashKeyRestart: a StatefulSet Pod restarted under a new IP keeps
// its ring key (its hostname) and so every key it owned on Envoy's ring,
// while a Service hashed by address moves them. Fade-in follows the key: a
// key that changes address is the same endpoint; a key that left and came
// back is new again, as its Pod's cache is cold.
func kubeTestHashKeyRestart(t *testing.T, env *kubetest.Env) {
	c := env.Client
	ns := env.Namespace(t)
	pod := func(host, addr string) discoveryv1.Endpoint {
		e := kubeEP(addr)
		e.Hostname = kubePtr(host)
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: host}
		return e
	}
	three := func(web1 string) []discoveryv1.Endpoint {
		return []discoveryv1.Endpoint{pod("web-0", "10.14.0.1"), pod("web-1", web1), pod("web-2", "10.14.0.3")}
	}
	for _, svc := range []string{"web", "byaddr"} {
		ann := map[string]string{AnnotationFadeIn: "30s"}
		if svc == "web" {
			ann[AnnotationHashKey] = KubeHashKeyHostname
		}
		kubeCreateService(t, c, ns, svc, kubeOptIn(ann))
		kubeApplySlice(t, c, kubeSlice(ns, svc, svc+"-a", discoveryv1.AddressTypeIPv4, "http", 8080, three("10.14.0.2")))
	}
	r := kubeStartSource(t, c, KubeOptions{Namespace: ns})
	web, byAddr := KubeClusterName(ns, "web"), KubeClusterName(ns, "byaddr")
	all := func(web1 string) func(model.State) bool {
		return func(s model.State) bool {
			want := []string{"10.14.0.1:8080", "10.14.0.3:8080", web1}
			slices.Sort(want)
			return kubeHasAddrs(web, want...)(s) && kubeHasAddrs(byAddr, want...)(s)
		}
	}
	before := r.rec.waitFor(t, "three pods", all("10.14.0.2:8080"))

	// web-1 restarts and its slice entry changes address in one write.
	for _, svc := range []string{"web", "byaddr"} {
		kubeApplySlice(t, c, kubeSlice(ns, svc, svc+"-a", discoveryv1.AddressTypeIPv4, "http", 8080, three("10.14.0.9")))
	}
	after := r.rec.waitFor(t, "web-1 under its new IP", all("10.14.0.9:8080"))
	if moved := kubeOwnersMoved(t, before, after, web); moved != 0 {
		t.Fatalf("%d of 1000 keys changed owner on Envoy's ring with the hash key set, want 0", moved)
	}
	if moved := kubeOwnersMoved(t, before, after, byAddr); moved == 0 {
		t.Fatalf("no key moved on the address-hashed control Service: the check cannot fail")
	}
	cl, _ := after.Cluster(web)
	for _, e := range cl.Endpoints {
		if !e.FirstSeen.IsZero() || len(cl.Departed) != 0 {
			t.Fatalf("%s fades in from %v, departures %+v: a key that only changed address is not new", e.HostPort(), e.FirstSeen, cl.Departed)
		}
	}

	// web-1 leaves and comes back: it fades in again, under its key.
	kubeApplySlice(t, c, kubeSlice(ns, "web", "web-a", discoveryv1.AddressTypeIPv4, "http", 8080,
		[]discoveryv1.Endpoint{pod("web-0", "10.14.0.1"), pod("web-2", "10.14.0.3")}))
	r.rec.waitFor(t, "web-1 gone", kubeHasAddrs(web, "10.14.0.1:8080", "10.14.0.3:8080"))
	kubeApplySlice(t, c, kubeSlice(ns, "web", "web-a", discoveryv1.AddressTypeIPv4, "http", 8080, three("10.14.0.7")))
	back := r.rec.waitFor(t, "web-1 back", kubeHasAddrs(web, "10.14.0.1:8080", "10.14.0.3:8080", "10.14.0.7:8080"))
	cl, _ = back.Cluster(web)
	for _, e := range cl.Endpoints {
		if fading := !e.FirstSeen.IsZero(); fading != (e.HashKey == "web-1") {
			t.Fatalf("%s (key %q) fading=%v; only the returning web-1 fades in", e.HostPort(), e.HashKey, fading)
		}
	}
	kubeNoProblem(t, r.src)
}

// kubeOwnersMoved counts the keys of 1000 whose owner, named by its hash
// key (else its address), differs on Envoy's ring between two states.
func kubeOwnersMoved(t *testing.T, before, after model.State, name string) int {
	t.Helper()
	owners := func(s model.State) []string {
		snap, err := snapshot.Build(s, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		cds, _ := snap.Kinds[snapshot.KindEnvoy][resourcev3.ClusterType][name].(*clusterv3.Cluster)
		cla, _ := snap.Kinds[snapshot.KindEnvoy][resourcev3.EndpointType][name].(*endpointv3.ClusterLoadAssignment)
		d, err := snapshot.Decode(cds, cla, snapshot.KindEnvoy)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]string, 1000)
		for i := range out {
			e := d.Endpoints[d.Ring.Pick(ringhash.HashKey(fmt.Sprintf("key-%d", i)))]
			out[i] = cmp.Or(e.HashKey, e.Addr)
		}
		return out
	}
	a, b := owners(before), owners(after)
	moved := 0
	for i := range a {
		if a[i] != b[i] && !(strings.HasPrefix(a[i], "10.14.0.2") && strings.HasPrefix(b[i], "10.14.0.9")) {
			moved++
		}
	}
	return moved
}
