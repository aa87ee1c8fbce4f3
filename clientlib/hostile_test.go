package clientlib_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/ringxds/ringxds/clientlib"
)

// goodAssignment is five established endpoints.
func goodAssignment(name string) *endpointv3.ClusterLoadAssignment {
	return assignment(name, []string{"10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080", "10.1.0.4:8080", "10.1.0.5:8080"}, 1)
}

// serveGood answers the client's first stream with cluster "products"
// (cds) and five established endpoints, and returns a balancer of it.
func serveGood(t *testing.T, f *fakeADS, c *clientlib.Client, cds proto.Message) (*fakeStream, *clientlib.Balancer) {
	t.Helper()
	type result struct {
		b   *clientlib.Balancer
		err error
	}
	got := make(chan result, 1)
	go func() {
		// Decoding an 8M-entry ring takes seconds, more under -race.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		b, err := c.Balancer(ctx, "products")
		got <- result{b, err}
	}()
	s := f.stream(t)
	s.await(t, 0, 10*time.Second, "for the products Cluster", func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetTypeUrl() == resourcev3.ClusterType && len(r.GetResourceNames()) > 0
	})
	n := s.mustSend(t, resourcev3.ClusterType, "c1", "", cds)
	s.await(t, 0, 2*time.Minute, "acknowledging the Cluster", acked(resourcev3.ClusterType, n))
	n = s.mustSend(t, resourcev3.EndpointType, "e1", "", goodAssignment("products"))
	s.await(t, 0, 2*time.Minute, "acknowledging the endpoints", acked(resourcev3.EndpointType, n))
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	return s, r.b
}

// A server that publishes endpoints each fading in from its own start
// would have the client build one ring per start. Over the fade-event or
// ring-entry budget the response is NACKed, naming the budget, before any
// of those rings is built; the last good ring keeps answering.
func TestFadeBudgetsNACKHostileAssignments(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cds       proto.Message
		endpoints int
		budget    string
		// bounds on the growth of the live heap and of all allocations
		// while the client handles the hostile response
		heapMiB, allocMiB uint64
	}{
		// The review's 351 KB EDS: Maglev, one fade event per endpoint.
		{"351KB-maglev-EDS", maglevCluster("products"), 3000, "fade-event budget", 64, 64},
		// The review's 24 endpoints on an 8M-entry ring_hash ring.
		{"24-endpoints-8M-ring", ringHashSized("products", 8388608), 24, "fade-event budget", 64, 512},
		// Within the fade-event budget, over the per-cluster ring entries.
		{"8-endpoints-8M-ring", ringHashSized("products", 8388608), 8, "ring-entry budget", 64, 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFakeADS(t)
			reg := prometheus.NewRegistry()
			c := dial(t, f.addr, clientlib.WithRegisterer(reg))
			s, b := serveGood(t, f, c, tc.cds)
			want := picks(t, b, 1000)

			hostile := fadingAssignment("products", tc.endpoints, time.Now())
			heap0, total0 := heapAfterGC()
			start := time.Now()
			n := s.mustSend(t, resourcev3.EndpointType, "e2", "", hostile)
			req, _ := s.await(t, 0, 5*time.Minute, "answering the hostile endpoints", acked(resourcev3.EndpointType, n))
			took := time.Since(start)
			heap1, total1 := heapAfterGC()
			growth := (int64(heap1) - int64(heap0)) / mib
			allocs := (total1 - total0) / mib
			t.Logf("%d-byte EDS, %d fade events: answered in %v, live heap %+d MiB, allocated %d MiB; %s %q",
				proto.Size(hostile), tc.endpoints, took.Round(time.Millisecond), growth, allocs,
				map[bool]string{true: "NACK", false: "ACK"}[req.GetErrorDetail() != nil], req.GetErrorDetail().GetMessage())
			if req.GetErrorDetail() == nil || !strings.Contains(req.GetErrorDetail().GetMessage(), tc.budget) {
				t.Fatalf("response answered with %q, want a NACK naming the %s", req.GetErrorDetail().GetMessage(), tc.budget)
			}
			if req.GetVersionInfo() != "e1" {
				t.Fatalf("NACK carries version %q, want the last accepted e1", req.GetVersionInfo())
			}
			if growth >= int64(tc.heapMiB) || allocs >= tc.allocMiB {
				t.Fatalf("live heap grew %d MiB and %d MiB were allocated, want under %d and %d", growth, allocs, tc.heapMiB, tc.allocMiB)
			}
			samePicks(t, b, want, "after the hostile endpoints")
			if st := b.Stats(); st.Endpoints != 5 {
				t.Fatalf("%d endpoints, want the last good 5", st.Endpoints)
			}
			if n := counterSum(t, reg, "ringxds_clientlib_xds_over_budget_total"); n != 1 {
				t.Fatalf("over-budget counter %v, want 1", n)
			}
		})
	}
}

