package snapshot

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/ringxds/ringxds/internal/model"
)

// versions maps kind/type/name to the content version of every resource.
func versions(t *testing.T, s *Snapshot) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, byType := range s.Kinds {
		for typ, byName := range byType {
			for name, res := range byName {
				v, err := Version(res)
				if err != nil {
					t.Fatal(err)
				}
				out[string(k)+" "+typ+" "+name] = v
			}
		}
	}
	return out
}

// An incremental Builder must give exactly what a fresh Build gives, through
// random edits, additions, removals and fades advancing with the clock.
func TestBuilderMatchesFreshBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	clusters := map[string]model.Cluster{}
	for i := range 8 {
		name := fmt.Sprintf("svc-%d", i)
		clusters[name] = randomCluster(rng, name, 2+rng.IntN(10))
	}
	b := NewBuilder()
	now := epoch
	for step := range 60 {
		now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		name := fmt.Sprintf("svc-%d", rng.IntN(10))
		switch c, ok := clusters[name]; {
		case !ok:
			clusters[name] = randomCluster(rng, name, 2+rng.IntN(10))
		case rng.IntN(5) == 0:
			delete(clusters, name)
		default:
			c = c.Clone()
			if c.Policy != model.PolicyMaglev && rng.IntN(2) == 0 {
				c.FadeIn = &model.FadeIn{Duration: 5 * time.Second, Exponent: 2}
			}
			c.Endpoints = append(c.Endpoints, model.Endpoint{Address: fmt.Sprintf("10.9.%d.%d", step, rng.IntN(250)+1), Port: 80, Weight: 1, FirstSeen: now})
			clusters[name] = c
		}
		var list []model.Cluster
		for _, c := range clusters {
			list = append(list, c.Clone())
		}
		st := state(t, list...)
		inc, err := b.Build(st, now)
		if err != nil {
			t.Fatalf("step %d: incremental: %v", step, err)
		}
		fresh, err := Build(st, now)
		if err != nil {
			t.Fatalf("step %d: fresh: %v", step, err)
		}
		vi, vf := versions(t, inc), versions(t, fresh)
		if len(vi) != len(vf) {
			t.Fatalf("step %d: %d resources incrementally, %d fresh", step, len(vi), len(vf))
		}
		for k, v := range vf {
			if vi[k] != v {
				t.Fatalf("step %d: %s differs between incremental and fresh builds", step, k)
			}
		}
		if !inc.NextStep.Equal(fresh.NextStep) || fmt.Sprint(inc.Notes) != fmt.Sprint(fresh.Notes) || len(inc.Fading) != len(fresh.Fading) {
			t.Fatalf("step %d: next step, notes or fading differ", step)
		}
	}
}

