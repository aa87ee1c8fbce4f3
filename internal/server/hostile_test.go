package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// Limits of the hostile-client test, and what they bound.
var hostileLimits = Limits{
	StreamsPerConnection: 100,
	NamesPerStream:       2000,
	NamesPerConnection:   5000,
	RequestsPerSecond:    50,
	RequestBurst:         200,
	MaxMessageBytes:      256 << 10,
	ConnectionsPerSecond: 5,
	ConnectionBurst:      5,
}

const (
	hostileConns = 3 // connections the hostile client fills
	hostileFor   = 4 * time.Second
)

// heapBound is the growth the limits allow: per stream 64 KiB (its
// goroutines' stacks, gRPC's and go-control-plane's state), per name
// 1.5 KiB (a name of up to 1 KiB and its entries in go-control-plane's
// subscription, the cache's watch index and the registry), per connection
// 128 KiB (transport buffers). Streams per connection run up to the limit
// plus the HTTP/2 headroom, refused ones included; names up to the
// per-connection limit.
func heapBound(l Limits, conns, flood int) int64 {
	streams := int64(conns*(l.StreamsPerConnection+streamHeadroom) + flood)
	names := int64(conns * l.NamesPerConnection)
	return streams*64<<10 + names*3<<9 + int64(conns+flood)*128<<10
}

// A client that opens streams, names, made-up types, requests and
// connections without end, from another process, for a few seconds: the
// server's heap and stacks stay under heapBound, and once it leaves, the
// server is back to its goroutines and watches from before.
func TestHostileClientKeepsMemoryBounded(t *testing.T) {
	if os.Getenv("RINGXDS_HOSTILE_ADDR") != "" {
		t.Skip("this process is the hostile client")
	}
	lim := hostileLimits
	measureOnly := os.Getenv("RINGXDS_HOSTILE_NOLIMITS") != ""
	if measureOnly {
		lim = Limits{} // the figures before the limits; nothing asserted
	}
	ls := startLimited(t, lim)
	good := adsStream(t, ls.dial(t), "good", resource.ClusterType)
	recvType(t, good, resource.ClusterType)

	base, baseG, baseW := heapAndStacks(), runtime.NumGoroutine(), ls.s.NumWatches()
	ctx, cancel := context.WithTimeout(context.Background(), hostileFor+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHostileClientProcess$")
	cmd.Env = append(os.Environ(), "RINGXDS_HOSTILE_ADDR="+ls.addr, "RINGXDS_HOSTILE_FOR="+hostileFor.String())
	out := &syncWriter{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peak int64
	var peakStreams int
	for waiting := true; waiting; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("hostile client: %v\n%s", err, out.String())
			}
			waiting = false
		case <-time.After(250 * time.Millisecond):
			peak = max(peak, heapAndStacks()-base)
			peakStreams = max(peakStreams, len(ls.s.Clients()))
		}
	}
	bound := heapBound(lim, hostileConns, int(hostileFor.Seconds()*lim.ConnectionsPerSecond)+lim.ConnectionBurst)
	hits := map[string]float64{}
	for _, name := range limitNames {
		hits[name] = ls.hits(name)
	}
	t.Logf("heap+stacks growth peak %.1f MiB (bound %.1f MiB), streams registered peak %d, goroutines %d, limit hits %v; hostile: %s",
		float64(peak)/(1<<20), float64(bound)/(1<<20), peakStreams, runtime.NumGoroutine(), hits, out.String())
	if measureOnly {
		return
	}
	if peak > bound {
		t.Errorf("heap and stacks grew %d bytes under the hostile client, bound %d", peak, bound)
	}
	for _, name := range []string{LimitStreamsPerConnection, LimitNamesPerConnection, LimitRequestRate, LimitUnknownType, LimitConnectionRate} {
		if hits[name] == 0 {
			t.Errorf("the hostile client never hit %s", name)
		}
	}
	wantServed(t, good, resource.EndpointType, "products")
	waitFor(t, "the server to let go of the hostile client", func() bool {
		return runtime.NumGoroutine() <= baseG+5 && ls.s.NumWatches() <= baseW+1
	}, func() string {
		return fmt.Sprintf("goroutines %d (before %d), watches %d (before %d)", runtime.NumGoroutine(), baseG, ls.s.NumWatches(), baseW)
	})
}

