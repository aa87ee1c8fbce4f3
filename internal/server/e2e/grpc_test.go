package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/testcp"
)

// The product's promise: a key goes to the pod /debug/pick names, whichever
// data plane routes it. Here the data plane is grpc-go's own xDS client and
// ring_hash balancer.
func TestGRPCRingHashAgreesWithDebugPick(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights []int
	}{
		{"equal weights", nil},
		// Weights summing to a power of two keep grpc-go's fixed-point
		// weights and Envoy's doubles exact (docs/ring-sizes.md).
		{"weights 1 1 2", []int{1, 1, 2}},
		{"weights 1 3 4", []int{1, 3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backends := testcp.StartBackends(t, 3)
			cp := testcp.Start(t, testcp.TempFile(t, endpointsYAML("products", "ring_hash", "x-product-id", "", backends, tc.weights)))
			client := dialXDS(t, cp.XDSAddr, "products")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			const keys = 1000
			agree := 0
			perBackend := map[string]int{}
			for i := range keys {
				key := fmt.Sprintf("product-%d", i)
				got, err := testcp.Call(ctx, client, "x-product-id", key)
				if err != nil {
					t.Fatalf("RPC for %s: %v", key, err)
				}
				want := cp.Pick("products", key, "grpc")
				if want.Policy != "ring_hash" {
					t.Fatalf("policy for grpc = %q, want ring_hash", want.Policy)
				}
				if got == want.Endpoint {
					agree++
				} else if agree+10 > i { // report the first few only
					t.Errorf("key %s: grpc-go sent it to %s, /debug/pick says %s", key, got, want.Endpoint)
				}
				perBackend[got]++
			}
			t.Logf("agreement %d/%d (%.1f%%), per backend %v", agree, keys, 100*float64(agree)/keys, perBackend)
			if agree != keys {
				t.Fatalf("agreement %d/%d, want 100%%", agree, keys)
			}
			if len(perBackend) != len(backends) {
				t.Fatalf("only %d of %d backends received keys: %v", len(perBackend), len(backends), perBackend)
			}
		})
	}
}

// A removed endpoint must stop receiving traffic quickly: the file source
// debounces, the server pushes EDS, grpc-go rebuilds its ring.
func TestGRPCStopsUsingRemovedEndpoint(t *testing.T) {
	backends := testcp.StartBackends(t, 3)
	cp := testcp.Start(t, testcp.TempFile(t, endpointsYAML("products", "ring_hash", "x-product-id", "", backends, nil)))
	client := dialXDS(t, cp.XDSAddr, "products")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	victim := backends[2].Addr
	var victimKeys []string
	for i := 0; len(victimKeys) < 20 && i < 10000; i++ {
		key := fmt.Sprintf("k-%d", i)
		if cp.Pick("products", key, "grpc").Endpoint == victim {
			victimKeys = append(victimKeys, key)
		}
	}
	for _, k := range victimKeys {
		if got, err := testcp.Call(ctx, client, "x-product-id", k); err != nil || got != victim {
			t.Fatalf("before removal, key %s went to %s (err %v), want %s", k, got, err, victim)
		}
	}

	removedAt := time.Now()
	testcp.WriteFile(t, cp.File, endpointsYAML("products", "ring_hash", "x-product-id", "", backends[:2], nil))
	var movedAfter time.Duration
	for {
		stillThere := 0
		for _, k := range victimKeys {
			got, err := testcp.Call(ctx, client, "x-product-id", k)
			if err != nil {
				t.Fatalf("RPC during removal: %v", err)
			}
			if got == victim {
				stillThere++
			}
		}
		if stillThere == 0 {
			movedAfter = time.Since(removedAt)
			break
		}
		if time.Since(removedAt) > 5*time.Second {
			t.Fatalf("%d/%d keys still reach the removed endpoint after 5 s", stillThere, len(victimKeys))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("removed endpoint stopped receiving keys after %v", movedAfter)
	if movedAfter > 2*time.Second {
		t.Fatalf("clients kept using the removed endpoint for %v, want < 2 s", movedAfter)
	}
	for _, k := range victimKeys {
		got, _ := testcp.Call(ctx, client, "x-product-id", k)
		if want := cp.Pick("products", k, "grpc").Endpoint; got != want {
			t.Fatalf("after removal key %s went to %s, /debug/pick says %s", k, got, want)
		}
	}
}

// gRPC NACKs MAGLEV and fails every RPC, so a maglev cluster must reach
// gRPC clients as ring_hash, and say so.
func TestGRPCMaglevClusterServes(t *testing.T) {
	backends := testcp.StartBackends(t, 3)
	cp := testcp.Start(t, testcp.TempFile(t, endpointsYAML("inventory", "maglev", "x-sku", "", backends, nil)))
	client := dialXDS(t, cp.XDSAddr, "inventory")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 200 {
		key := fmt.Sprintf("sku-%d", i)
		got, err := testcp.Call(ctx, client, "x-sku", key)
		if err != nil {
			t.Fatalf("RPC to a maglev cluster: %v", err)
		}
		want := cp.Pick("inventory", key, "grpc")
		if want.Policy != "ring_hash" || got != want.Endpoint {
			t.Fatalf("key %s: grpc-go sent it to %s; /debug/pick for grpc says %s via %s", key, got, want.Endpoint, want.Policy)
		}
		if p := cp.Pick("inventory", key, "envoy").Policy; p != "maglev" {
			t.Fatalf("envoy policy = %q, want maglev", p)
		}
	}
	var snap struct {
		Notes map[string][]string `json:"notes"`
	}
	cp.GetJSON("/debug/snapshot", &snap)
	if !strings.Contains(strings.Join(snap.Notes["inventory"], " "), "ring_hash") {
		t.Fatalf("/debug/snapshot notes for inventory do not explain the maglev translation: %q", snap.Notes["inventory"])
	}
	for _, c := range cp.Server.Clients() {
		for typ, ts := range c.Types {
			if ts.Nacks > 0 {
				t.Fatalf("client %s NACKed %s: %+v", c.NodeID, typ, ts.LastNack)
			}
		}
	}
}
