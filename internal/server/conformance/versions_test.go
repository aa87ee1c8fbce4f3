package conformance_test

import (
	"fmt"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ringxds/ringxds/internal/testcp"
)

// versionCounter follows what one Envoy-shaped peer holds for products and
// counts how often each resource really changed: every changed Cluster is a
// cluster Envoy rebuilds, connection pools and all.
type versionCounter struct {
	cds *clusterv3.Cluster
	cla *endpointv3.ClusterLoadAssignment
	// cdsChanges and edsChanges count changes since the last reset.
	cdsChanges, edsChanges int
	ringSizes              []uint64
}

func (v *versionCounter) follow(t *testing.T, p *peer, seen int) int {
	t.Helper()
	for {
		m, i, ok := p.await(seen, settle, func(message) bool { return true })
		if !ok {
			return seen
		}
		seen = i + 1
		res, has := m.resources["products"]
		switch {
		case m.typeURL == resource.ClusterType && has:
			if c := cluster(t, res); v.cds == nil || !proto.Equal(c, v.cds) {
				v.cds, v.cdsChanges = c, v.cdsChanges+1
				v.ringSizes = append(v.ringSizes, minRingSize(c))
			}
			p.ack(m, nil)
		case m.typeURL == resource.EndpointType && has:
			if a := assignment(t, res); v.cla == nil || !proto.Equal(a, v.cla) {
				v.cla, v.edsChanges = a, v.edsChanges+1
			}
			p.ack(m, []string{"products"})
		default:
			p.ack(m, map[string][]string{resource.EndpointType: {"products"}}[m.typeURL])
		}
	}
}

// TestFadeClusterAndEndpointVersions counts the Cluster and
// ClusterLoadAssignment versions an Envoy receives through a fade (10 -> 11),
// a removal with no fade under way, and a larger scale-up (10 -> 40), with
// the fade held at each of its steps.
//
// Every changed Cluster is one Envoy rebuilds, so the fade keeps
// maximum_ring_size and moves only the minimum, where no minimum serves
// two neighbouring steps (fadein.RingSizeSchedule). With this 8 s linear
// fade the steps add far more entries than a window holds (about R/c, c
// the smallest count), so the bound reached is modest: 10 -> 11 changes
// the Cluster at most 8 times (7 or 8, by where the fade starts within
// its second; 10 when every step published minimum = maximum = total),
// the removal once (its steady window does not overlap the one
// before: 256 entries per endpoint against 10 endpoints), 10 -> 40 9
// times (10 before). Slower fades fare much better (docs/fade-in.md:
// 100 -> 110 over 30 s changes it once).
func TestFadeClusterAndEndpointVersions(t *testing.T) {
	clk := &clock{}
	const fade = "    fade_in: {duration: 8s, exponent: 1}\n"
	cp := testcp.Start(t, testcp.TempFile(t, endpointsFile(10, fade, false)), testcp.WithClock(clk.Now))
	p := dial(t, cp.XDSAddr, envoyNode("versions"), false)
	subscribeAll(t, p, false)
	v := &versionCounter{}
	seen := v.follow(t, p, 0)

	phase := func(name string, n int, fades bool, maxCDS, minEDS int) {
		v.cdsChanges, v.edsChanges, v.ringSizes = 0, 0, nil
		clk.Set(time.Time{})
		testcp.WriteFile(t, cp.File, endpointsFile(n, fade, false))
		var start time.Time
		testcp.WaitFor(t, 5*time.Second, name+": the change", func() bool {
			st := cp.Server.Current().Fading["products"]
			if len(st) > 0 {
				start = st[0].Start
			}
			return !fades || len(st) > 0
		})
		seen = v.follow(t, p, seen)
		for step := 1; fades && step <= 9; step++ {
			clk.Set(start.Add(time.Duration(step)*time.Second + 500*time.Millisecond))
			testcp.WaitFor(t, 5*time.Second, fmt.Sprintf("%s: step %d", name, step), func() bool {
				st := cp.Server.Current().Fading["products"]
				return len(st) == 0 || st[0].Share >= (float64(step)-0.5)/8-1e-9
			})
			seen = v.follow(t, p, seen)
		}
		t.Logf("%s: %d Cluster versions (minimum ring sizes %v), %d ClusterLoadAssignment versions", name, v.cdsChanges, v.ringSizes, v.edsChanges)
		if v.cdsChanges > maxCDS {
			t.Errorf("%s: %d Cluster versions, more than the %d the ring size schedule reaches", name, v.cdsChanges, maxCDS)
		}
		if v.edsChanges < minEDS {
			t.Errorf("%s: %d ClusterLoadAssignment versions: the test did not follow the %d it carries", name, v.edsChanges, minEDS)
		}
	}
	phase("fade 10 -> 11", 11, true, 8, 8)
	phase("removal 11 -> 10", 10, false, 1, 1)
	phase("fade 10 -> 40", 40, true, 9, 8)
}