func TestBuilderReusesUnchangedClusters(t *testing.T) {
	a := model.Cluster{Name: "a", Endpoints: []model.Endpoint{{Address: "10.0.0.1", Port: 80}, {Address: "10.0.0.2", Port: 80}}}
	c := model.Cluster{Name: "c", Endpoints: []model.Endpoint{{Address: "10.0.1.1", Port: 80}}}
	b := NewBuilder()
	first, err := b.Build(state(t, a, c), epoch)
	if err != nil {
		t.Fatal(err)
	}
	c2 := c.Clone()
	c2.Endpoints = append(c2.Endpoints, model.Endpoint{Address: "10.0.1.2", Port: 80})
	second, err := b.Build(state(t, a, c2), epoch)
	if err != nil {
		t.Fatal(err)
	}
	same := func(s1, s2 *Snapshot, typ, name string) bool {
		var r1, r2 types.Resource = s1.Kinds[KindGRPC][typ][name], s2.Kinds[KindGRPC][typ][name]
		return r1 == r2
	}
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType} {
		if !same(first, second, typ, "a") {
			t.Errorf("unchanged cluster a: %s rebuilt", typ)
		}
	}
	if same(first, second, resourcev3.EndpointType, "c") {
		t.Error("changed cluster c kept its old endpoints")
	}
	// A fading cluster depends on the time and is rebuilt even when unchanged.
	f := model.Cluster{Name: "f", FadeIn: &model.FadeIn{Duration: 10 * time.Second, Exponent: 1},
		Endpoints: []model.Endpoint{{Address: "10.0.2.1", Port: 80}, {Address: "10.0.2.2", Port: 80, FirstSeen: epoch}}}
	s1, err := b.Build(state(t, a, f), epoch.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := b.Build(state(t, a, f), epoch.Add(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if same(s1, s2, resourcev3.EndpointType, "f") {
		t.Error("a fading cluster was reused across fade steps")
	}
}

// BenchmarkBuildOneClusterChanged is the common push: one cluster of 100
// changes, the other 99 are reused.
func BenchmarkBuildOneClusterChanged(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	var clusters []model.Cluster
	for i := range 100 {
		clusters = append(clusters, randomCluster(rng, fmt.Sprintf("svc-%03d", i), 100))
	}
	s1 := state(b, clusters...)
	clusters[42].Endpoints = clusters[42].Endpoints[1:]
	s2 := state(b, clusters...)
	bld := NewBuilder()
	if _, err := bld.Build(s1, epoch); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		st := s1
		if i%2 == 1 {
			st = s2
		}
		i++
		if _, err := bld.Build(st, epoch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuildFadeStep is the hot path of a fade: every step rebuilds
// each fading cluster. Ten of 110 endpoints (30 s fade, capacity 256) fade
// in; each iteration builds the next step of the fade with one Builder,
// wrapping around, so the per-step cost includes whatever the Builder keeps
// from step to step.
func BenchmarkBuildFadeStep(b *testing.B) {
	c := model.Cluster{Name: "products", Policy: model.PolicyRingHash, MinRingSize: 1024, MaxRingSize: 4096,
		FadeIn: &model.FadeIn{Duration: 30 * time.Second, Exponent: 2.5, Capacity: 256}}
	for i := range 110 {
		ep := model.Endpoint{Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 8080, Weight: 1}
		if i >= 100 {
			ep.FirstSeen = epoch
		}
		c.Endpoints = append(c.Endpoints, ep)
	}
	st := state(b, c)
	bld := NewBuilder()
	b.ReportAllocs()
	step := 0
	for b.Loop() {
		if _, err := bld.Build(st, epoch.Add(time.Duration(step)*time.Second)); err != nil {
			b.Fatal(err)
		}
		step = (step + 1) % 32
	}
}

// BenchmarkBuildFadeStart is the build that follows a scale event: twenty
// clusters of 100 endpoints each gain ten (30 s fade, capacity 256) at
// once, and a fresh Builder plans their first step, which schedules the
// ring sizes of every step of the fades.
func BenchmarkBuildFadeStart(b *testing.B) {
	var clusters []model.Cluster
	for n := range 20 {
		c := model.Cluster{Name: fmt.Sprintf("svc-%02d", n), Policy: model.PolicyRingHash, MinRingSize: 1024, MaxRingSize: 4096,
			FadeIn: &model.FadeIn{Duration: 30 * time.Second, Exponent: 2.5, Capacity: 256}}
		for i := range 110 {
			ep := model.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", n, i/250, i%250+1), Port: 8080, Weight: 1}
			if i >= 100 {
				ep.FirstSeen = epoch
			}
			c.Endpoints = append(c.Endpoints, ep)
		}
		clusters = append(clusters, c)
	}
	st := state(b, clusters...)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewBuilder().Build(st, epoch.Add(time.Second)); err != nil {
			b.Fatal(err)
		}
	}
}

// largeRingTenants are four clusters a tenant asked an 8M-entry ring for,
// each with ten pods turning ready 1.3 s apart into 100.
func largeRingTenants() []model.Cluster {
	var clusters []model.Cluster
	for n := range 4 {
		c := model.Cluster{Name: fmt.Sprintf("tenant-%d", n), Policy: model.PolicyRingHash, MinRingSize: 8388608, MaxRingSize: 8388608,
			FadeIn: &model.FadeIn{Duration: 30 * time.Second, Exponent: 2.5}}
		for i := range 110 {
			ep := model.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", n, i/250, i%250+1), Port: 8080, Weight: 1}
			if i >= 100 {
				ep.FirstSeen = epoch.Add(time.Duration(i-100) * 1300 * time.Millisecond)
			}
			c.Endpoints = append(c.Endpoints, ep)
		}
		clusters = append(clusters, c)
	}
	return clusters
}

// TestLargeRingFadeStaysLaidOut: a fade of an 8M-entry ring, past the
// sizes ExactWeights can make exact in doubles, once failed the build of
// the whole snapshot at the first step its weights were an entry off. It
// must build at every step, stay laid out (no fading endpoint at full
// weight), and never take an entry back.
func TestLargeRingFadeStaysLaidOut(t *testing.T) {
	st := state(t, largeRingTenants()...)
	b := NewBuilder()
	prev := map[string]uint64{}
	for s := 0; s <= 45; s++ {
		snap, err := b.Build(st, epoch.Add(time.Duration(s)*time.Second))
		if err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
		for _, note := range snap.Notes["tenant-0"] {
			if strings.Contains(note, "cannot be laid out") {
				t.Fatalf("step %d: %s", s, note)
			}
		}
		for _, f := range snap.Fading["tenant-0"] {
			if f.FinalEntries == 0 || f.Entries > f.FinalEntries {
				t.Fatalf("step %d: %s holds %d of %d entries", s, f.Endpoint, f.Entries, f.FinalEntries)
			}
			if f.Entries < prev[f.Endpoint] {
				t.Fatalf("step %d: %s went from %d to %d entries", s, f.Endpoint, prev[f.Endpoint], f.Entries)
			}
			prev[f.Endpoint] = f.Entries
		}
	}
	if len(prev) != 10 {
		t.Fatalf("saw %d fading endpoints, want 10", len(prev))
	}
}

// BenchmarkBuildLargeRingFade is what a tenant's 8M-entry rings cost the
// apply lock: a fresh Builder's first step of four such fades, which plans
// every step of each.
func BenchmarkBuildLargeRingFade(b *testing.B) {
	st := state(b, largeRingTenants()...)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewBuilder().Build(st, epoch.Add(5*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
}
