package server

import (
	"fmt"
	"sync"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestRequestsLargerThanTheWindowsAreServed: the transport's flow-control
// windows are static (no bandwidth estimation), smaller than what an Envoy
// naming every cluster of a large mesh sends in one request. Two streams
// on one connection each send such requests, every one larger than a
// stream's window and together larger than the connection's, and each is
// answered.
func TestRequestsLargerThanTheWindowsAreServed(t *testing.T) {
	ls := startLimited(t, DefaultLimits())
	cc := ls.dial(t)
	many := names("cluster-with-a-rather-long-name-in-a-big-mesh", 20000)
	size := 0
	for _, n := range many {
		size += len(n) + 2
	}
	if size <= streamWindow || 2*size <= connWindow {
		t.Fatalf("the request is %d bytes, not larger than the windows", size)
	}
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			st := adsStream(t, cc, fmt.Sprint("big-", i), resource.EndpointType, append([]string{"products"}, many...)...)
			for _, next := range []string{"orders", "products", "orders"} {
				resp := recvType(t, st, resource.EndpointType)
				if len(resp.GetResources()) != 1 {
					t.Errorf("stream %d: %d resources in the response, want 1", i, len(resp.GetResources()))
					return
				}
				// SotW: each request repeats the whole list.
				if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: resp.GetVersionInfo(),
					ResponseNonce: resp.GetNonce(), ResourceNames: append([]string{next}, many...)}); err != nil {
					t.Errorf("stream %d: %v", i, err)
					return
				}
			}
			recvType(t, st, resource.EndpointType)
		})
	}
	wg.Wait()
	t.Logf("two streams each sent 4 requests of %d KiB", size>>10)
}
