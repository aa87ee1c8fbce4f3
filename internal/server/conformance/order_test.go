package conformance_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/testcp"
)

func ringYAML(size int) string {
	return fmt.Sprintf("    minimum_ring_size: %d\n    maximum_ring_size: %d\n", size, size)
}

// hasProducts matches a response of one of the types carrying products.
func hasProducts(typeURLs ...string) func(message) bool {
	return func(m message) bool {
		_, ok := m.resources["products"]
		return ok && slices.Contains(typeURLs, m.typeURL)
	}
}

// An Envoy still processing one Cluster change (its CDS response not yet
// answered) has no CDS watch open, so the next Cluster change waits for its
// answer. The CLA built with that Cluster must wait too: arriving first, it
// would complete the warming of the older Cluster, and the newer one would
// then warm until Envoy's initial fetch timeout.
func TestEndpointsWaitForTheirClusterWhileAnswersAreOutstanding(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(map[bool]string{false: "sotw", true: "delta"}[delta], func(t *testing.T) {
			cp := testcp.Start(t, testcp.TempFile(t, endpointsFile(3, ringYAML(1024), false)))
			p := dial(t, cp.XDSAddr, envoyNode("slow-envoy"), delta)
			subscribeAll(t, p, false)

			// First change: Envoy receives the Cluster and its CLA, and
			// acknowledges only the CLA while it works on the Cluster.
			at := p.count()
			testcp.WriteFile(t, cp.File, endpointsFile(3, ringYAML(2048), false))
			first, i := p.next(at, 5*time.Second, "the first changed Cluster", hasProducts(resource.ClusterType))
			eds, j := p.next(i+1, 5*time.Second, "the first Cluster's CLA", hasProducts(resource.EndpointType))
			p.ack(eds, []string{"products"})

			// Second change, while the first Cluster is unanswered. The
			// file is read within its 50 ms debounce; the server holds the
			// CLA for up to a second.
			testcp.WriteFile(t, cp.File, endpointsFile(3, ringYAML(4096), false))
			if m, _, early := p.await(j+1, 600*time.Millisecond, hasProducts(resource.EndpointType)); early {
				t.Fatalf("the second Cluster's CLA (nonce %s) reached Envoy before the Cluster; Envoy would use it to finish warming the first", m.nonce)
			}
			p.ack(first, nil)
			second, k := p.next(j+1, 5*time.Second, "the second Cluster after the answer", hasProducts(resource.ClusterType))
			if got := ringSize(cluster(t, second.resources["products"])); got != 4096 {
				t.Fatalf("second Cluster has ring size %d, want 4096", got)
			}
			p.next(k+1, 5*time.Second, "the second Cluster's CLA after it", hasProducts(resource.EndpointType))
			if n := counter(t, cp, "ringxds_xds_cluster_wait_timeouts_total"); n != 0 {
				t.Errorf("%v clients counted as not sent their Clusters in time, want 0", n)
			}
		})
	}
}

// A client that stops answering must not hold every later push back: the
// CLAs go out after a bounded wait, and the metric says so.
func TestEndpointsWaitForAnUnansweringClientOnlyBriefly(t *testing.T) {
	cp := testcp.Start(t, testcp.TempFile(t, endpointsFile(3, ringYAML(1024), false)))
	p := dial(t, cp.XDSAddr, envoyNode("stalled"), false)
	subscribeAll(t, p, false)
	at := p.count()
	testcp.WriteFile(t, cp.File, endpointsFile(3, ringYAML(2048), false))
	_, i := p.next(at, 5*time.Second, "the changed Cluster", hasProducts(resource.ClusterType))
	eds, j := p.next(i+1, 5*time.Second, "its CLA", hasProducts(resource.EndpointType))
	p.ack(eds, []string{"products"})

	// The Cluster is never answered, and the next change is to both.
	changed := time.Now()
	testcp.WriteFile(t, cp.File, endpointsFile(4, ringYAML(4096), false))
	late, _ := p.next(j+1, 5*time.Second, "the CLA despite the unanswered Cluster", hasProducts(resource.EndpointType))
	if got := len(assignment(t, late.resources["products"]).GetEndpoints()[0].GetLbEndpoints()); got != 4 {
		t.Fatalf("CLA has %d endpoints, want 4", got)
	}
	if waited := late.at.Sub(changed); waited > 3*time.Second {
		t.Fatalf("the CLA took %v; the wait must stay bounded", waited)
	}
	if n := counter(t, cp, "ringxds_xds_cluster_wait_timeouts_total"); n != 1 {
		t.Fatalf("ringxds_xds_cluster_wait_timeouts_total = %v, want 1", n)
	}
}

// A reconnecting Envoy asks for CDS and EDS at once, each naming the version
// it holds, and both are answered at once with the full state. The Cluster
// must come first, on every reconnect: go-control-plane's default SotW ADS
// loop sends whichever response it picks first.
func TestReconnectSendsClustersBeforeTheirEndpoints(t *testing.T) {
	cp := testcp.Start(t, testcp.TempFile(t, endpointsFile(3, ringYAML(1024), false)))
	p := dial(t, cp.XDSAddr, envoyNode("reconnect-order"), false)
	held := subscribeAll(t, p, false)
	testcp.WriteFile(t, cp.File, endpointsFile(3, ringYAML(2048), false))
	testcp.WaitFor(t, 5*time.Second, "the change to be published", func() bool {
		return ringSize(clusterOf(t, cp, "products")) == 2048
	})
	for n := range 20 {
		back := dial(t, cp.XDSAddr, envoyNode("reconnect-order"), false)
		back.request(resource.ClusterType, nil, held[resource.ClusterType].version, "", "")
		back.request(resource.EndpointType, []string{"products"}, held[resource.EndpointType].version, "", "")
		first, _ := back.next(0, 5*time.Second, "a response after reconnecting", hasProducts(resource.ClusterType, resource.EndpointType))
		if first.typeURL != resource.ClusterType {
			t.Fatalf("reconnect %d: %s came before the changed Cluster", n, short(first.typeURL))
		}
	}
}

// clusterOf returns the published Envoy Cluster of that name.
func clusterOf(t *testing.T, cp *testcp.ControlPlane, name string) *clusterv3.Cluster {
	t.Helper()
	r, ok := cp.Server.Current().Kinds[snapshot.KindEnvoy][resource.ClusterType][name]
	if !ok {
		return nil
	}
	return r.(*clusterv3.Cluster)
}

// counter reads a counter without labels.
func counter(t *testing.T, cp *testcp.ControlPlane, name string) float64 {
	t.Helper()
	mfs, err := cp.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
