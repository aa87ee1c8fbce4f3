package e2e_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/testcp"
)

// gRPC C-core as Debian ships it (python3-grpcio 1.51.1). C-core 1.51
// crashes once it runs ring_hash (grpc/grpc#31766), so ringxds serves it
// round_robin and reports it as incompatible; a node that asks for the
// ring_hash translation in its metadata gets it, and C-core's trace shows
// it parsed ring_hash with the published sizes.

// parsedCluster matches C-core's trace of an accepted Cluster
// (xds_cluster.cc: "parsed Cluster NAME: {cluster_type=EDS,
// lb_policy_config=[...], ...}").
var parsedCluster = regexp.MustCompile(`parsed Cluster (\S+): \{.*lb_policy_config=(\[.*\]), `)

func waitParsedCluster(t *testing.T, c *testcp.LineClient, cluster string) string {
	t.Helper()
	var policy string
	testcp.WaitFor(t, 20*time.Second, "C-core's trace of the parsed Cluster "+cluster, func() bool {
		for _, m := range parsedCluster.FindAllStringSubmatch(c.Stderr(), -1) {
			if m[1] == cluster {
				policy = m[2]
				return true
			}
		}
		return false
	})
	return policy
}

func TestCCore151IsServedRoundRobinAndReported(t *testing.T) {
	backends := testcp.StartBackends(t, 3)
	cp := testcp.Start(t, testcp.TempFile(t, endpointsYAML("products", "ring_hash", "x-product-id", "", backends, []int{1, 1, 2})))
	py := testcp.StartCCoreClient(t, cp.XDSAddr, "products", "x-product-id", nil)

	got, err := py.Route(keyList(60))
	if err != nil {
		t.Fatalf("C-core on round_robin should serve every RPC: %v", err)
	}
	if policy := waitParsedCluster(t, py, "products"); !strings.Contains(policy, `"round_robin"`) {
		t.Fatalf("C-core parsed the Cluster as %s, want round_robin", policy)
	}
	perBackend := map[string]int{}
	for _, be := range got {
		perBackend[be]++
	}

	var c server.ClientStatus
	testcp.WaitFor(t, 5*time.Second, "the C-core client to be assessed", func() bool {
		var body struct{ Clients []server.ClientStatus }
		cp.GetJSON("/debug/clients", &body)
		for _, s := range body.Clients {
			if s.Implementation.Implementation == dataplane.CCore && len(s.Verdicts) > 0 {
				c = s
				return true
			}
		}
		return false
	})
	impl := c.Implementation
	if impl.Version.String() != "1.51.1" || impl.Language != "Python" || c.Kind != snapshot.KindGRPCRoundRobin {
		t.Fatalf("/debug/clients: %+v served %s, want c-core 1.51.1 (Python) served %s", impl, c.Kind, snapshot.KindGRPCRoundRobin)
	}
	if c.Compatibility != dataplane.StateIncompatible || !strings.Contains(c.Verdicts[0].Reason, "grpc/grpc#31766") {
		t.Fatalf("/debug/clients: compatibility %s, verdicts %+v; want incompatible, naming grpc/grpc#31766", c.Compatibility, c.Verdicts)
	}
	if n := testutil.ToFloat64(counter(t, cp, "ringxds_xds_client_compatibility", map[string]string{"implementation": "c-core", "state": dataplane.StateIncompatible})); n != 1 {
		t.Fatalf("ringxds_xds_client_compatibility{implementation=c-core,state=incompatible} = %v, want 1", n)
	}
	t.Logf("C-core 1.51 ran round_robin (keys per backend %v) and /debug/clients says: %s", perBackend, c.Verdicts[0].Reason)
}

// TestCCoreParsesPublishedRingHash asks for the ring_hash translation in
// the node metadata and reads from C-core's trace that it parsed ring_hash
// with exactly the ring sizes ringxds publishes, for explicit sizes and
// for a fade-in layout, whose size is the planned entry count.
func TestCCoreParsesPublishedRingHash(t *testing.T) {
	for _, tc := range []struct{ name, extra string }{
		{"explicit sizes", "    minimum_ring_size: 1024\n    maximum_ring_size: 2048\n"},
		{"fade-in layout", "    fade_in: {duration: 30s, capacity: 16}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backends := testcp.StartBackends(t, 3)
			cp := testcp.Start(t, testcp.TempFile(t, endpointsYAML("products", "ring_hash", "x-product-id", tc.extra, backends, []int{1, 1, 2})))
			cds := cp.Server.Current().Kinds[snapshot.KindGRPC][resource.ClusterType]["products"].(*clusterv3.Cluster)
			rh := cds.GetRingHashLbConfig()
			wantMin, wantMax := rh.GetMinimumRingSize().GetValue(), rh.GetMaximumRingSize().GetValue()

			py := testcp.StartCCoreClient(t, cp.XDSAddr, "products", "x-product-id", map[string]any{dataplane.KindMetadataKey: string(snapshot.KindGRPC)})
			go func() { _, _ = py.Route([]string{"product-1"}) }() // starts resolution; the answer does not matter
			policy := waitParsedCluster(t, py, "products")
			want := `[{"ring_hash_experimental":{"maxRingSize":` + strconv.FormatUint(wantMax, 10) + `,"minRingSize":` + strconv.FormatUint(wantMin, 10) + `}}]`
			if policy != want {
				t.Fatalf("C-core parsed lb_policy_config=%s, want %s (the published sizes)", policy, want)
			}
			exited, exitErr := py.Exited()
			select {
			case <-exited:
				t.Logf("C-core parsed %s, then exited: %v (grpc/grpc#31766)", policy, exitErr())
			case <-time.After(3 * time.Second):
				t.Logf("C-core parsed %s and is still running", policy)
			}
		})
	}
}
