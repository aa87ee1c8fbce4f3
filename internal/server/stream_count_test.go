package server

import (
	"context"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
)

// Streams that end in errors (an oversized request, a client cancel, a
// refusal over the limit) leave the connection's count where it was.
func TestStreamCountAfterErrors(t *testing.T) {
	lim := noLimits()
	lim.StreamsPerConnection = 2
	lim.MaxMessageBytes = 64 << 10
	ls := startLimited(t, lim)
	cc := ls.dial(t)
	for i := range 6 {
		// The handler ends with the size limit's error.
		wantRefused(t, adsStream(t, cc, strings.Repeat("x", 100<<10), resource.ClusterType), codes.ResourceExhausted, "--max-message-bytes")
		// The client cancels mid-stream.
		ctx, cancel := context.WithCancel(context.Background())
		st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Send(&discovery.DiscoveryRequest{Node: testNode("c"), TypeUrl: resource.ClusterType})
		_, _ = st.Recv()
		cancel()
		_ = i
	}
	// Fill the connection, then one more is refused, repeatedly.
	a := adsStream(t, cc, "a", resource.ClusterType)
	recvType(t, a, resource.ClusterType)
	b := adsStream(t, cc, "b", resource.ClusterType)
	recvType(t, b, resource.ClusterType)
	for range 3 {
		wantRefused(t, adsStream(t, cc, "over", resource.ClusterType), codes.ResourceExhausted, "--max-streams-per-connection")
	}
	// Free one place: a new stream takes it.
	_ = a.CloseSend()
	for _, err := a.Recv(); err == nil; _, err = a.Recv() {
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := adsStream(t, cc, "again", resource.ClusterType)
		if _, err := st.Recv(); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no stream accepted after one closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
