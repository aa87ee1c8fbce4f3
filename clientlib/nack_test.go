package clientlib_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringxds/ringxds/clientlib"
)

// rawServer is a bare go-control-plane ADS server whose resources the test
// sets directly, so it can publish what ringxds itself never would.
type rawServer struct {
	addr     string
	cds, eds *cachev3.LinearCache

	mu    sync.Mutex
	nacks []*discoveryv3.DiscoveryRequest
	acks  map[string]string // type -> last ACKed version
}

func startRawServer(t *testing.T) *rawServer {
	t.Helper()
	rs := &rawServer{
		cds:  cachev3.NewLinearCache(resourcev3.ClusterType),
		eds:  cachev3.NewLinearCache(resourcev3.EndpointType),
		acks: map[string]string{},
	}
	mux := &cachev3.MuxCache{
		Classify:      func(r *cachev3.Request) string { return r.GetTypeUrl() },
		ClassifyDelta: func(r *cachev3.DeltaRequest) string { return r.GetTypeUrl() },
		Caches:        map[string]cachev3.Cache{resourcev3.ClusterType: rs.cds, resourcev3.EndpointType: rs.eds},
	}
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		switch {
		case r.GetErrorDetail() != nil:
			rs.nacks = append(rs.nacks, r)
		case r.GetResponseNonce() != "":
			rs.acks[r.GetTypeUrl()] = r.GetVersionInfo()
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, mux, cb))
	l := listenOn(t, "127.0.0.1:0")
	go func() { _ = g.Serve(l) }()
	t.Cleanup(func() { cancel(); g.Stop() })
	rs.addr = l.Addr().String()
	return rs
}

func (rs *rawServer) nacked() []*discoveryv3.DiscoveryRequest {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]*discoveryv3.DiscoveryRequest(nil), rs.nacks...)
}

func ringHashCluster(name string, lb clusterv3.Cluster_LbPolicy) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		}},
		LbPolicy: lb,
		LbConfig: &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{
			MinimumRingSize: wrapperspb.UInt64(1024), MaximumRingSize: wrapperspb.UInt64(1024),
		}},
	}
}

func assignment(name string, addrs []string, weight uint32) *endpointv3.ClusterLoadAssignment {
	lbes := make([]*endpointv3.LbEndpoint, len(addrs))
	for i, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		lbes[i] = &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
				}}},
			}},
			LoadBalancingWeight: wrapperspb.UInt32(weight),
		}
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
		Locality: &corev3.Locality{}, LoadBalancingWeight: wrapperspb.UInt32(1), LbEndpoints: lbes,
	}}}
}

