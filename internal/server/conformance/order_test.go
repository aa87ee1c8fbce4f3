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
	"github.com/ringxds/ringxds/internal/watch"
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

// apply publishes the endpoints file text through the server directly, so
// a test controls when each change lands.
func apply(t *testing.T, cp *testcp.ControlPlane, text string) {
	t.Helper()
	st, err := watch.ParseFile("endpoints.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Server.Apply(st); err != nil {
		t.Fatal(err)
	}
}

// applyAsync is apply in the background, for a push that holds its CLAs
// back; the returned channel closes when the push is done.
func applyAsync(t *testing.T, cp *testcp.ControlPlane, text string) <-chan struct{} {
	st, err := watch.ParseFile("endpoints.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := cp.Server.Apply(st); err != nil {
			t.Error(err)
		}
	}()
	return done
}

// An Envoy still processing one Cluster change (its CDS response not yet
// answered) has no CDS watch open, so the next Cluster change waits for its
// answer. The CLA built with that Cluster must wait too: arriving first, it
// would complete the warming of the older Cluster, and the newer one would
// then warm until Envoy's initial fetch timeout. The server's clock is held
// still, so the Envoy counts as answering quickly however loaded the
// machine is.
func TestEndpointsWaitForTheirClusterWhileAnswersAreOutstanding(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(map[bool]string{false: "sotw", true: "delta"}[delta], func(t *testing.T) {
			clk := &clock{}
			clk.Set(time.Now())
			cp := testcp.Start(t, testcp.TempFile(t, endpointsFile(3, ringYAML(1024), false)), testcp.WithClock(clk.Now))
			p := dial(t, cp.XDSAddr, envoyNode("slow-envoy"), delta)
			subscribeAll(t, p, false)

			// First change: Envoy receives the Cluster and its CLA, and
			// acknowledges only the CLA while it works on the Cluster.
			at := p.count()
			apply(t, cp, endpointsFile(3, ringYAML(2048), false))
			first, i := p.next(at, 5*time.Second, "the first changed Cluster", hasProducts(resource.ClusterType))
			eds, j := p.next(i+1, 5*time.Second, "the first Cluster's CLA", hasProducts(resource.EndpointType))
			p.ack(eds, []string{"products"})

			// Second change, while the first Cluster is unanswered.
			pushed := applyAsync(t, cp, endpointsFile(3, ringYAML(4096), false))
			if m, _, early := p.await(j+1, 100*time.Millisecond, hasProducts(resource.EndpointType)); early {
				t.Fatalf("the second Cluster's CLA (nonce %s) reached Envoy before the Cluster; Envoy would use it to finish warming the first", m.nonce)
			}
			p.ack(first, nil)
			second, k := p.next(j+1, 5*time.Second, "the second Cluster after the answer", hasProducts(resource.ClusterType))
			if got := ringSize(cluster(t, second.resources["products"])); got != 4096 {
				t.Fatalf("second Cluster has ring size %d, want 4096", got)
			}
			p.next(k+1, 5*time.Second, "the second Cluster's CLA after it", hasProducts(resource.EndpointType))
			<-pushed
			if n := counter(t, cp, "ringxds_xds_cluster_wait_timeouts_total"); n != 0 {
				t.Errorf("%v clients counted as not sent their Clusters in time, want 0", n)
			}
		})
	}
}

// A client that stops answering holds one push back, for a bounded time,
// and the metric says so; after that it is not waited for, and the CLAs of
// clusters whose Cluster did not change never wait at all.
func TestAnUnansweringClientHoldsOnePushOnly(t *testing.T) {
	clk := &clock{}
	clk.Set(time.Now())
	cp := testcp.Start(t, testcp.TempFile(t, endpointsFile(3, ringYAML(1024), true)), testcp.WithClock(clk.Now))
	p := dial(t, cp.XDSAddr, envoyNode("stalled"), false)
	subscribeAll(t, p, false)
	at := p.count()
	apply(t, cp, endpointsFile(3, ringYAML(2048), true))
	_, i := p.next(at, 5*time.Second, "the changed Cluster", hasProducts(resource.ClusterType))
	eds, j := p.next(i+1, 5*time.Second, "its CLA", hasProducts(resource.EndpointType))
	p.ack(eds, []string{"products"})

	// The Cluster is never answered. The next change is to both halves.
	apply(t, cp, endpointsFile(4, ringYAML(4096), true))
	late, _ := p.next(j+1, 5*time.Second, "the CLA despite the unanswered Cluster", hasProducts(resource.EndpointType))
	if got := len(assignment(t, late.resources["products"]).GetEndpoints()[0].GetLbEndpoints()); got != 4 {
		t.Fatalf("CLA has %d endpoints, want 4", got)
	}
	if n := counter(t, cp, "ringxds_xds_cluster_wait_timeouts_total"); n != 1 {
		t.Fatalf("ringxds_xds_cluster_wait_timeouts_total = %v, want 1", n)
	}
	// It is not waited for again until it answers quickly.
	for n := 3; n <= 5; n++ {
		apply(t, cp, endpointsFile(n, ringYAML(1024<<(n%2)), true))
	}
	if n := counter(t, cp, "ringxds_xds_cluster_wait_timeouts_total"); n != 1 {
		t.Fatalf("after three more pushes, %v timeouts: the stalled client was waited for again", n)
	}
}

// A client that answers CDS slowly is not waited for: holding every push
// for the slowest client would delay all the others.
func TestASlowClientIsNotWaitedFor(t *testing.T) {
	cp := testcp.Start(t, testcp.TempFile(t, endpointsFile(3, ringYAML(1024), false)))
	slow := dial(t, cp.XDSAddr, envoyNode("slow"), false)
	slow.request(resource.ClusterType, nil, "", "", "")
	first, _ := slow.next(0, 5*time.Second, "CDS", ofType(resource.ClusterType))
	time.Sleep(300 * time.Millisecond) // a large config, slowly applied
	slow.ack(first, nil)
	testcp.WaitFor(t, 5*time.Second, "the slow answer recorded", func() bool {
		for _, c := range cp.Server.Clients() {
			if c.NodeID == "slow" && c.Types["cds"].AnswerLatency >= 300*time.Millisecond {
				return true
			}
		}
		return false
	})
	for n := range 3 {
		apply(t, cp, endpointsFile(3, ringYAML(2048<<n), false))
	}
	if n := counter(t, cp, "ringxds_xds_cluster_wait_timeouts_total"); n != 0 {
		t.Fatalf("%v clients timed out: the slow client was waited for", n)
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
