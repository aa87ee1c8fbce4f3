package clientlib_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringxds/ringxds/clientlib"
	"github.com/ringxds/ringxds/internal/testcp"
)

var errBackend = errors.New("backend failed")

// keyOwnedBy finds a key whose owner is addr.
func keyOwnedBy(t *testing.T, b *clientlib.Balancer, addr string) string {
	t.Helper()
	for i := range 100000 {
		k := fmt.Sprintf("key-%d", i)
		if ep, _ := b.Pick(k); ep.Addr == addr {
			return k
		}
	}
	t.Fatalf("no key owned by %s", addr)
	return ""
}

// addrCluster is one ring_hash cluster "p" of the given addresses, which
// nothing listens on: the tests decide every call's outcome themselves.
func addrCluster(addrs ...string) string {
	return testcp.ClusterYAML("p", "ring_hash", "x-key", "", addrs, nil)
}

// Only the endpoint's own failures eject it: an error the caller marks as
// its own (a key that does not exist) and gRPC's caller codes are answers.
func TestCallerFaultsDoNotEject(t *testing.T) {
	a, b2, c := "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"
	cp := startControlPlane(t, tempFile(t, addrCluster(a, b2, c)), "")
	b := balancer(t, dial(t, cp.XDSAddr), "p", clientlib.WithoutRetry())
	key := keyOwnedBy(t, b, a)
	notFound := errors.New("404 product not found")
	for _, err := range []error{
		clientlib.CallerFault(notFound),
		fmt.Errorf("lookup: %w", status.Error(codes.NotFound, "no such product")),
		status.Error(codes.InvalidArgument, "bad key"),
	} {
		for range 10 {
			got := b.Do(context.Background(), key, func(context.Context, clientlib.Endpoint) error { return err })
			if !errors.Is(got, err) {
				t.Fatalf("Do returned %v, want the callback's %v", got, err)
			}
		}
		if st := b.Stats(); st.Ejections != 0 || st.Failures != 0 {
			t.Fatalf("after ten %q: %d failures, %d ejections; want none", err, st.Failures, st.Ejections)
		}
	}
	if !errors.Is(clientlib.CallerFault(notFound), notFound) {
		t.Fatal("CallerFault hides the error it marks")
	}
	for range 5 {
		_ = b.Do(context.Background(), key, func(context.Context, clientlib.Endpoint) error {
			return status.Error(codes.Unavailable, "connection refused")
		})
	}
	if st := b.Stats(); st.Ejections != 1 {
		t.Fatalf("five Unavailable: %d ejections, want 1", st.Ejections)
	}
}

// An endpoint that hangs until the caller's deadline has failed, as Envoy
// counts a timeout, when it had the freeze threshold's time to answer. A
// caller that cancels, or whose deadline left the endpoint less time, says
// nothing about the endpoint.
func TestDeadlineCountsAgainstTheEndpoint(t *testing.T) {
	a, b2, c := "127.0.0.1:7011", "127.0.0.1:7012", "127.0.0.1:7013"
	cp := startControlPlane(t, tempFile(t, addrCluster(a, b2, c)), "")
	b := balancer(t, dial(t, cp.XDSAddr), "p", clientlib.WithoutRetry(), clientlib.WithBoundedLoad(false),
		clientlib.WithFreezeAfter(20*time.Millisecond))
	key := keyOwnedBy(t, b, a)
	hang := func(ctx context.Context, _ clientlib.Endpoint) error { <-ctx.Done(); return ctx.Err() }
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(5*time.Millisecond, cancel)
		_ = b.Do(ctx, key, hang)
	}
	for _, budget := range []time.Duration{-time.Second, 5 * time.Millisecond} {
		for range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			_ = b.Do(ctx, key, hang)
			cancel()
		}
	}
	if st := b.Stats(); st.Ejections != 0 || st.Failures != 0 {
		t.Fatalf("cancelled calls and deadlines shorter than the freeze threshold: %d failures, %d ejections; want none", st.Failures, st.Ejections)
	}
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
		_ = b.Do(ctx, key, hang)
		cancel()
	}
	if st := b.Stats(); st.Ejections != 1 || st.Ejected != 1 {
		t.Fatalf("five timed-out calls: %d ejections, %d ejected; want the endpoint ejected", st.Ejections, st.Ejected)
	}
	if ep, _ := b.Pick(key); ep.Addr == a {
		t.Fatal("the hanging endpoint still owns its key")
	}
}

