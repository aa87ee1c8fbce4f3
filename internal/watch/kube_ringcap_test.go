package watch

import (
	"context"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ringxds/ringxds/internal/kubetest"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// TestKubeBuildRingSizeCap: the hostile Service, Envoy's largest
// ring with a fade, is served at the cap through a scale-up, with the
// problem listed on every build, and each State can be published.
func TestKubeBuildRingSizeCap(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f := &kubeFixture{
		svcs: []*corev1.Service{kubeFixtureService(map[string]string{AnnotationRingSize: "8388608", AnnotationFadeIn: "30s"})},
		slices: map[string][]*discoveryv1.EndpointSlice{
			"ns/svc": {kubeFixtureSlice("a", discoveryv1.AddressTypeIPv4, t0, "10.0.0.1", "10.0.0.2")},
		},
	}
	b := kubeNewBuilder(DefaultKubeMaxRingSize)
	check := func(now time.Time, endpoints int) {
		t.Helper()
		s, problems, _ := b.build(f.svcs, f.slicesOf, now)
		if len(s.Clusters) != 1 || len(s.Clusters[0].Endpoints) != endpoints {
			t.Fatalf("state %s, want svc.ns with %d endpoints", kubeDescribe(s), endpoints)
		}
		if c := s.Clusters[0]; c.MinRingSize != DefaultKubeMaxRingSize || c.MaxRingSize != DefaultKubeMaxRingSize {
			t.Fatalf("ring sizes %d..%d, want both %d", c.MinRingSize, c.MaxRingSize, DefaultKubeMaxRingSize)
		}
		if len(problems) != 1 || problems[0].kind != "annotation" || problems[0].Object != "ns/svc" || problems[0].Field != AnnotationRingSize ||
			!strings.Contains(problems[0].Message, "8388608 is above 65536") || !strings.Contains(problems[0].Message, "--kube-max-ring-size") {
			t.Fatalf("problems %+v, want one on %s naming the value, the cap and the flag", problems, AnnotationRingSize)
		}
		if err := s.Normalize(); err != nil {
			t.Fatalf("invalid state: %v", err)
		}
		if _, err := snapshot.Build(s, now); err != nil {
			t.Fatalf("the state cannot be published: %v", err)
		}
	}
	check(t0.Add(time.Hour), 2)
	joined := t0.Add(time.Hour + time.Second)
	f.slices["ns/svc"] = []*discoveryv1.EndpointSlice{kubeFixtureSlice("a", discoveryv1.AddressTypeIPv4, joined, "10.0.0.1", "10.0.0.2", "10.0.0.3")}
	check(joined.Add(time.Second), 3)
}

// A zero MaxRingSize is the default; one above Envoy's limit is refused, as
// it could only mean a mistake.
func TestKubeOptionsMaxRingSize(t *testing.T) {
	s, err := NewKubeSource(fake.NewClientset(), KubeOptions{})
	if err != nil || s.opts.MaxRingSize != DefaultKubeMaxRingSize {
		t.Fatalf("zero: max ring size %d, %v; want the default %d", s.opts.MaxRingSize, err, DefaultKubeMaxRingSize)
	}
	if s, err := NewKubeSource(fake.NewClientset(), KubeOptions{MaxRingSize: model.MaxRingSize}); err != nil || s.opts.MaxRingSize != model.MaxRingSize {
		t.Fatalf("Envoy's limit: %v", err)
	}
	if _, err := NewKubeSource(fake.NewClientset(), KubeOptions{MaxRingSize: model.MaxRingSize + 1}); err == nil || !strings.Contains(err.Error(), "max ring size") {
		t.Fatalf("above Envoy's limit: %v", err)
	}
}

// kubeTestRingSizeCap runs the hostile Service against a real API
// server: ringxds.io/ring-size 8388608 with a fade. The source serves it
// with rings at the cap, in the model and in the Clusters the xDS server
// publishes, lists the problem, logs and counts it, and keeps fading in
// endpoints; fixing the annotation clears the problem.
func kubeTestRingSizeCap(t *testing.T, env *kubetest.Env) {
	c := env.Client
	ns := env.Namespace(t)
	kubeCreateService(t, c, ns, "big", kubeOptIn(map[string]string{AnnotationRingSize: "8388608", AnnotationFadeIn: "10m"}))
	sl := kubeSlice(ns, "big", "big-a", discoveryv1.AddressTypeIPv4, "http", 8080, kubeReadyEPs("10.11.0.1", "10.11.0.2"))
	kubeApplySlice(t, c, sl)
	logCore, logs := observer.New(zap.WarnLevel)
	reg := prometheus.NewRegistry()
	r := kubeStartSource(t, c, KubeOptions{Namespace: ns, Logger: zap.New(logCore), Registerer: reg})
	name := KubeClusterName(ns, "big")
	s := r.rec.waitFor(t, "big with two endpoints", kubeHasAddrs(name, "10.11.0.1:8080", "10.11.0.2:8080"))

	cl, _ := s.Cluster(name)
	if cl.MinRingSize != DefaultKubeMaxRingSize || cl.MaxRingSize != DefaultKubeMaxRingSize {
		t.Fatalf("model ring sizes %d..%d, want both %d", cl.MinRingSize, cl.MaxRingSize, DefaultKubeMaxRingSize)
	}
	p := r.src.Problems()
	if len(p) != 1 || p[0].Object != ns+"/big" || p[0].Field != AnnotationRingSize {
		t.Fatalf("problems %+v, want one on %s of %s/big", p, AnnotationRingSize, ns)
	}
	for _, w := range []string{"8388608", "65536", "--kube-max-ring-size", "served with"} {
		if !strings.Contains(p[0].Message, w) {
			t.Errorf("problem %q does not say %q", p[0].Message, w)
		}
	}
	if got := testutil.ToFloat64(r.src.metrics.problems.WithLabelValues("annotation")); got != 1 {
		t.Errorf("ringxds_kube_problems_total{kind=annotation} = %v, want 1", got)
	}
	if l := logs.FilterField(zap.String("field", AnnotationRingSize)).All(); len(l) != 1 || !strings.Contains(l[0].ContextMap()["problem"].(string), "--kube-max-ring-size") {
		t.Errorf("log lines on %s: %+v, want one naming the flag", AnnotationRingSize, l)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := server.New(ctx, server.Options{Logger: zaptest.NewLogger(t)})
	if err := srv.Apply(s); err != nil {
		t.Fatalf("the server refuses the capped state: %v", err)
	}
	kubeCheckPublishedRing(t, srv.Current(), name, DefaultKubeMaxRingSize)

	// A scale-up still fades in, planned on the capped ring.
	sl.Endpoints = kubeReadyEPs("10.11.0.1", "10.11.0.2", "10.11.0.3")
	kubeApplySlice(t, c, sl)
	s = r.rec.waitFor(t, "the third endpoint", kubeHasAddrs(name, "10.11.0.1:8080", "10.11.0.2:8080", "10.11.0.3:8080"))
	if err := srv.Apply(s); err != nil {
		t.Fatalf("the server refuses the capped state mid-fade: %v", err)
	}
	snap := srv.Current()
	if f := snap.Fading[name]; len(f) != 1 || f[0].Endpoint != "10.11.0.3:8080" {
		t.Fatalf("fading %+v, want the new endpoint", f)
	}
	kubeCheckPublishedRing(t, snap, name, DefaultKubeMaxRingSize)

	kubeUpdateService(t, c, ns, "big", func(svc *corev1.Service) { svc.Annotations[AnnotationRingSize] = "4096" })
	r.rec.waitFor(t, "ring size 4096", func(s model.State) bool {
		cl, ok := s.Cluster(name)
		return ok && cl.MaxRingSize == 4096
	})
	kubeNoProblem(t, r.src)
}

// kubeCheckPublishedRing checks the ring sizes of cluster in the Clusters
// the snapshot publishes: Envoy's typed RingHash policy, and the legacy
// ring_hash_lb_config gRPC clients get besides. The maximum must be max;
// the minimum at most that (a fade-in layout may lower it, docs/fade-in.md).
func kubeCheckPublishedRing(t *testing.T, snap *snapshot.Snapshot, cluster string, max uint64) {
	t.Helper()
	check := func(kind snapshot.Kind, what string, minSize, maxSize uint64) {
		t.Helper()
		if maxSize != max || minSize == 0 || minSize > max {
			t.Errorf("%s %s: ring sizes %d..%d, want at most %d, maximum %d", kind, what, minSize, maxSize, max, max)
		}
	}
	seen := 0
	for _, kind := range []snapshot.Kind{snapshot.KindEnvoy, snapshot.KindGRPC} {
		for _, res := range snap.Kinds[kind][resourcev3.ClusterType] {
			cl, ok := res.(*clusterv3.Cluster)
			if !ok || cl.GetName() != cluster {
				continue
			}
			if rh := cl.GetRingHashLbConfig(); rh != nil {
				check(kind, "ring_hash_lb_config", rh.GetMinimumRingSize().GetValue(), rh.GetMaximumRingSize().GetValue())
				seen++
			}
			for _, pol := range cl.GetLoadBalancingPolicy().GetPolicies() {
				var rh ringhashv3.RingHash
				if pol.GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(&rh) == nil {
					check(kind, "RingHash policy", rh.GetMinimumRingSize().GetValue(), rh.GetMaximumRingSize().GetValue())
					seen++
				}
			}
		}
	}
	// Envoy's policy, and gRPC's policy and legacy fields.
	if seen != 3 {
		t.Fatalf("found %d ring size settings for %s, want 3", seen, cluster)
	}
}
