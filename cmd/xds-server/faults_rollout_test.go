package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/encoding/protojson"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringxds/ringxds/internal/testcp"
)

// rolloutPod is one Pod of the rollout: its address in the EndpointSlice
// and whether it is terminating.
type rolloutPod struct {
	addr        string
	terminating bool
}

// rolloutStep is the Service's one EndpointSlice at a step of a rolling
// update, and the endpoints the server must publish for it.
type rolloutStep struct {
	pods []rolloutPod
	ring []string
}

// rolloutSteps replaces a1..a3 with b1..b3 one Pod at a time, a Pod
// terminating before it goes, as a Deployment's rolling update does.
func rolloutSteps() []rolloutStep {
	a := func(i int) string { return fmt.Sprintf("10.77.0.%d", i) }
	b := func(i int) string { return fmt.Sprintf("10.77.1.%d", i) }
	up := func(addr string) rolloutPod { return rolloutPod{addr: addr} }
	going := func(addr string) rolloutPod { return rolloutPod{addr: addr, terminating: true} }
	ring := func(addrs ...string) []string {
		for i := range addrs {
			addrs[i] += ":8080"
		}
		return addrs
	}
	return []rolloutStep{
		{[]rolloutPod{up(a(1)), up(a(2)), up(a(3))}, ring(a(1), a(2), a(3))},
		{[]rolloutPod{up(a(1)), up(a(2)), up(a(3)), up(b(1))}, ring(a(1), a(2), a(3), b(1))},
		{[]rolloutPod{going(a(1)), up(a(2)), up(a(3)), up(b(1))}, ring(a(2), a(3), b(1))},
		{[]rolloutPod{up(a(2)), up(a(3)), up(b(1)), up(b(2))}, ring(a(2), a(3), b(1), b(2))},
		// The API server is stopped before this step.
		{[]rolloutPod{going(a(2)), up(a(3)), up(b(1)), up(b(2)), up(b(3))}, ring(a(3), b(1), b(2), b(3))},
		{[]rolloutPod{up(b(1)), up(b(2)), up(b(3))}, ring(b(1), b(2), b(3))},
	}
}

func (s rolloutStep) slice(ns string) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080))}},
	}
	for _, p := range s.pods {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.addr}, Conditions: discoveryv1.EndpointConditions{
			Ready: new(!p.terminating), Serving: new(true), Terminating: new(p.terminating),
		}})
	}
	return sl
}

// publishedRings follows, by polling /debug/snapshot, the endpoints the
// server publishes for one cluster, and records a failure when they are
// not one of the rollout's rings or go back to an earlier one.
type publishedRings struct {
	rings [][]string
	stop  chan struct{}
	done  chan struct{}

	mu      sync.Mutex
	current int // index in rings, -1 before the first
	seen    int // polls
	err     error
}

func watchPublished(t *testing.T, base, cluster string, steps []rolloutStep) *publishedRings {
	t.Helper()
	w := &publishedRings{stop: make(chan struct{}), done: make(chan struct{}), current: -1}
	for _, s := range steps {
		w.rings = append(w.rings, s.ring)
	}
	go func() {
		defer close(w.done)
		for {
			ring, err := publishedEndpoints(base, cluster)
			w.mu.Lock()
			switch i := slices.IndexFunc(w.rings, func(r []string) bool { return slices.Equal(r, ring) }); {
			case err != nil:
				w.err = fmt.Errorf("after %d polls: %w", w.seen, err)
			case i < 0:
				w.err = fmt.Errorf("published %v, which is no step of the rollout, after step %d", ring, w.current)
			case i < w.current:
				w.err = fmt.Errorf("published step %d (%v) after step %d", i, ring, w.current)
			default:
				w.current = i
			}
			w.seen++
			failed := w.err != nil
			w.mu.Unlock()
			if failed {
				return
			}
			select {
			case <-w.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(w.close)
	return w
}

func (w *publishedRings) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// check fails t if the server published anything out of order so far.
func (w *publishedRings) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		t.Fatal(w.err)
	}
}

// waitStep waits until step i is published and returns how long it took.
func (w *publishedRings) waitStep(t *testing.T, i int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	testcp.WaitFor(t, within, fmt.Sprintf("step %d to be published", i), func() bool {
		w.check(t)
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.current == i
	})
	return time.Since(start)
}

// publishedEndpoints lists the addresses in cluster's published
// ClusterLoadAssignment for grpc-go, sorted.
func publishedEndpoints(base, cluster string) ([]string, error) {
	code, body := httpGet(base + "/debug/snapshot?client=grpc")
	if code != http.StatusOK {
		return nil, fmt.Errorf("/debug/snapshot: status %d: %s", code, body)
	}
	var snap struct {
		Kinds map[string]map[string]map[string]struct {
			Resource json.RawMessage
		}
	}
	if err := json.Unmarshal(body, &snap); err != nil {
		return nil, err
	}
	res, ok := snap.Kinds["grpc"]["endpoints"][cluster]
	if !ok {
		return nil, fmt.Errorf("no ClusterLoadAssignment %s published", cluster)
	}
	var cla endpointv3.ClusterLoadAssignment
	if err := protojson.Unmarshal(res.Resource, &cla); err != nil {
		return nil, err
	}
	var out []string
	for _, loc := range cla.GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue())))
		}
	}
	slices.Sort(out)
	return out, nil
}

// podBackends starts a real gRPC backend on loopback for each Pod address
// of the rollout (EndpointSlices refuse loopback addresses) and returns a
// grpc-go router whose dialer connects each Pod address to its backend.
func podBackends(t *testing.T, ctx context.Context, xdsAddr, cluster string, steps []rolloutStep) router {
	t.Helper()
	toBackend, toPod := map[string]string{}, map[string]string{}
	for _, s := range steps {
		for _, addr := range s.ring {
			if _, ok := toBackend[addr]; !ok {
				b := testcp.StartBackends(t, 1)[0]
				toBackend[addr], toPod[b.Addr] = b.Addr, addr
			}
		}
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		b, ok := toBackend[addr]
		if !ok {
			return nil, fmt.Errorf("no backend for %s", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", b)
	}
	rc := testgrpc.NewTestServiceClient(testcp.DialXDS(t, xdsAddr, cluster, grpc.WithContextDialer(dial)))
	return router{"grpc-go", func(k string) (string, error) {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		got, err := testcp.Call(cctx, rc, "x-user", k)
		return toPod[got], err
	}}
}
