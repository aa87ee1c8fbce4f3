package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/testcp"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ringxds/ringxds/examples"
)

// exampleFile copies the shipped example, so these tests pin what users run.
func exampleFile(t *testing.T) string {
	return testcp.TempFile(t, string(examples.DefaultEndpoints))
}

func adsClient(t *testing.T, addr string) discovery.AggregatedDiscoveryServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return discovery.NewAggregatedDiscoveryServiceClient(cc)
}

func node(id, kind string) *core.Node {
	md, _ := structpb.NewStruct(map[string]any{"ringxds.io/client": kind})
	return &core.Node{Id: id, UserAgentName: "raw-ads-test", Metadata: md}
}

// sotwFetch opens a SotW ADS stream, asks for one type and returns the
// first response.
func sotwFetch(t *testing.T, ctx context.Context, c discovery.AggregatedDiscoveryServiceClient, n *core.Node, typeURL string, names []string) *discovery.DiscoveryResponse {
	t.Helper()
	st, err := c.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: n, TypeUrl: typeURL, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("SotW %s: %v", typeURL, err)
	}
	return resp
}

func deltaFetch(t *testing.T, ctx context.Context, c discovery.AggregatedDiscoveryServiceClient, n *core.Node, typeURL string, names []string) *discovery.DeltaDiscoveryResponse {
	t.Helper()
	st, err := c.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: n, TypeUrl: typeURL, ResourceNamesSubscribe: names}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("delta %s: %v", typeURL, err)
	}
	return resp
}

// byName maps resource names to their serialized bytes.
func sotwByName(t *testing.T, resp *discovery.DiscoveryResponse) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, a := range resp.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		out[resourceName(m)] = a.GetValue()
	}
	return out
}

func resourceName(m proto.Message) string {
	return cache.GetResourceName(m)
}

func TestADSSotWAndDeltaServeSameResources(t *testing.T) {
	cp := testcp.Start(t, exampleFile(t))
	c := adsClient(t, cp.XDSAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, kind := range []string{"envoy", "grpc", "clientlib"} {
		for _, typeURL := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
			names := []string{"products", "inventory", "catalog"}
			if typeURL == resource.ClusterType {
				names = nil // wildcard, as Envoy asks
			}
			if kind == "envoy" && (typeURL == resource.ListenerType || typeURL == resource.RouteType) {
				continue // Envoy's listeners live in its bootstrap
			}
			n := node("ads-"+kind, kind)
			sotw := sotwByName(t, sotwFetch(t, ctx, c, n, typeURL, names))
			dresp := deltaFetch(t, ctx, c, n, typeURL, append(names, map[bool]string{true: "*"}[names == nil]))
			delta := map[string][]byte{}
			for _, r := range dresp.GetResources() {
				delta[r.GetName()] = r.GetResource().GetValue()
			}
			if len(sotw) != 3 {
				t.Errorf("%s %s: SotW returned %d resources, want 3", kind, typeURL, len(sotw))
			}
			if len(sotw) != len(delta) {
				t.Fatalf("%s %s: SotW has %d resources, delta %d", kind, typeURL, len(sotw), len(delta))
			}
			for name, b := range sotw {
				if !proto.Equal(mustAny(t, typeURL, b), mustAny(t, typeURL, delta[name])) {
					t.Errorf("%s %s %s: SotW and delta resources differ", kind, typeURL, name)
				}
			}
		}
	}
}

