package server

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// maxBookkeepingPerClientVaried bounds the same records for streams that
// share less: each subscribing to its own 100 of 150 assignments, or
// pushed one changed assignment after converging, which leaves each
// stream its own list of what it holds (EDS responses carry only what
// changed).
const maxBookkeepingPerClientVaried = 3584

// TestBookkeepingVariants is TestBookkeepingPerClient with two realistic
// differences: each sidecar subscribes to its own 100 of 150 services'
// assignments, or every stream was then pushed one changed assignment.
func TestBookkeepingVariants(t *testing.T) {
	const n = 200
	clusters, clas, names := publishedResources(t, 150)
	for _, variant := range []string{"identical", "distinct-subscriptions", "after-one-push"} {
		r := newRegistry(zap.NewNop(), newMetrics(prometheus.NewRegistry()))
		cb := callbacks{r}
		pick := func(i int) ([][]byte, []string) {
			if variant != "distinct-subscriptions" {
				return clas[:100], names[:100]
			}
			var v [][]byte
			var ns []string
			for j := range 150 {
				if j == i%150 || len(ns) < 100 && j != i%150 && (j+i)%3 != 0 {
					v, ns = append(v, clas[j]), append(ns, names[j])
				}
			}
			return v[:min(100, len(v))], ns[:min(100, len(ns))]
		}
		run := func(id int64) {
			v, ns := pick(int(id))
			converge(t, cb, id, false, clusters[:100], v, ns)
			if variant == "after-one-push" {
				req := &discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: fresh(ns)}
				resp := sotwResponse(resource.EndpointType, "9", [][]byte{clas[7]})
				cb.OnStreamResponse(context.Background(), id, req, resp)
				mustOK(t, cb.OnStreamRequest(id, &discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: "9", ResourceNames: fresh(ns)}))
			}
		}
		run(1)
		before := liveHeap()
		for i := range n {
			run(int64(i + 2))
		}
		r.queue.take()
		after := liveHeap()
		runtime.KeepAlive(r)
		per := float64(int64(after)-int64(before)) / n
		t.Logf("%s: %s bytes per SotW stream", variant, strconv.FormatFloat(per, 'f', 0, 64))
		if per > maxBookkeepingPerClientVaried {
			t.Errorf("%s: %.0f bytes per stream, over the pinned %d", variant, per, maxBookkeepingPerClientVaried)
		}
	}
	runtime.KeepAlive(clas)
}
