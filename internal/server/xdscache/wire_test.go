package xdscache

// The cache behind go-control-plane's real servers (pkg/server/v3, over
// gRPC on an in-memory listener), driven by raw clients, next to
// LinearCache where a comparison makes sense.

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	sotw "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// wire is a go-control-plane server over one cache, and a client
// connection to it.
type wire struct {
	conn *grpc.ClientConn
	ads  discovery.AggregatedDiscoveryServiceClient
	// deltaRequestHook, if set, runs (once) inside OnStreamDeltaRequest:
	// go-control-plane calls it after it has flushed the stream's pending
	// responses and before it cancels the type's watch.
	deltaRequestHook atomic.Pointer[func()]
	sotwRequestHook  atomic.Pointer[func()]
}

func newWire(t *testing.T, c cache.Cache) *wire {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &wire{}
	cb := serverv3.CallbackFuncs{
		StreamRequestFunc: func(int64, *discovery.DiscoveryRequest) error {
			if f := w.sotwRequestHook.Swap(nil); f != nil {
				(*f)()
			}
			return nil
		},
		StreamDeltaRequestFunc: func(int64, *discovery.DeltaDiscoveryRequest) error {
			if f := w.deltaRequestHook.Swap(nil); f != nil {
				(*f)()
			}
			return nil
		},
	}
	srv := serverv3.NewServer(ctx, c, cb, sotw.WithOrderedADS())
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return lis.Dial() }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		cancel()
	})
	w.conn, w.ads = conn, discovery.NewAggregatedDiscoveryServiceClient(conn)
	return w
}

func (w *wire) hookNextDeltaRequest(f func()) { w.deltaRequestHook.Store(&f) }

func recvDelta(t *testing.T, s discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient) *discovery.DeltaDiscoveryResponse {
	t.Helper()
	type result struct {
		r   *discovery.DeltaDiscoveryResponse
		err error
	}
	ch := make(chan result, 1)
	go func() { r, err := s.Recv(); ch <- result{r, err} }()
	select {
	case res := <-ch:
		if res.err != nil {
			t.Fatal(res.err)
		}
		return res.r
	case <-time.After(3 * time.Second):
		t.Fatal("no delta response within 3s")
	}
	return nil
}

func deltaNames(r *discovery.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.GetResources() {
		out = append(out, res.GetName()+"@"+res.GetVersion()[:8])
	}
	return out
}

func update(t *testing.T, c interface {
	UpdateResources(map[string]types.Resource, []string) error
}, up map[string]types.Resource, del ...string) {
	t.Helper()
	if err := c.UpdateResources(up, del); err != nil {
		t.Fatal(err)
	}
}

// deltaUpdateRacingUnsubscribe runs, against c, an Envoy-shaped delta EDS
// stream subscribed to a and b, that unsubscribes a (Envoy does when the
// cluster goes away) at the moment an update of a reaches the cache. The
// update lands after go-control-plane's delta server has flushed the
// stream's pending responses for the request and before it cancels the
// watch (the window holds the OnStreamDeltaRequest callbacks), so the
// update's response R1 is still queued when the new watch W2 is armed;
// W2 waits in the cache while the stream sends R1. Then b changes, and
// then the client subscribes to a again, as Envoy does when the cluster
// comes back. It returns what the client receives for the resubscription.
func deltaUpdateRacingUnsubscribe(t *testing.T, c interface {
	cache.Cache
	UpdateResources(map[string]types.Resource, []string) error
}, w *wire) *discovery.DeltaDiscoveryResponse {
	update(t, c, map[string]types.Resource{"a": claResource("a", 1), "b": claResource("b", 1)})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := w.ads.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(r *discovery.DeltaDiscoveryRequest) {
		t.Helper()
		r.TypeUrl = resource.EndpointType
		if err := s.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"a", "b"}})
	r0 := recvDelta(t, s)
	if len(r0.GetResources()) != 2 {
		t.Fatalf("first response: %v", deltaNames(r0))
	}
	send(&discovery.DeltaDiscoveryRequest{ResponseNonce: r0.GetNonce()})
	time.Sleep(50 * time.Millisecond) // the ACK re-arms the watch

	w.hookNextDeltaRequest(func() { update(t, c, map[string]types.Resource{"a": claResource("a", 2)}) })
	send(&discovery.DeltaDiscoveryRequest{ResponseNonce: r0.GetNonce(), ResourceNamesUnsubscribe: []string{"a"}})
	r1 := recvDelta(t, s) // a@2: sent before the server read the unsubscription
	t.Logf("R1 (update racing the unsubscription): %v removed %v", deltaNames(r1), r1.GetRemovedResources())

	// b changes: the watch armed after the unsubscription answers, reading
	// the stream's returned-versions map while (ours) the stream goroutine
	// has just written R1's versions into it.
	update(t, c, map[string]types.Resource{"b": claResource("b", 2)})
	r2 := recvDelta(t, s)
	t.Logf("R2: %v removed %v", deltaNames(r2), r2.GetRemovedResources())
	// The cluster comes back: Envoy subscribes to a again, holding nothing
	// of it (it dropped a when it unsubscribed); the request also ACKs R2.
	send(&discovery.DeltaDiscoveryRequest{ResponseNonce: r2.GetNonce(), ResourceNamesSubscribe: []string{"a"}})
	type result struct {
		r   *discovery.DeltaDiscoveryResponse
		err error
	}
	ch := make(chan result, 1)
	go func() { r, err := s.Recv(); ch <- result{r, err} }()
	select {
	case res := <-ch:
		return res.r
	case <-time.After(time.Second):
		return nil
	}
}