// A resource clientlib cannot build a ring from is NACKed with a reason,
// and the balancer keeps picking from its last good ring; a valid update
// afterwards applies.
func TestInvalidResourcesAreNACKedAndTheOldRingKept(t *testing.T) {
	rs := startRawServer(t)
	addrs := []string{"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003", "127.0.0.1:9004", "127.0.0.1:9005"}
	if err := rs.cds.UpdateResource("products", ringHashCluster("products", clusterv3.Cluster_RING_HASH)); err != nil {
		t.Fatal(err)
	}
	if err := rs.eds.UpdateResource("products", assignment("products", addrs, 1)); err != nil {
		t.Fatal(err)
	}
	c := dial(t, rs.addr)
	b := balancer(t, c, "products")
	before := map[string]string{}
	for i := range 200 {
		key := fmt.Sprintf("k-%d", i)
		ep, _ := b.Pick(key)
		before[key] = ep.Addr
	}
	samePicks := func(when string) {
		t.Helper()
		for key, want := range before {
			if ep, _ := b.Pick(key); ep.Addr != want {
				t.Fatalf("%s: Pick(%s) = %s, want the old ring's %s", when, key, ep.Addr, want)
			}
		}
	}

	for _, tc := range []struct {
		name, typ, reason string
		publish           func() error
	}{
		{"round robin cluster", resourcev3.ClusterType, "not a consistent hash", func() error {
			return rs.cds.UpdateResource("products", ringHashCluster("products", clusterv3.Cluster_ROUND_ROBIN))
		}},
		{"zero-weight endpoint", resourcev3.EndpointType, "weight 0", func() error {
			return rs.eds.UpdateResource("products", assignment("products", addrs[:4], 0))
		}},
	} {
		n := len(rs.nacked())
		if err := tc.publish(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, tc.name+" to be NACKed", func() bool { return len(rs.nacked()) > n })
		nack := rs.nacked()[n]
		if nack.GetTypeUrl() != tc.typ || !strings.Contains(nack.GetErrorDetail().GetMessage(), tc.reason) {
			t.Fatalf("%s: NACK %s %q, want %s mentioning %q", tc.name, nack.GetTypeUrl(), nack.GetErrorDetail().GetMessage(), tc.typ, tc.reason)
		}
		if nack.GetVersionInfo() == "" {
			t.Fatalf("%s: NACK carries no version: it must name the last accepted one", tc.name)
		}
		samePicks("after NACKing a " + tc.name)
	}

	// Valid again: four endpoints, and the cluster back to ring_hash.
	if err := rs.cds.UpdateResource("products", ringHashCluster("products", clusterv3.Cluster_RING_HASH)); err != nil {
		t.Fatal(err)
	}
	if err := rs.eds.UpdateResource("products", assignment("products", addrs[:4], 1)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the valid update", func() bool { return len(b.Endpoints()) == 4 })
}

// An assignment with no endpoint is accepted, as Envoy and grpc-go accept
// it: Pick and Do say the cluster has no endpoints, until it has again. A
// NACKed cluster that never had a ring says why it is not ready.
func TestEmptyAssignmentIsAccepted(t *testing.T) {
	rs := startRawServer(t)
	addrs := []string{"127.0.0.1:9001", "127.0.0.1:9002"}
	if err := rs.cds.UpdateResource("products", ringHashCluster("products", clusterv3.Cluster_RING_HASH)); err != nil {
		t.Fatal(err)
	}
	if err := rs.eds.UpdateResource("products", assignment("products", addrs, 1)); err != nil {
		t.Fatal(err)
	}
	c := dial(t, rs.addr)
	b := balancer(t, c, "products")
	if err := rs.eds.UpdateResource("products", assignment("products", nil, 1)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the empty assignment", func() bool { return len(b.Endpoints()) == 0 })
	if _, err := b.Pick("k"); !errors.Is(err, clientlib.ErrNoEndpoints) {
		t.Fatalf("Pick on an empty cluster: %v", err)
	}
	if n := len(rs.nacked()); n != 0 {
		t.Fatalf("%d NACKs, want the empty assignment accepted", n)
	}
	if err := rs.eds.UpdateResource("products", assignment("products", addrs, 1)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "endpoints again", func() bool { _, err := b.Pick("k"); return err == nil })

	if err := rs.cds.UpdateResource("broken", ringHashCluster("broken", clusterv3.Cluster_ROUND_ROBIN)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := c.Balancer(ctx, "broken"); !errors.Is(err, clientlib.ErrRejected) || !strings.Contains(err.Error(), "not a consistent hash") {
		t.Fatalf("a rejected cluster: %v, want ErrRejected with the reason", err)
	}
}

// A cluster whose assignment has no usable endpoint (none at all, or all
// unhealthy) stays without a ring through every later CDS response: a new
// version of its Cluster, or the response that brings another cluster.
func TestNoEndpointsSurvivesClusterUpdates(t *testing.T) {
	rs := startRawServer(t)
	addrs := []string{"127.0.0.1:9001", "127.0.0.1:9002"}
	if err := rs.cds.UpdateResource("products", ringHashCluster("products", clusterv3.Cluster_RING_HASH)); err != nil {
		t.Fatal(err)
	}
	if err := rs.cds.UpdateResource("orders", ringHashCluster("orders", clusterv3.Cluster_RING_HASH)); err != nil {
		t.Fatal(err)
	}
	if err := rs.eds.UpdateResource("orders", assignment("orders", []string{"127.0.0.1:9101"}, 1)); err != nil {
		t.Fatal(err)
	}
	unhealthy := assignment("products", addrs, 1)
	for _, e := range unhealthy.Endpoints[0].LbEndpoints {
		e.HealthStatus = corev3.HealthStatus_UNHEALTHY
	}
	if err := rs.eds.UpdateResource("products", unhealthy); err != nil {
		t.Fatal(err)
	}
	c := dial(t, rs.addr)
	b := balancer(t, c, "products")
	if _, err := b.Pick("k"); !errors.Is(err, clientlib.ErrNoEndpoints) {
		t.Fatalf("all endpoints unhealthy: Pick = %v, want ErrNoEndpoints", err)
	}
	// Asking for another cluster makes the server send CDS again.
	orders := balancer(t, c, "orders")
	if _, err := orders.Pick("k"); err != nil {
		t.Fatal(err)
	}
	// A new version of the empty cluster's Cluster.
	changed := ringHashCluster("products", clusterv3.Cluster_RING_HASH)
	changed.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{
		MinimumRingSize: wrapperspb.UInt64(2048), MaximumRingSize: wrapperspb.UInt64(2048)}}
	acked := func() string { rs.mu.Lock(); defer rs.mu.Unlock(); return rs.acks[resourcev3.ClusterType] }
	before := acked()
	if err := rs.cds.UpdateResource("products", changed); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the new Cluster acknowledged", func() bool { return acked() != before })
	if _, err := b.Pick("k"); !errors.Is(err, clientlib.ErrNoEndpoints) {
		t.Fatalf("after a Cluster update: Pick = %v, want ErrNoEndpoints", err)
	}
	if n := len(rs.nacked()); n != 0 {
		t.Fatalf("%d NACKs, want none", n)
	}
	if err := rs.eds.UpdateResource("products", assignment("products", addrs, 1)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "endpoints again", func() bool { _, err := b.Pick("k"); return err == nil })
}

// A cluster the server does not have is named in the error, whether it is
// the first one asked for or added to a subscription the server already
// answered (a server sends nothing for a name it lacks), and through a
// server that answers nothing at all.
func TestUnknownClusterIsNamedAsSuch(t *testing.T) {
	rs := startRawServer(t)
	if err := rs.cds.UpdateResource("products", ringHashCluster("products", clusterv3.Cluster_RING_HASH)); err != nil {
		t.Fatal(err)
	}
	if err := rs.eds.UpdateResource("products", assignment("products", []string{"127.0.0.1:9001"}, 1)); err != nil {
		t.Fatal(err)
	}
	c := dial(t, rs.addr)
	balancer(t, c, "products")
	// Within a second, silence may be a slow server: no verdict yet.
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if _, err := c.Balancer(short, "prodcuts"); errors.Is(err, clientlib.ErrUnknownCluster) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a cluster asked for 50 ms ago: %v, want only the deadline", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err := c.Balancer(ctx, "prodcuts")
	if !errors.Is(err, clientlib.ErrUnknownCluster) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a misspelled cluster after a good one: %v, want ErrUnknownCluster and the deadline", err)
	}

	// go-control-plane's SnapshotCache in ADS mode with no snapshot for
	// the node answers nothing: the stream is up, the server silent. It
	// has said nothing of any cluster, as a hung server would not, so the
	// client says that, and neither blames the name nor calls the server
	// unreachable.
	sc := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)
	g := grpc.NewServer()
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(sctx, sc, nil))
	l := listenOn(t, "127.0.0.1:0")
	go func() { _ = g.Serve(l) }()
	defer g.Stop()
	silent := dial(t, l.Addr().String())
	ctx2, cancel2 := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel2()
	_, err = silent.Balancer(ctx2, "products")
	if errors.Is(err, clientlib.ErrNoServer) || errors.Is(err, clientlib.ErrUnknownCluster) || !strings.Contains(err.Error(), "has not answered") {
		t.Fatalf("a server that is reached and silent: %v, want that it has not answered, neither ErrUnknownCluster nor ErrNoServer", err)
	}

	// A gRPC server without the ADS service fails every stream: that is
	// no unknown cluster but a server that does not work, and says how.
	plain := grpc.NewServer()
	pl := listenOn(t, "127.0.0.1:0")
	go func() { _ = plain.Serve(pl) }()
	defer plain.Stop()
	ctx3, cancel3 := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel3()
	_, err = dial(t, pl.Addr().String()).Balancer(ctx3, "products")
	if !errors.Is(err, clientlib.ErrNoServer) || errors.Is(err, clientlib.ErrUnknownCluster) || !strings.Contains(err.Error(), "Unimplemented") {
		t.Fatalf("a server without ADS: %v, want ErrNoServer with the stream's error", err)
	}
}
