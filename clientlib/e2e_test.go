package clientlib_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringxds/ringxds/clientlib"
)

// The product's promise: a key goes to the endpoint /debug/pick names,
// whichever data plane routes it. Here the data plane is clientlib, over
// real HTTP to real backends.
func TestAgreesWithDebugPick(t *testing.T) {
	for _, policy := range []string{"ring_hash", "maglev", "skipper"} {
		t.Run(policy, func(t *testing.T) {
			backends := startBackends(t, 5)
			cp := startControlPlane(t, tempFile(t, clusterYAML("products", policy, "", backends)), "")
			c := dial(t, cp.xdsAddr)
			b := balancer(t, c, "products", clientlib.WithBoundedLoad(false))
			if b.Policy() != policy {
				t.Fatalf("policy %q, want %q", b.Policy(), policy)
			}
			hc := transportClient(b)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			perBackend := map[string]int{}
			for i := range 1000 {
				key := fmt.Sprintf("product-%d", i)
				want := cp.pick("products", key, "clientlib")
				if want.Policy != policy {
					t.Fatalf("/debug/pick policy %q, want %q", want.Policy, policy)
				}
				ep, err := b.Pick(key)
				if err != nil {
					t.Fatal(err)
				}
				if ep.Addr != want.Endpoint {
					t.Fatalf("key %s: Pick %s, /debug/pick (clientlib) %s", key, ep.Addr, want.Endpoint)
				}
				if policy != "skipper" && want.ByClient["envoy"] != ep.Addr {
					t.Fatalf("key %s: Pick %s, /debug/pick (envoy) %s", key, ep.Addr, want.ByClient["envoy"])
				}
				got, err := get(ctx, hc, key, nil)
				if err != nil {
					t.Fatalf("GET for %s: %v", key, err)
				}
				if got != want.Endpoint {
					t.Fatalf("key %s: answered by %s, /debug/pick says %s", key, got, want.Endpoint)
				}
				perBackend[got]++
			}
			t.Logf("per backend: %v", perBackend)
			if len(perBackend) != len(backends) {
				t.Fatalf("only %d of %d backends received keys", len(perBackend), len(backends))
			}
		})
	}
}
