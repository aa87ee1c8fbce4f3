package server

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// maxBookkeepingPerClient bounds the live heap ringxds's own records of
// one converged Envoy stream (100 clusters and their 100 assignments, all
// accepted) take: the registry's stream status, the resources held for
// CSDS, the subscription, the responses awaiting an answer. Issue 19 holds
// the whole server to 30 KB per client, most of it gRPC's and the
// cache's; this share was 17.5 KB before the held resources and the
// subscriptions were shared between streams, and is 1.8 KB since.
const maxBookkeepingPerClient = 2560

// publishedResources marshals n clusters and n assignments once, as the
// cache does for every stream.
func publishedResources(t testing.TB, n int) (clusters, clas [][]byte, names []string) {
	for i := range n {
		name := fmt.Sprintf("default/service-%03d:http", i)
		c, err := cache.MarshalResource(&cluster.Cluster{Name: name, EdsClusterConfig: &cluster.Cluster_EdsClusterConfig{ServiceName: name}})
		if err != nil {
			t.Fatal(err)
		}
		clusters = append(clusters, c)
		cla, err := cache.MarshalResource(&endpoint.ClusterLoadAssignment{ClusterName: name})
		if err != nil {
			t.Fatal(err)
		}
		clas = append(clas, cla)
		names = append(names, name)
	}
	return clusters, clas, names
}

// sidecarNode is what an Envoy sends: slimNode keeps a fraction of it.
func sidecarNode(i int) *core.Node {
	md, _ := structpb.NewStruct(map[string]any{"ISTIO_VERSION": "1.24.0", "LABELS": map[string]any{"app": "shop"}})
	return &core.Node{Id: "sidecar~10.0.0." + strconv.Itoa(i) + "~shop-" + strconv.Itoa(i), Cluster: "shop",
		UserAgentName: "envoy", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.32.0"},
		Metadata: md, ClientFeatures: []string{"envoy.lb.does_not_support_overprovisioning"}}
}

// fresh copies names as decoding a request does: what the registry keeps
// of a request is then counted against it.
func fresh(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.Clone(n)
	}
	return out
}

func sotwResponse(typeURL, nonce string, values [][]byte) *discovery.DiscoveryResponse {
	resp := &discovery.DiscoveryResponse{TypeUrl: typeURL, Nonce: nonce}
	for _, v := range values {
		resp.Resources = append(resp.Resources, &anypb.Any{TypeUrl: typeURL, Value: v})
	}
	return resp
}

func deltaResponse(typeURL, nonce string, names []string, values [][]byte) *discovery.DeltaDiscoveryResponse {
	resp := &discovery.DeltaDiscoveryResponse{TypeUrl: typeURL, Nonce: nonce}
	for i, v := range values {
		resp.Resources = append(resp.Resources, &discovery.Resource{Name: strings.Clone(names[i]), Version: "1",
			Resource: &anypb.Any{TypeUrl: typeURL, Value: v}})
	}
	return resp
}

// converge plays one Envoy stream through the callbacks as go-control-plane
// calls them: CDS (wildcard), then EDS for every cluster, each accepted.
func converge(t testing.TB, cb callbacks, id int64, delta bool, clusters, clas [][]byte, names []string) {
	ctx := context.Background()
	if delta {
		if err := cb.OnDeltaStreamOpen(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
		for i, step := range []struct {
			typeURL string
			sub     []string
			values  [][]byte
		}{{resource.ClusterType, []string{"*"}, clusters}, {resource.EndpointType, fresh(names), clas}} {
			req := &discovery.DeltaDiscoveryRequest{TypeUrl: step.typeURL, ResourceNamesSubscribe: step.sub}
			if i == 0 {
				req.Node = sidecarNode(int(id))
			}
			nonce := strconv.Itoa(i + 1)
			mustOK(t, cb.OnStreamDeltaRequest(id, req))
			cb.OnStreamDeltaResponse(id, req, deltaResponse(step.typeURL, nonce, names, step.values))
			mustOK(t, cb.OnStreamDeltaRequest(id, &discovery.DeltaDiscoveryRequest{TypeUrl: step.typeURL, ResponseNonce: nonce}))
		}
		return
	}
	if err := cb.OnStreamOpen(ctx, id, ""); err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		typeURL string
		names   func() []string
		values  [][]byte
	}{{resource.ClusterType, func() []string { return nil }, clusters}, {resource.EndpointType, func() []string { return fresh(names) }, clas}} {
		req := &discovery.DiscoveryRequest{TypeUrl: step.typeURL, ResourceNames: step.names()}
		if i == 0 {
			req.Node = sidecarNode(int(id))
		}
		nonce := strconv.Itoa(i + 1)
		mustOK(t, cb.OnStreamRequest(id, req))
		resp := sotwResponse(step.typeURL, nonce, step.values)
		cb.OnStreamResponse(ctx, id, req, resp)
		mustOK(t, cb.OnStreamRequest(id, &discovery.DiscoveryRequest{TypeUrl: step.typeURL, VersionInfo: resp.GetVersionInfo(),
			ResponseNonce: nonce, ResourceNames: step.names()}))
	}
}

func mustOK(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// bookkeepingPerClient converges n streams, half SotW and half delta, and
// returns the live heap each adds to the registry.
func bookkeepingPerClient(t testing.TB, n int) float64 {
	clusters, clas, names := publishedResources(t, 100)
	r := newRegistry(zap.NewNop(), newMetrics(prometheus.NewRegistry()))
	cb := callbacks{r}
	// The first two streams create what every stream shares (metric
	// series, the interned versions and lists): they are not counted.
	converge(t, cb, 1, false, clusters, clas, names)
	converge(t, cb, 2, true, clusters, clas, names)
	before := liveHeap()
	for i := range n {
		converge(t, cb, int64(i+3), i%2 == 1, clusters, clas, names)
	}
	// Assessing is the queue's worker's; what stays is the client.
	r.queue.take()
	after := liveHeap()
	runtime.KeepAlive(r)
	runtime.KeepAlive(clusters)
	runtime.KeepAlive(clas)
	return float64(int64(after)-int64(before)) / float64(n)
}

func TestBookkeepingPerClient(t *testing.T) {
	per := bookkeepingPerClient(t, 200)
	t.Logf("%.0f bytes of bookkeeping per converged Envoy stream", per)
	if per > maxBookkeepingPerClient {
		t.Fatalf("%.0f bytes of bookkeeping per converged Envoy stream (limit %d): what grew?", per, maxBookkeepingPerClient)
	}
}