// A Cluster whose ring would take the client past its total ring budget is
// NACKed; the cluster keeps its ring and the Cluster it was built from, so
// endpoints arriving afterwards still build the old ring.
func TestTotalRingBudgetNACKsCluster(t *testing.T) {
	f := startFakeADS(t)
	c := dial(t, f.addr, clientlib.WithRingBudget(1<<22, 1<<21))
	s, b := serveGood(t, f, c, ringHashSized("products", 1024))
	want := picks(t, b, 1000)

	n := s.mustSend(t, resourcev3.ClusterType, "c2", "", ringHashSized("products", 1<<22))
	req, i := s.await(t, 0, time.Minute, "answering the large Cluster", acked(resourcev3.ClusterType, n))
	if msg := req.GetErrorDetail().GetMessage(); !strings.Contains(msg, "total ring-entry budget of 2097152") || req.GetVersionInfo() != "c1" {
		t.Fatalf("answered %q at version %q, want a NACK naming the total ring-entry budget at c1", msg, req.GetVersionInfo())
	}
	n = s.mustSend(t, resourcev3.EndpointType, "e2", "", goodAssignment("products"))
	if req, _ := s.await(t, i, time.Minute, "answering the endpoints", acked(resourcev3.EndpointType, n)); req.GetErrorDetail() != nil {
		t.Fatalf("endpoints NACKed: %s", req.GetErrorDetail().GetMessage())
	}
	samePicks(t, b, want, "after the NACKed Cluster and new endpoints")

	// Over budget from the start: the balancer says why it is not ready.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() { _, err := c.Balancer(ctx, "orders"); errc <- err }()
	s.await(t, i, 10*time.Second, "for orders", func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetTypeUrl() == resourcev3.ClusterType && len(r.GetResourceNames()) == 2
	})
	s.mustSend(t, resourcev3.ClusterType, "c3", "", ringHashSized("products", 1024), ringHashSized("orders", 1<<22))
	s.mustSend(t, resourcev3.EndpointType, "e3", "", goodAssignment("products"), goodAssignment("orders"))
	if err := <-errc; !errors.Is(err, clientlib.ErrRejected) || !errors.Is(err, clientlib.ErrOverBudget) {
		t.Fatalf("Balancer of a cluster over budget: %v, want ErrRejected and ErrOverBudget", err)
	}
}