// TestDeltaResubscribeAfterRacingUpdate: in the scenario above, the
// client must get a back when it subscribes again, as LinearCache sends
// it (an Envoy keeps a re-added cluster warming until then). A delta
// response applied to the stream's own map, rather than a copy, lost it,
// and under -race showed the stream goroutine writing that map while an
// update read it for the stream's next watch.
func TestDeltaResubscribeAfterRacingUpdate(t *testing.T) {
	for _, impl := range []struct {
		name string
		new  func() interface {
			cache.Cache
			UpdateResources(map[string]types.Resource, []string) error
		}
	}{
		{"LinearCache", func() interface {
			cache.Cache
			UpdateResources(map[string]types.Resource, []string) error
		} {
			return cache.NewLinearCache(resource.EndpointType)
		}},
		{"xdscache", func() interface {
			cache.Cache
			UpdateResources(map[string]types.Resource, []string) error
		} {
			return New(resource.EndpointType)
		}},
	} {
		t.Run(impl.name, func(t *testing.T) {
			c := impl.new()
			w := newWire(t, c)
			r := deltaUpdateRacingUnsubscribe(t, c, w)
			if r == nil || len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != "a" {
				if r == nil {
					t.Fatal("resubscribing to a: no response within 1s; the client never gets a back")
				}
				t.Fatalf("resubscribing to a: got %v removed %v, want a", deltaNames(r), r.GetRemovedResources())
			}
		})
	}
}

// sotwReader reads a stream from one goroutine.
func sotwReader(s discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient) chan *discovery.DiscoveryResponse {
	ch := make(chan *discovery.DiscoveryResponse, 16)
	go func() {
		for {
			r, err := s.Recv()
			if err != nil {
				close(ch)
				return
			}
			ch <- r
		}
	}()
	return ch
}

func recvSotw(t *testing.T, ch chan *discovery.DiscoveryResponse, d time.Duration) *discovery.DiscoveryResponse {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		return nil
	}
}

// TestSotwOvertakingRequest: a grpc-go-shaped SotW ADS EDS client
// (named subscription) changes its subscription at the moment an update
// of a name it keeps reaches the cache; the update's response is queued
// and then dropped by the ordered ADS loop. The client must still get the
// update, and unsubscribing the last name with an empty request and
// subscribing again must send the resource again. Holds for both caches.
func TestSotwOvertakingRequest(t *testing.T) {
	for _, name := range []string{"LinearCache", "xdscache"} {
		t.Run(name, func(t *testing.T) {
			var c interface {
				cache.Cache
				UpdateResources(map[string]types.Resource, []string) error
			}
			if name == "xdscache" {
				c = New(resource.EndpointType)
			} else {
				c = cache.NewLinearCache(resource.EndpointType)
			}
			w := newWire(t, c)
			update(t, c, map[string]types.Resource{"a": claResource("a", 1), "b": claResource("b", 1)})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := w.ads.StreamAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			send := func(version, nonce string, names ...string) {
				t.Helper()
				if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: version, ResponseNonce: nonce, ResourceNames: names}); err != nil {
					t.Fatal(err)
				}
			}
			rs := sotwReader(s)
			send("", "", "a")
			r0 := recvSotw(t, rs, 3*time.Second)
			send(r0.GetVersionInfo(), r0.GetNonce(), "a")
			time.Sleep(50 * time.Millisecond)
			hook := func() { update(t, c, map[string]types.Resource{"a": claResource("a", 2)}) }
			w.sotwRequestHook.Store(&hook)
			send(r0.GetVersionInfo(), r0.GetNonce(), "a", "b")
			r1 := recvSotw(t, rs, 3*time.Second)
			if r1 == nil {
				t.Fatal("no response to the subscription change racing the update")
			}
			got := map[string]bool{}
			for _, a := range r1.GetResources() {
				got[resourceName(t, a.GetValue())] = true
			}
			if !got["a"] || !got["b"] {
				t.Fatalf("response after the overtaken one: %v, want a (updated) and b", got)
			}
			send(r1.GetVersionInfo(), r1.GetNonce()) // unsubscribe the last names: empty request
			if r := recvSotw(t, rs, 200*time.Millisecond); r != nil {
				t.Fatalf("response to unsubscribing everything: %d resources", len(r.GetResources()))
			}
			send(r1.GetVersionInfo(), r1.GetNonce(), "a")
			r2 := recvSotw(t, rs, 3*time.Second)
			if r2 == nil || len(r2.GetResources()) != 1 {
				t.Fatalf("resubscribing to a: %v", r2)
			}
		})
	}
}
