package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// Requests larger than the static connection window (1 MiB), several
// streams at once on one connection, are all read and answered.
func TestLargeRequestsOnSeveralStreams(t *testing.T) {
	ls := startLimited(t, noLimits())
	cc := ls.dial(t)
	names := []string{"products"}
	for i := range 30000 {
		names = append(names, fmt.Sprintf("%s-%06d", strings.Repeat("x", 90), i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	start := time.Now()
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
			if err != nil {
				errs <- err
				return
			}
			if err := st.Send(&discovery.DiscoveryRequest{Node: testNode(fmt.Sprint("n", i)), TypeUrl: resource.ClusterType, ResourceNames: names}); err != nil {
				errs <- fmt.Errorf("stream %d send: %w", i, err)
				return
			}
			resp, err := st.Recv()
			if err != nil {
				errs <- fmt.Errorf("stream %d recv: %w", i, err)
				return
			}
			if len(resp.Resources) != 1 {
				errs <- fmt.Errorf("stream %d: %d resources", i, len(resp.Resources))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("6 requests of ~3 MB answered in %v", time.Since(start))
}