// counterSum sums every series of a counter family.
func counterSum(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// Responses of types the client never asked for, and resources it did not
// subscribe to, are dropped: nothing of them stays in memory, and an
// unknown type is neither ACKed nor NACKed (grpc-go's rule).
func TestUnsolicitedResponsesAreNotKept(t *testing.T) {
	f := startFakeADS(t)
	reg := prometheus.NewRegistry()
	c := dial(t, f.addr, clientlib.WithRegisterer(reg))
	s, b := serveGood(t, f, c, ringHashSized("products", 1024))
	want := picks(t, b, 1000)

	const each = 10000
	nonce := strings.Repeat("x", 1024)
	heap0, _ := heapAfterGC()
	start := time.Now()
	for i := range each {
		// A type nobody asked for, with a long nonce.
		s.mustSend(t, fmt.Sprintf("type.googleapis.com/hostile.Unknown%d", i), "v", fmt.Sprintf("%s-%d", nonce, i))
		// Endpoints of a cluster nobody asked for.
		ghost := fadingAssignment(fmt.Sprintf("ghost-%d", i), 40, time.Now())
		s.mustSend(t, resourcev3.EndpointType, fmt.Sprintf("g%d", i), "", ghost)
	}
	// The same endpoints again: once this is answered, all before it is
	// handled.
	n := s.mustSend(t, resourcev3.EndpointType, "e-sync", "", goodAssignment("products"))
	s.await(t, 0, 2*time.Minute, "acknowledging the last response", acked(resourcev3.EndpointType, n))
	took := time.Since(start)
	heap1, _ := heapAfterGC()
	growth := (int64(heap1) - int64(heap0)) / mib
	t.Logf("%d unknown-type and %d unsolicited EDS responses in %v: live heap %+d MiB", each, each, took.Round(time.Millisecond), growth)
	if growth >= 16 {
		t.Fatalf("live heap grew %d MiB, want under 16: unsolicited resources are kept", growth)
	}
	for _, r := range s.requests() {
		if strings.HasPrefix(r.GetTypeUrl(), "type.googleapis.com/hostile.") {
			t.Fatalf("the client answered a type it never asked for: %s", r.GetTypeUrl())
		}
	}
	samePicks(t, b, want, "after the unsolicited responses")
	if n := counterSum(t, reg, "ringxds_clientlib_xds_unsolicited_total"); n != 2*each {
		t.Fatalf("unsolicited counter %v, want %d", n, 2*each)
	}
}

// A server that stops reading the stream must not block the client's
// receiving, nor Balancer beyond its context: requests wait in a queue that
// keeps only the latest per type.
func TestServerThatStopsReading(t *testing.T) {
	f := startFakeADS(t)
	c := dial(t, f.addr)
	s, b := serveGood(t, f, c, ringHashSized("products", 1024))
	s.stopReading()
	defer s.close()

	// Each ACK echoes a 16 KiB nonce: a few fill the 64 KiB window the
	// server no longer drains.
	nonce := strings.Repeat("n", 16<<10)
	moved := goodAssignment("products")
	moved.Endpoints[0].LbEndpoints = moved.Endpoints[0].LbEndpoints[:3]
	sent := make(chan error, 1)
	go func() {
		for i := range 32 {
			if _, err := s.send(resourcev3.EndpointType, fmt.Sprintf("e-%d", i), fmt.Sprintf("%s-%d", nonce, i), goodAssignment("products")); err != nil {
				sent <- err
				return
			}
		}
		// Receiving goes on: a changed assignment applies.
		_, err := s.send(resourcev3.EndpointType, "e-moved", "", moved)
		sent <- err
	}()
	received := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !received; time.Sleep(10 * time.Millisecond) {
		received = len(b.Endpoints()) == 3
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := c.Balancer(ctx, "orders"); done <- err }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		f.g.Stop() // hang up, to let the stuck call go
		err = <-done
	}
	took := time.Since(start)
	t.Logf("Balancer(ctx with 2 s) returned after %v: %v; update received while the server did not read: %v", took.Round(time.Millisecond), err, received)
	if !received {
		t.Errorf("the client stopped receiving when its sends blocked")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Balancer: %v, want the context's deadline", err)
	}
	if took > 2100*time.Millisecond {
		t.Fatalf("Balancer(ctx with 2 s) returned after %v, want within 2.1 s", took)
	}
	select {
	case err := <-sent:
		if err != nil {
			t.Fatalf("the server's sends: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client stopped reading the server's responses")
	}
	// Close does not wait for the server either.
	start = time.Now()
	_ = c.Close()
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Close took %v with a server that does not read", took)
	}
}