// An endpoint removed from the ring while its call was failing is not
// counted as ejected; later ejections still have their full room.
func TestEjectionCountSurvivesRemoval(t *testing.T) {
	a, b2, c := "127.0.0.1:7021", "127.0.0.1:7022", "127.0.0.1:7023"
	cp := startControlPlane(t, tempFile(t, addrCluster(a, b2, c)), "")
	b := balancer(t, dial(t, cp.XDSAddr), "p", clientlib.WithoutRetry())
	ka, kb := keyOwnedBy(t, b, a), keyOwnedBy(t, b, b2)
	fail := func(context.Context, clientlib.Endpoint) error { return errBackend }
	for range 4 {
		_ = b.Do(context.Background(), ka, fail)
	}
	release, done := make(chan struct{}), make(chan error)
	go func() {
		done <- b.Do(context.Background(), ka, func(context.Context, clientlib.Endpoint) error { <-release; return errBackend })
	}()
	waitFor(t, 5*time.Second, "the fifth call in flight", func() bool { return b.Stats().InFlight == 1 })
	writeFile(t, cp.File, addrCluster(b2, c))
	waitFor(t, 5*time.Second, "the endpoint removed", func() bool { return len(b.Endpoints()) == 2 })
	close(release)
	<-done
	if st := b.Stats(); st.Ejected != 0 {
		t.Fatalf("the removed endpoint counts as ejected: %+v", st)
	}
	for range 5 {
		_ = b.Do(context.Background(), kb, fail)
	}
	if st := b.Stats(); st.Ejected != 1 {
		t.Fatalf("five failures on a live endpoint: %d ejected, want 1", st.Ejected)
	}
}

// A call waiting for a slot picks its endpoint when it gets one, from the
// ring current then, and a client closed meanwhile ends the wait.
func TestQueuedCallPicksAfterItsWait(t *testing.T) {
	a, b2, c := "127.0.0.1:7031", "127.0.0.1:7032", "127.0.0.1:7033"
	cp := startControlPlane(t, tempFile(t, addrCluster(a, b2, c)), "")
	client := dial(t, cp.XDSAddr)
	b := balancer(t, client, "p", clientlib.WithMaxInFlight(1, 10))
	key := keyOwnedBy(t, b, a)
	release := make(chan struct{})
	go func() {
		_ = b.Do(context.Background(), "other", func(context.Context, clientlib.Endpoint) error { <-release; return nil })
	}()
	waitFor(t, 5*time.Second, "the slot taken", func() bool { return b.Stats().InFlight == 1 })
	picked := make(chan string, 1)
	go func() {
		_ = b.Do(context.Background(), key, func(_ context.Context, ep clientlib.Endpoint) error { picked <- ep.Addr; return nil })
	}()
	waitFor(t, 5*time.Second, "the call queued", func() bool { return b.Stats().Queued == 1 })
	writeFile(t, cp.File, addrCluster(b2, c))
	waitFor(t, 5*time.Second, "the owner removed", func() bool { return len(b.Endpoints()) == 2 })
	close(release)
	if got := <-picked; got == a {
		t.Fatalf("the queued call went to %s, removed while it waited", got)
	}

	hold := make(chan struct{})
	defer close(hold)
	go func() {
		_ = b.Do(context.Background(), "other", func(context.Context, clientlib.Endpoint) error { <-hold; return nil })
	}()
	waitFor(t, 5*time.Second, "the slot taken again", func() bool { return b.Stats().InFlight == 1 })
	ran := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- b.Do(context.Background(), key, func(context.Context, clientlib.Endpoint) error { ran <- struct{}{}; return nil })
	}()
	waitFor(t, 5*time.Second, "the call queued again", func() bool { return b.Stats().Queued == 1 })
	go func() { _ = client.Close() }()
	select {
	case err := <-done:
		if !errors.Is(err, clientlib.ErrClosed) {
			t.Fatalf("queued call after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the queued call is still waiting after Close")
	}
	if len(ran) != 0 {
		t.Fatal("the queued call ran after Close")
	}
}

// Each Balancer call hands out its own handle: closing one, even twice,
// leaves the others working, and the last one closed ends the cluster.
func TestHandlesCloseIndependently(t *testing.T) {
	cp := startControlPlane(t, tempFile(t, addrCluster("127.0.0.1:7041", "127.0.0.1:7042")), "")
	c := dial(t, cp.XDSAddr)
	first, second := balancer(t, c, "p"), balancer(t, c, "p")
	_ = first.Close()
	_ = first.Close()
	if _, err := first.Pick("k"); !errors.Is(err, clientlib.ErrClosed) {
		t.Fatalf("Pick on a closed handle: %v, want ErrClosed", err)
	}
	if _, err := second.Pick("k"); err != nil {
		t.Fatalf("another holder's handle after the first closed twice: %v", err)
	}
	_ = second.Close()
	if _, err := second.Pick("k"); !errors.Is(err, clientlib.ErrClosed) {
		t.Fatalf("Pick after the last handle closed: %v, want ErrClosed", err)
	}
	third := balancer(t, c, "p")
	if _, err := third.Pick("k"); err != nil {
		t.Fatalf("a new handle after all were closed: %v", err)
	}
}
