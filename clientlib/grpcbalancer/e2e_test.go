package grpcbalancer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	_ "github.com/ringxds/ringxds/clientlib/grpcbalancer"
	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/testcp"
)

// A proxyless grpc-go client, through grpc-go's own xDS resolver and
// client, runs the registered ringxds.skipper policy for a skipper cluster
// and sends each key where /debug/pick says clientlib sends it.
func TestProxylessGRPCAgreesWithDebugPick(t *testing.T) {
	backends := testcp.StartBackends(t, 5)
	// A header other than the default proves the server's hash_header
	// reaches the balancer through the TypedStruct.
	const header = "x-product-id"
	cp := testcp.Start(t, testcp.TempFile(t, testcp.ClusterYAML("products", "skipper", header, "", testcp.Addrs(backends), nil)))
	client := testgrpc.NewTestServiceClient(testcp.DialXDS(t, cp.XDSAddr, "products"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	perBackend := map[string]int{}
	differsFromRingHash := 0
	for i := range 1000 {
		key := fmt.Sprintf("product-%d", i)
		want := cp.Pick("products", key, "clientlib")
		if want.Policy != "skipper" {
			t.Fatalf("clientlib policy %q, want skipper", want.Policy)
		}
		got, err := testcp.Call(ctx, client, header, key)
		if err != nil {
			t.Fatalf("RPC for %s: %v", key, err)
		}
		if got != want.Endpoint {
			t.Fatalf("key %s: grpc-go sent it to %s, /debug/pick (clientlib) says %s (grpc ring_hash: %s)", key, got, want.Endpoint, want.ByClient["grpc-go"])
		}
		if want.ByClient["grpc-go"] != got {
			differsFromRingHash++
		}
		perBackend[got]++
	}
	t.Logf("per backend %v; %d keys differ from the ring_hash fallback", perBackend, differsFromRingHash)
	if len(perBackend) != len(backends) {
		t.Fatalf("only %d of %d backends got keys", len(perBackend), len(backends))
	}
	// Proof the Skipper ring ran, not the ring_hash fallback grpc-go uses
	// without this package: the two rings disagree on many keys.
	if differsFromRingHash == 0 {
		t.Fatal("every key went where ring_hash sends it: the ringxds.skipper policy did not run")
	}
}

// Children are lazy, as in grpc-go's ring_hash: a client whose RPCs all
// carry one key connects to that key's endpoint only, not to every
// endpoint of the cluster.
func TestOnlyPickedEndpointsAreConnected(t *testing.T) {
	backends := testcp.StartBackends(t, 5)
	const header = "x-product-id"
	cp := testcp.Start(t, testcp.TempFile(t, testcp.ClusterYAML("products", "skipper", header, "", testcp.Addrs(backends), nil)))
	client := testgrpc.NewTestServiceClient(testcp.DialXDS(t, cp.XDSAddr, "products"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got string
	for range 20 {
		var err error
		if got, err = testcp.Call(ctx, client, header, "one-key"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	connected := 0
	for _, b := range backends {
		if b.Conns() > 0 {
			connected++
			if b.Addr != got {
				t.Errorf("backend %s, which owns no key sent, was connected", b.Addr)
			}
		}
	}
	if connected != 1 {
		t.Fatalf("%d of %d backends connected for one key, want 1", connected, len(backends))
	}
}

// With this package linked, grpc-go's own xDS client runs the
// ringxds.ring_hash policy ringxds publishes ahead of ring_hash for a
// cluster laid out for fade-in, and cuts each key over to a new endpoint
// on its own: a 100 -> 110 batch keeps every key a new endpoint sees,
// moves none between old endpoints and none back. Mid-fade each sampled
// key goes where /debug/pick says for grpc-go with this package, asked in
// the same fade step. The same fade without the package (the weight ramp)
// is measured in internal/server/e2e (TestBatchFadeWeightRampGRPC).
func TestBatchFadeIsExactWithThePackage(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10 s fade through 110 backends")
	}
	m := testcp.BatchFade(t, 100, 10, 2000, 10*time.Second, dataplane.GRPCGoBalancer)
	t.Logf("grpc-go with grpcbalancer, 100 -> 110 batch: %v", m)
	if m.Precision != 100 || m.OldOld != 0 || m.Flaps != 0 {
		t.Fatalf("want 100%% precision, no old-old churn and no flaps: %v", m)
	}
	// Proof the per-key cut-over ran, not the weight ramp it falls back
	// to: mid-fade the two send some keys to different endpoints.
	if m.OffRamp == 0 {
		t.Fatalf("every sampled key went where the weight ramp sends it: ringxds.ring_hash did not run: %v", m)
	}
	if m.OffPickOf == 0 || m.OffPick != 0 {
		t.Fatalf("mid-fade, %d of %d sampled keys went elsewhere than /debug/pick?client=%s says: %v", m.OffPick, m.OffPickOf, dataplane.GRPCGoBalancer, m)
	}
}
