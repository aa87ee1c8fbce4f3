package snapshot

import (
	"fmt"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ringxds/ringxds/internal/model"
)

// scaleCluster is old established endpoints and add new ones starting at
// start + i x stagger, 30 s fade of exponent 2.5, max ring 4096.
func scaleCluster(old, add int, start time.Time, stagger time.Duration, capacity uint64) model.Cluster {
	c := model.Cluster{Name: "products", Policy: model.PolicyRingHash, MinRingSize: 1024, MaxRingSize: 4096,
		FadeIn: &model.FadeIn{Duration: 30 * time.Second, Exponent: 2.5, Capacity: capacity}}
	for i := range old + add {
		ep := model.Endpoint{Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 8080, Weight: 1}
		if i >= old {
			ep.FirstSeen = start.Add(time.Duration(i-old) * stagger)
		}
		c.Endpoints = append(c.Endpoints, ep)
	}
	return c
}

// fadeVersions steps a Builder through the fade of c (the cluster before
// the fade first, whose endpoints are the first old ones), one build per
// second, and counts the Cluster changes and assignment changes a client
// sees, and the mixed pairs (each step's Cluster with the neighbouring
// step's assignment, both ways) that PairConsistent refuses. It checks
// each pair PairConsistent accepts decodes to the ring of the assignment's
// own step in every dialect.
func fadeVersions(t *testing.T, before, c model.Cluster, from time.Time, steps int) (cds, eds, mixed, inexact int) {
	t.Helper()
	bld := NewBuilder()
	type half struct {
		cds *clusterv3.Cluster
		cla *endpointv3.ClusterLoadAssignment
	}
	var prev *half
	for s := -1; s <= steps; s++ {
		st := state(t, c)
		if s < 0 {
			st = state(t, before)
		}
		snap, err := bld.Build(st, from.Add(time.Duration(s)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		cur := &half{
			cds: snap.Kinds[KindEnvoy][resourcev3.ClusterType]["products"].(*clusterv3.Cluster),
			cla: snap.Kinds[KindEnvoy][resourcev3.EndpointType]["products"].(*endpointv3.ClusterLoadAssignment),
		}
		if !PairConsistent(cur.cds, cur.cla) {
			t.Fatalf("step %d: own pair inconsistent", s)
		}
		if prev != nil {
			if !proto.Equal(prev.cds, cur.cds) {
				cds++
				mixed += 2
				for j, p := range []half{{prev.cds, cur.cla}, {cur.cds, prev.cla}} {
					if !PairConsistent(p.cds, p.cla) {
						inexact++
						t.Logf("step %d: %s Cluster with %s weights inexact", s, []string{"old", "new"}[j], []string{"new", "old"}[j])
						continue
					}
					for _, k := range []Kind{KindEnvoy, KindGRPC, KindClientlib} {
						own, err1 := Decode(cur.cds, p.cla, k)
						if p.cla == prev.cla {
							own, err1 = Decode(prev.cds, p.cla, k)
						}
						got, err2 := Decode(p.cds, p.cla, k)
						if err1 != nil || err2 != nil || !sameRing(own, got) {
							t.Fatalf("step %d, %s: a pair PairConsistent accepts builds another ring", s, k)
						}
					}
				}
			}
			if !proto.Equal(prev.cla, cur.cla) {
				eds++
			}
		}
		prev = cur
	}
	return cds, eds, mixed, inexact
}

// sameRing compares two decoded ring_hash rings entry by entry through
// their picks at every entry position.
func sameRing(a, b *Decoded) bool {
	for i := range 4096 {
		h := uint64(i) * (^uint64(0) / 4096)
		if a.Endpoints[a.Ring.Pick(h)].Addr != b.Endpoints[b.Ring.Pick(h)].Addr {
			return false
		}
	}
	return true
}

// TestFadeChangesTheClusterRarely: through a 100 -> 110 fade the Cluster
// changes at most twice (the steady minimum moving), every mixed pair
// builds the planned ring, and EDS carries the ramp.
func TestFadeChangesTheClusterRarely(t *testing.T) {
	for _, tc := range []struct {
		name               string
		old, add           int
		stagger            time.Duration
		capacity           uint64
		maxCDS, maxInexact int
		fade               time.Duration
	}{
		{"100->110", 100, 10, 0, 256, 2, 0, 0},
		{"100->110 staggered 1s", 100, 10, time.Second, 256, 2, 0, 0},
		{"10->11", 10, 1, 0, 0, 11, 14, 0},
		{"100->150 capacity 256", 100, 50, 0, 256, 5, 1, 0},
		// testcp.BatchFade's fade, which grpc-go follows end to end.
		// One mixed pair cannot be exact: the old Cluster with the new
		// weights, which a client holds only if EDS overtakes CDS.
		{"100->110 over 10s, no capacity", 100, 10, 0, 0, 2, 1, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := scaleCluster(tc.old, tc.add, epoch, tc.stagger, tc.capacity)
			if tc.fade > 0 {
				c.FadeIn.Duration = tc.fade
			}
			before := c.Clone()
			before.Endpoints = before.Endpoints[:tc.old]
			steps := int(c.FadeIn.Duration/time.Second) + 1 + int(time.Duration(tc.add-1)*tc.stagger/time.Second)
			cds, eds, mixed, inexact := fadeVersions(t, before, c, epoch, steps)
			t.Logf("%s: CDS changes %d, EDS pushes %d, mixed pairs %d, inexact %d", tc.name, cds, eds, mixed, inexact)
			if cds > tc.maxCDS || inexact > tc.maxInexact {
				t.Fatalf("%s: %d CDS changes (at most %d), %d inexact mixed pairs (at most %d)", tc.name, cds, tc.maxCDS, inexact, tc.maxInexact)
			}
		})
	}
}

// A fade longer than maxScheduleSteps is scheduled in tiles: every step,
// early and late, builds (it used to index before the window and panic on
// the Kubernetes source's 10 min fades), and the Cluster changes a bounded
// number of times.
func TestLongFadeIsScheduledInTiles(t *testing.T) {
	c := scaleCluster(100, 10, epoch, 0, 256)
	c.FadeIn.Duration = 10 * time.Minute
	before := c.Clone()
	before.Endpoints = before.Endpoints[:100]
	cds, eds, _, inexact := fadeVersions(t, before, c, epoch, 601)
	t.Logf("10 min fade: CDS changes %d, EDS pushes %d, inexact mixed pairs %d", cds, eds, inexact)
	if cds > 6 {
		t.Fatalf("%d CDS changes over a 10 min fade in three tiles, want a few", cds)
	}
}

// A rolling restart with the default 30 s fade (one pod every 10 s, 40
// pods) chains fades over 420 steps, beyond one schedule tile: every step
// builds without error (it used to fail from step 230 and panic at 256).
func TestLongRollingRestartBuildsEveryStep(t *testing.T) {
	c := model.Cluster{Name: "c", Policy: model.PolicyRingHash, MinRingSize: 1024, MaxRingSize: 4096,
		FadeIn: &model.FadeIn{Duration: 30 * time.Second, Exponent: 2.5, Capacity: 100}}
	for i := range 60 {
		ep := model.Endpoint{Address: fmt.Sprintf("10.0.0.%d", i+1), Port: 80, Weight: 1}
		c.Endpoints = append(c.Endpoints, ep)
	}
	b := NewBuilder()
	errs := 0
	for s := 0; s < 420; s++ {
		now := epoch.Add(time.Duration(s)*time.Second + 500*time.Millisecond)
		if s%10 == 0 && s/10 < 40 {
			c.Endpoints = append(c.Endpoints, model.Endpoint{Address: fmt.Sprintf("10.0.1.%d", s/10+1), Port: 80, Weight: 1, FirstSeen: now.Add(-200 * time.Millisecond)})
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("step %d: Build panicked: %v", s, r)
				}
			}()
			if _, err := b.Build(state(t, c), now); err != nil {
				errs++
				if errs < 4 || s%50 == 0 {
					t.Errorf("step %d: Build: %v", s, err)
				}
			}
		}()
	}
	t.Logf("%d failed builds", errs)
}
