package clientlib_test

import (
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringxds/ringxds/clientlib"
)

// fakeADS is an ADS server on loopback that sends only what the test
// scripts, on the stream the client opens, and reads the client's requests
// only while the test lets it: a scripted, possibly hostile, management
// server.
type fakeADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	addr    string
	streams chan *fakeStream
	g       *grpc.Server
}

// fakeStream is one ADS stream as the test drives it.
type fakeStream struct {
	srv   discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	end   chan struct{}
	endMu sync.Once

	mu      sync.Mutex
	reqs    []*discoveryv3.DiscoveryRequest
	changed chan struct{} // closed and replaced when reqs grows
	read    chan struct{} // closed while the server reads
	nonce   int
}

// startFakeADS serves on a loopback port. Its HTTP/2 windows are fixed at
// 64 KiB (no BDP growth), so a stream the server stops reading blocks the
// client's sends after 64 KiB, as a stuck server's would.
func startFakeADS(t testing.TB) *fakeADS {
	t.Helper()
	f := &fakeADS{streams: make(chan *fakeStream, 16)}
	g := grpc.NewServer(grpc.InitialWindowSize(1<<16), grpc.InitialConnWindowSize(1<<16))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, f)
	l := listenOn(t, "127.0.0.1:0")
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	f.addr, f.g = l.Addr().String(), g
	return f
}

func (f *fakeADS) StreamAggregatedResources(srv discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	s := &fakeStream{srv: srv, end: make(chan struct{}), changed: make(chan struct{}), read: make(chan struct{})}
	close(s.read) // reading until the test says otherwise
	go s.readLoop()
	select {
	case f.streams <- s:
	case <-srv.Context().Done():
		return nil
	}
	select {
	case <-s.end:
	case <-srv.Context().Done():
	}
	return nil
}

// stream waits for the client's next stream.
func (f *fakeADS) stream(t testing.TB) *fakeStream {
	t.Helper()
	select {
	case s := <-f.streams:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no ADS stream within 10 s")
		return nil
	}
}

func (s *fakeStream) readLoop() {
	for {
		s.mu.Lock()
		read := s.read
		s.mu.Unlock()
		select {
		case <-read:
		case <-s.srv.Context().Done():
			return
		}
		req, err := s.srv.Recv()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.reqs = append(s.reqs, req)
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
}

// stopReading makes the server read no further request (one Recv already
// waiting may still complete).
func (s *fakeStream) stopReading() {
	s.mu.Lock()
	s.read = make(chan struct{})
	s.mu.Unlock()
}

// close ends the stream from the server's side.
func (s *fakeStream) close() { s.endMu.Do(func() { close(s.end) }) }

// await returns the first request from index from on that satisfies ok, and
// its index.
func (s *fakeStream) await(t testing.TB, from int, within time.Duration, what string, ok func(*discoveryv3.DiscoveryRequest) bool) (*discoveryv3.DiscoveryRequest, int) {
	t.Helper()
	deadline := time.After(within)
	for {
		s.mu.Lock()
		for i := from; i < len(s.reqs); i++ {
			if ok(s.reqs[i]) {
				r := s.reqs[i]
				s.mu.Unlock()
				return r, i
			}
		}
		from = len(s.reqs)
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no request %s within %v", what, within)
		}
	}
}

// requests returns a copy of the requests read so far.
func (s *fakeStream) requests() []*discoveryv3.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*discoveryv3.DiscoveryRequest(nil), s.reqs...)
}

// send sends one response of typeURL with the given resources and returns
// its nonce; nonce "" numbers it.
func (s *fakeStream) send(typeURL, version, nonce string, res ...proto.Message) (string, error) {
	resp := &discoveryv3.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: version}
	for _, m := range res {
		a, err := anypb.New(m)
		if err != nil {
			return "", err
		}
		resp.Resources = append(resp.Resources, a)
	}
	if nonce == "" {
		s.mu.Lock()
		s.nonce++
		nonce = "n" + strconv.Itoa(s.nonce)
		s.mu.Unlock()
	}
	resp.Nonce = nonce
	return nonce, s.srv.Send(resp)
}

func (s *fakeStream) mustSend(t testing.TB, typeURL, version, nonce string, res ...proto.Message) string {
	t.Helper()
	n, err := s.send(typeURL, version, nonce, res...)
	if err != nil {
		t.Fatalf("send %s %s: %v", typeURL, version, err)
	}
	return n
}

// acked reports whether req acknowledges (or rejects) nonce.
func acked(typeURL, nonce string) func(*discoveryv3.DiscoveryRequest) bool {
	return func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetTypeUrl() == typeURL && r.GetResponseNonce() == nonce
	}
}

// ringHashSized is a ring_hash Cluster with a fixed ring size.
func ringHashSized(name string, size uint64) *clusterv3.Cluster {
	c := ringHashCluster(name, clusterv3.Cluster_RING_HASH)
	c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{
		MinimumRingSize: wrapperspb.UInt64(size), MaximumRingSize: wrapperspb.UInt64(size),
	}}
	return c
}

// maglevCluster is a Maglev Cluster with Envoy's default table.
func maglevCluster(name string) *clusterv3.Cluster {
	c := ringHashCluster(name, clusterv3.Cluster_MAGLEV)
	c.LbConfig = nil
	return c
}

// fadingAssignment is an assignment of n endpoints on 10.x.y.z:8080, each
// fading in from its own start (a distinct fade event per endpoint) over an
// hour, the first one starting a minute ago.
func fadingAssignment(name string, n int, now time.Time) *endpointv3.ClusterLoadAssignment {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = net.JoinHostPort(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), "8080")
	}
	cla := assignment(name, addrs, 1)
	for i, lbe := range cla.Endpoints[0].LbEndpoints {
		lbe.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"ringxds": {Fields: map[string]*structpb.Value{
			"fade_start":    structpb.NewStringValue(now.Add(-time.Minute + time.Duration(i)*time.Millisecond).UTC().Format(time.RFC3339Nano)),
			"fade_duration": structpb.NewStringValue("1h"),
			"fade_exponent": structpb.NewNumberValue(1),
		}}}}
	}
	return cla
}

// heapAfterGC is HeapAlloc after a full collection, and TotalAlloc.
func heapAfterGC() (heap, total uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.TotalAlloc
}

const mib = 1 << 20

// picks records Pick for n keys.
func picks(t testing.TB, b *clientlib.Balancer, n int) map[string]string {
	t.Helper()
	out := make(map[string]string, n)
	for i := range n {
		key := "key-" + strconv.Itoa(i)
		ep, err := b.Pick(key)
		if err != nil {
			t.Fatalf("Pick(%s): %v", key, err)
		}
		out[key] = ep.Addr
	}
	return out
}

// samePicks fails unless b picks as recorded in want.
func samePicks(t testing.TB, b *clientlib.Balancer, want map[string]string, when string) {
	t.Helper()
	for key, addr := range want {
		ep, err := b.Pick(key)
		if err != nil || ep.Addr != addr {
			t.Fatalf("%s: Pick(%s) = %s, %v; want the last good ring's %s", when, key, ep.Addr, err, addr)
		}
	}
}