func mustAny(t *testing.T, typeURL string, b []byte) proto.Message {
	t.Helper()
	mt, err := protoRegistryFind(typeURL)
	if err != nil {
		t.Fatal(err)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// A client that rejects a response is logged, counted and shown, and the
// server keeps serving it and everyone else.
func TestADSNackIsRecordedAndServingContinues(t *testing.T) {
	cp := testcp.Start(t, exampleFile(t))
	c := adsClient(t, cp.XDSAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := node("nacker", "envoy")
	if err := st.Send(&discovery.DiscoveryRequest{Node: n, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	first, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{
		TypeUrl: resource.ClusterType, VersionInfo: "", ResponseNonce: first.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "cluster products: unsupported lb policy (test)"},
	}); err != nil {
		t.Fatal(err)
	}
	testcp.WaitFor(t, 5*time.Second, "the NACK to show on /debug/clients", func() bool {
		var body struct {
			Clients []struct {
				NodeID string `json:"node_id"`
				Kind   string `json:"kind"`
				Types  map[string]struct {
					SentVersion string `json:"sent_version"`
					Nacks       int    `json:"nacks"`
					LastNack    *struct {
						Message string `json:"message"`
						Nonce   string `json:"nonce"`
					} `json:"last_nack"`
				} `json:"types"`
			} `json:"clients"`
		}
		cp.GetJSON("/debug/clients", &body)
		for _, cl := range body.Clients {
			cds := cl.Types["cds"]
			if cl.NodeID == "nacker" && cl.Kind == "envoy" && cds.Nacks == 1 && cds.LastNack != nil &&
				strings.Contains(cds.LastNack.Message, "unsupported lb policy") && cds.LastNack.Nonce == first.GetNonce() &&
				cds.SentVersion == first.GetVersionInfo() {
				return true
			}
		}
		return false
	})
	if got := testutil.ToFloat64(counter(t, cp, "ringxds_xds_nacks_total", map[string]string{"kind": "envoy", "type": "cds"})); got != 1 {
		t.Fatalf("ringxds_xds_nacks_total{kind=envoy,type=cds} = %v, want 1", got)
	}
	// The stream stays usable: an ACK of the same version is accepted.
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: first.GetVersionInfo(), ResponseNonce: first.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	other := sotwFetch(t, ctx, c, node("bystander", "envoy"), resource.ClusterType, nil)
	if len(other.GetResources()) != 3 {
		t.Fatalf("another client got %d clusters after the NACK, want 3", len(other.GetResources()))
	}
}

// Versions come from content: two servers reading one file send identical
// versions and bytes, so a client moving between replicas sees no change.
func TestTwoServersOnOneFilePublishIdenticalVersions(t *testing.T) {
	// Replica a goes through an extra change before settling on the file's
	// content; replica b starts from it. Counter-based versions would differ.
	// The changes touch inventory, which does not fade in new endpoints: a
	// fading endpoint is, by design, published differently until its window
	// ends (docs/fade-in.md).
	file := testcp.TempFile(t, strings.Replace(string(examples.DefaultEndpoints), "9202", "9212", 1))
	a := testcp.Start(t, file)
	testcp.WriteFile(t, file, string(examples.DefaultEndpoints))
	testcp.WaitFor(t, 5*time.Second, "replica a to load the final content", func() bool {
		return !strings.Contains(fmt.Sprint(a.Server.Current().State.Clusters), "9212")
	})
	b := testcp.Start(t, file)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, cb := adsClient(t, a.XDSAddr), adsClient(t, b.XDSAddr)
	for _, kind := range []string{"envoy", "grpc", "clientlib"} {
		for _, typeURL := range []string{resource.ClusterType, resource.EndpointType} {
			names := []string{"catalog", "inventory", "products"}
			if typeURL == resource.ClusterType {
				names = nil
			}
			ra := sotwFetch(t, ctx, ca, node("replica-a", kind), typeURL, names)
			rb := sotwFetch(t, ctx, cb, node("replica-b", kind), typeURL, names)
			if ra.GetVersionInfo() == "" || ra.GetVersionInfo() != rb.GetVersionInfo() {
				t.Errorf("%s %s: versions %q and %q, want equal and non-empty", kind, typeURL, ra.GetVersionInfo(), rb.GetVersionInfo())
			}
			ba, bb := sotwByName(t, ra), sotwByName(t, rb)
			for name, v := range ba {
				if string(v) != string(bb[name]) {
					t.Errorf("%s %s %s: bytes differ between replicas", kind, typeURL, name)
				}
			}
			da := deltaFetch(t, ctx, ca, node("replica-a", kind), typeURL, append(names, "*")[:max(len(names), 1)])
			db := deltaFetch(t, ctx, cb, node("replica-b", kind), typeURL, append(names, "*")[:max(len(names), 1)])
			va, vb := map[string]string{}, map[string]string{}
			for _, r := range da.GetResources() {
				va[r.GetName()] = r.GetVersion()
			}
			for _, r := range db.GetResources() {
				vb[r.GetName()] = r.GetVersion()
			}
			if fmt.Sprint(va) != fmt.Sprint(vb) || len(va) == 0 {
				t.Errorf("%s %s: delta resource versions differ: %v vs %v", kind, typeURL, va, vb)
			}
		}
	}
	// A change moves both to the same new version.
	before := sotwFetch(t, ctx, ca, node("replica-a", "envoy"), resource.ClusterType, nil).GetVersionInfo()
	changed := strings.Replace(string(examples.DefaultEndpoints), "9201", "9211", 1)
	testcp.WriteFile(t, file, changed)
	var va, vb string
	testcp.WaitFor(t, 5*time.Second, "both replicas to publish the change", func() bool {
		va = sotwFetch(t, ctx, ca, node("replica-a", "envoy"), resource.EndpointType, []string{"inventory"}).GetVersionInfo()
		vb = sotwFetch(t, ctx, cb, node("replica-b", "envoy"), resource.EndpointType, []string{"inventory"}).GetVersionInfo()
		return va == vb && strings.Contains(fmt.Sprint(a.Server.Current().State.Clusters), "9211") && strings.Contains(fmt.Sprint(b.Server.Current().State.Clusters), "9211")
	})
	if after := sotwFetch(t, ctx, ca, node("replica-a", "envoy"), resource.ClusterType, nil).GetVersionInfo(); after != before {
		t.Errorf("CDS version changed from %s to %s although only endpoints changed", before, after)
	}
}

// An invalid file keeps the last good state served and reports the error
// with file, line and field on the debug endpoint and in metrics.
func TestBrokenFileKeepsLastGoodState(t *testing.T) {
	backends := testcp.StartBackends(t, 3)
	good := endpointsYAML("products", "ring_hash", "x-product-id", "", backends, nil)
	cp := testcp.Start(t, testcp.TempFile(t, good))
	before := cp.Pick("products", "product-42", "envoy").Endpoint

	broken := strings.Replace(good, "lb_policy: ring_hash", "lb_policy: round_robin", 1)
	testcp.WriteFile(t, cp.File, broken)
	var problems struct {
		Problems []struct {
			Object, Field, Message string
		} `json:"problems"`
	}
	testcp.WaitFor(t, 5*time.Second, "the broken file to be reported", func() bool {
		cp.GetJSON("/debug/problems", &problems)
		return len(problems.Problems) > 0
	})
	p := problems.Problems[0]
	if !strings.Contains(p.Object, "endpoints.yaml") || !strings.Contains(p.Field+p.Message, "line 3") || !strings.Contains(p.Field+p.Message, "lb_policy") || !strings.Contains(p.Message, "round_robin") {
		t.Fatalf("problem does not name file, line and field: %+v", p)
	}
	if got := cp.Pick("products", "product-42", "envoy").Endpoint; got != before {
		t.Fatalf("pick changed to %s while the file was broken (was %s)", got, before)
	}
	if n := testutil.ToFloat64(counter(t, cp, "ringxds_source_reloads_total", map[string]string{"source": "file", "result": "error"})); n < 1 {
		t.Fatalf("reload errors metric = %v, want >= 1", n)
	}
	// Fixing the file clears the problem.
	testcp.WriteFile(t, cp.File, good)
	testcp.WaitFor(t, 5*time.Second, "the problem to clear", func() bool {
		cp.GetJSON("/debug/problems", &problems)
		return len(problems.Problems) == 0
	})
}

func TestDebugRejectsBadQueries(t *testing.T) {
	cp := testcp.Start(t, exampleFile(t))
	for _, tc := range []struct {
		query string
		code  int
		msg   string
	}{
		{"cluster=nope&key=a", http.StatusBadRequest, "unknown cluster"},
		{"key=a", http.StatusBadRequest, "missing query parameter: cluster"},
		{"cluster=products", http.StatusBadRequest, "missing query parameter: key"},
		{"cluster=products&key=" + strings.Repeat("k", 5000), http.StatusBadRequest, "key longer than"},
		{"cluster=products&key=a&client=nginx", http.StatusBadRequest, "client must be one of"},
		{"cluster=products&key=", http.StatusOK, ""},
		{"cluster=" + url.QueryEscape("<script>") + "&key=a", http.StatusBadRequest, "unknown cluster"},
	} {
		var body map[string]any
		code := cp.GetJSON("/debug/pick?"+tc.query, &body)
		if code != tc.code {
			t.Errorf("%.60s: status %d, want %d (%v)", tc.query, code, tc.code, body)
			continue
		}
		if tc.msg != "" && !strings.Contains(fmt.Sprint(body["error"]), tc.msg) {
			t.Errorf("%.60s: error %q does not say %q", tc.query, body["error"], tc.msg)
		}
	}
	resp, err := http.Post(cp.DebugURL+"/debug/pick?cluster=products&key=a", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /debug/pick: status %d, want 405", resp.StatusCode)
	}
}
