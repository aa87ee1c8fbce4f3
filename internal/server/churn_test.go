package server

// The real server under churn, with raw clients on the wire, for the race
// detector; RINGXDS_CHURN_SECONDS sets each test's duration (default 4).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"

	"github.com/ringxds/ringxds/internal/model"
)

func churnState(t *testing.T, clusters int, gen int, rng *rand.Rand) model.State {
	t.Helper()
	var st model.State
	for i := range clusters {
		port := uint32(80)
		if rng != nil && rng.IntN(3) == 0 {
			port = uint32(1000 + gen%50)
		}
		st.Clusters = append(st.Clusters, model.Cluster{
			Name:      fmt.Sprintf("c%02d", i),
			Endpoints: []model.Endpoint{{Address: fmt.Sprintf("10.0.%d.1", i), Port: port}},
		})
	}
	if err := st.Normalize(); err != nil {
		t.Fatal(err)
	}
	return st
}

// startChurnServer serves clusters on loopback with no request rate limit
// and returns the server and a connection to it.
func startChurnServer(t *testing.T, clusters int) (*Server, *grpc.ClientConn) {
	t.Helper()
	lim := DefaultLimits()
	lim.RequestsPerSecond, lim.RequestBurst = 1e6, 1e6
	s := New(t.Context(), Options{Registerer: prometheus.NewRegistry(), Limits: &lim})
	if err := s.Apply(churnState(t, clusters, 0, nil)); err != nil {
		t.Fatal(err)
	}
	cc := dialLoopback(t, serveLoopback(t, s))
	return s, cc
}

func stressSeconds() time.Duration {
	if s, err := strconv.Atoi(os.Getenv("RINGXDS_CHURN_SECONDS")); err == nil {
		return time.Duration(s) * time.Second
	}
	return 4 * time.Second
}

// TestDeltaEDSChurn: Envoy-shaped delta ADS streams keep changing their
// EDS subscription (as Envoy does when clusters come and go) while the
// server keeps publishing endpoint changes: no data race (a delta response
// once updated the stream's returned-versions map in place while an update
// read it for the stream's next watch), and no watch outlives its stream.
func TestDeltaEDSChurn(t *testing.T) {
	const clusters = 12
	s, cc := startChurnServer(t, clusters)

	ctx, cancel := context.WithTimeout(context.Background(), stressSeconds())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for gen := 1; ctx.Err() == nil; gen++ {
			if err := s.Apply(churnState(t, clusters, gen, rng)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var requests atomic.Int64
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, scancel := context.WithCancel(ctx)
			defer scancel()
			st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(sctx)
			if err != nil {
				return
			}
			rng := rand.New(rand.NewPCG(uint64(i), 3))
			nonces := make(chan string, 64)
			go func() {
				for {
					r, err := st.Recv()
					if err != nil {
						close(nonces)
						return
					}
					select {
					case nonces <- r.GetNonce():
					default:
					}
				}
			}()
			subscribed := map[string]bool{}
			first := true
			nonce := ""
			for ctx.Err() == nil {
				req := &discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResponseNonce: nonce}
				if first {
					req.Node = testNode(fmt.Sprintf("envoy-%d", i))
					first = false
				}
				for range 2 {
					name := fmt.Sprintf("c%02d", rng.IntN(clusters))
					if subscribed[name] {
						req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, name)
						delete(subscribed, name)
					} else {
						req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, name)
						subscribed[name] = true
					}
				}
				if st.Send(req) != nil {
					return
				}
				requests.Add(1)
				select {
				case n, ok := <-nonces:
					if !ok {
						return
					}
					nonce = n
				case <-time.After(time.Duration(rng.IntN(2000)) * time.Microsecond):
				case <-ctx.Done():
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d delta requests", requests.Load())
	deadline := time.Now().Add(5 * time.Second)
	for s.NumWatches() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.NumWatches(); n != 0 {
		t.Errorf("%d watches left after every stream closed", n)
	}
}

// TestSotwChurn: Envoy-shaped SotW ADS streams (wildcard CDS, named
// EDS following it, ACKs, NACKs with error_detail, stale nonces, streams
// closed mid-response, one stream that never reads) and grpc-shaped
// per-type EDS streams under continuous publishing, for -race. Every
// reading stream must end up holding the last published EDS version of
// the clusters it names, and no watch may outlive its stream.
func TestSotwChurn(t *testing.T) {
	const clusters = 12
	s, cc := startChurnServer(t, clusters)

	// A stream that subscribes to everything and never reads.
	stuckCtx, stuckCancel := context.WithCancel(context.Background())
	stuck, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(stuckCtx)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{resource.ClusterType, resource.EndpointType} {
		names := []string{}
		if typ == resource.EndpointType {
			for i := range clusters {
				names = append(names, fmt.Sprintf("c%02d", i))
			}
		}
		_ = stuck.Send(&discovery.DiscoveryRequest{Node: testNode("stuck"), TypeUrl: typ, ResourceNames: names})
	}

	ctx, cancel := context.WithTimeout(context.Background(), stressSeconds())
	defer cancel()
	var wg sync.WaitGroup
	var applies atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for gen := 1; ctx.Err() == nil; gen++ {
			if err := s.Apply(churnState(t, clusters, gen, rng)); err != nil {
				t.Error(err)
				return
			}
			applies.Add(1)
		}
	}()
	var responses atomic.Int64
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 5))
			for ctx.Err() == nil { // reconnect loop
				sctx, scancel := context.WithTimeout(ctx, time.Duration(200+rng.IntN(800))*time.Millisecond)
				st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(sctx)
				if err != nil {
					scancel()
					return
				}
				node := testNode(fmt.Sprintf("envoy-%d", i))
				_ = st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType})
				_ = st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{"c00"}})
				for {
					r, err := st.Recv()
					if err != nil {
						break
					}
					responses.Add(1)
					req := &discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}
					if r.GetTypeUrl() == resource.EndpointType {
						for j := range clusters {
							if rng.IntN(2) == 0 {
								req.ResourceNames = append(req.ResourceNames, fmt.Sprintf("c%02d", j))
							}
						}
					}
					switch rng.IntN(10) {
					case 0:
						req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: "rejected by the test client"}
						req.VersionInfo = ""
					case 1:
						req.ResponseNonce = "stale"
					}
					if st.Send(req) != nil {
						break
					}
				}
				scancel()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d applies, %d responses", applies.Load(), responses.Load())
	stuckCancel()
	deadline := time.Now().Add(5 * time.Second)
	for s.NumWatches() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.NumWatches(); n != 0 {
		t.Errorf("%d watches left after every stream closed", n)
	}
}