func heapAndStacks() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc + ms.StackInuse)
}

type syncWriter struct {
	mu sync.Mutex
	b  []byte
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	return len(p), nil
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}

// TestHostileClientProcess is the hostile client, run by the test above
// in a process of its own.
func TestHostileClientProcess(t *testing.T) {
	addr := os.Getenv("RINGXDS_HOSTILE_ADDR")
	if addr == "" {
		t.Skip("run by TestHostileClientKeepsMemoryBounded")
	}
	d, err := time.ParseDuration(os.Getenv("RINGXDS_HOSTILE_FOR"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	count := func(k string) { mu.Lock(); counts[k]++; mu.Unlock() }
	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Error(err)
			return nil
		}
		return cc
	}
	// The connections to fill are made before the flood starts: were they
	// to race it for the connection rate's tokens, they could be refused
	// for the whole run and never reach the per-connection limits.
	fillers := make([]*grpc.ClientConn, hostileConns)
	for c := range fillers {
		if fillers[c] = dial(); fillers[c] == nil {
			return
		}
		defer fillers[c].Close()
		fillers[c].Connect()
	}
	for _, cc := range fillers {
		waitReady(ctx, cc)
	}
	for c, cc := range fillers {
		wg.Go(func() {
			ads := discovery.NewAggregatedDiscoveryServiceClient(cc)
			for i := 0; ctx.Err() == nil; i++ {
				st, err := ads.StreamAggregatedResources(ctx)
				if err != nil {
					continue
				}
				count("streams")
				req := &discovery.DiscoveryRequest{Node: testNode(fmt.Sprintf("hostile-%d-%d", c, i)), TypeUrl: resource.EndpointType}
				switch i % 8 {
				case 0: // names without end
					req.ResourceNames = names(fmt.Sprintf("made-up-%d-%d", c, i), 500)
				case 2: // made-up types
					req.TypeUrl = "type.googleapis.com/made.up.T" + strconv.Itoa(i)
				case 3: // requests without end, below
				default: // streams without end
					req.TypeUrl = resource.ClusterType
				}
				if err := st.Send(req); err != nil {
					continue
				}
				if i%8 == 3 {
					for j := 0; j < 500 && st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{strconv.Itoa(j)}}) == nil; j++ {
					}
				}
				go func() {
					for {
						if _, err := st.Recv(); err != nil {
							count("ended")
							return
						}
					}
				}()
			}
		})
	}
	flood := 10
	if os.Getenv("RINGXDS_HOSTILE_NOFLOOD") != "" {
		flood = 0
	}
	for range flood { // connections without end, ten at a time
		wg.Go(func() {
			var held []*grpc.ClientConn
			defer func() {
				for _, cc := range held {
					_ = cc.Close()
				}
			}()
			for ctx.Err() == nil {
				cc := dial()
				if cc == nil {
					return
				}
				held = append(held, cc)
				count("connections")
				st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
				if err == nil && st.Send(&discovery.DiscoveryRequest{Node: testNode("flood"), TypeUrl: resource.ClusterType}) == nil {
					if _, err := st.Recv(); err != nil {
						count("connections refused")
					}
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("hostile client:", counts)
}

// waitReady waits until cc is ready, or ctx ends.
func waitReady(ctx context.Context, cc *grpc.ClientConn) {
	for st := cc.GetState(); st != connectivity.Ready; st = cc.GetState() {
		if !cc.WaitForStateChange(ctx, st) {
			return
		}
	}
}
