package server

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// flakyListener fails its first Accept with a temporary error, as a
// listener out of file descriptors does (EMFILE: net.OpError.Temporary()
// is true), then accepts as usual.
type flakyListener struct {
	net.Listener
	once sync.Once
}

func (f *flakyListener) Accept() (net.Conn, error) {
	var fail bool
	f.once.Do(func() { fail = true })
	if fail {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: f.Listener.Addr(), Err: syscall.EMFILE}
	}
	return f.Listener.Accept()
}

// serveOn serves s on listen(l) and reports whether a client gets a
// response within 3 s.
func servedAfterTemporaryError(t *testing.T, lim Limits) error {
	s := New(t.Context(), Options{Limits: &lim})
	g, err := NewGRPCServer(GRPCOptions{ServerOptions: s.GRPCServerOptions()})
	if err != nil {
		t.Fatal(err)
	}
	s.Register(g)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(s.Listen(&flakyListener{Listener: inner})) }()
	defer g.Stop()
	cc, err := grpc.NewClient(inner.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: testNode("a"), TypeUrl: resource.ClusterType}); err != nil {
		return err
	}
	_, err = st.Recv()
	return err
}

// gRPC's Serve retries an Accept that fails with a temporary error (EMFILE
// in a reconnect storm), so the rate listener must go on accepting after
// one: an accept loop that ended on the first error of any kind left every
// later Accept blocked for ever, the server taking no connection while
// Serve kept running and the probes said ready.
func TestTemporaryAcceptErrorKeepsServing(t *testing.T) {
	t.Run("without the rate limit", func(t *testing.T) {
		if err := servedAfterTemporaryError(t, noLimits()); err != nil {
			t.Fatalf("not served after a temporary accept error: %v", err)
		}
	})
	t.Run("with the rate limit", func(t *testing.T) {
		lim := noLimits()
		lim.ConnectionsPerSecond, lim.ConnectionBurst = 500, 1000
		if err := servedAfterTemporaryError(t, lim); err != nil {
			t.Fatalf("not served after a temporary accept error: %v", err)
		}
	})
}

// Stopping gRPC mid-storm leaves no goroutine of the rate listener behind
// and closes the connections waiting for a token.
func TestStopMidStormLeavesNothing(t *testing.T) {
	lim := noLimits()
	lim.ConnectionsPerSecond, lim.ConnectionBurst = 20, 1
	s := New(t.Context(), Options{Limits: &lim})
	g, err := NewGRPCServer(GRPCOptions{ServerOptions: s.GRPCServerOptions()})
	if err != nil {
		t.Fatal(err)
	}
	s.Register(g)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(s.Listen(inner)) }()
	var clients []net.Conn
	for range 40 { // 1 now, ~19 waiting, the rest refused
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// An HTTP/2 client preface and SETTINGS, so that gRPC's handshake
		// does not hold Stop for its 120 s connection timeout.
		if _, err := c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	time.Sleep(150 * time.Millisecond)
	g.Stop()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Serve did not return after Stop")
	}
	until := time.Now().Add(3 * time.Second)
	for i, c := range clients {
		_ = c.SetReadDeadline(until)
		buf := make([]byte, 4096)
		for {
			_, err := c.Read(buf)
			if err == nil {
				continue
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Errorf("client %d still open 3 s after Stop", i)
			}
			break
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		n := strings.Count(stacks, "(*rateListener)")
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rate listener frames left after Stop:\n%s", n, stacks)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var _ = fmt.Sprint

// The same at the listener: after Accept has returned a temporary error,
// the next Accept returns the connection waiting in the kernel's queue.
func TestAcceptAfterTemporaryError(t *testing.T) {
	lim := noLimits()
	lim.ConnectionsPerSecond, lim.ConnectionBurst = 500, 1000
	s := New(t.Context(), Options{Limits: &lim})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := s.Listen(&flakyListener{Listener: inner})
	defer l.Close()
	if _, err := l.Accept(); err == nil {
		t.Fatal("want the temporary error first")
	} else if ne, ok := err.(interface{ Temporary() bool }); !ok || !ne.Temporary() {
		t.Fatalf("Accept error %v is not temporary", err)
	}
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(chan error, 1)
	go func() {
		sc, err := l.Accept()
		if err == nil {
			sc.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Accept after a temporary error: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Accept after a temporary error blocked for 2 s with a connection queued")
	}
}
