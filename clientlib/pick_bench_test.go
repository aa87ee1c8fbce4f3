package clientlib

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// benchRing builds a dialect's ring over n endpoints on 10.0.0.0/16.
func benchRing(tb testing.TB, policy string, n int) (ringhash.Ring, []Endpoint) {
	tb.Helper()
	eps := make([]Endpoint, n)
	keys := make([]ringhash.Endpoint, n)
	for i := range eps {
		addr := fmt.Sprintf("10.0.%d.%d:8080", i/256, i%256)
		eps[i] = Endpoint{Addr: addr, meta: &endpointMeta{scheme: "http", weight: 1}}
		keys[i] = ringhash.Endpoint{Key: addr, Weight: 1}
	}
	var r ringhash.Ring
	var err error
	switch policy {
	case ringhash.PolicyRingHash:
		r, err = ringhash.NewRingHash(keys, ringhash.RingHashOptions{MinRingSize: 4096, MaxRingSize: 4096})
	case ringhash.PolicyMaglev:
		r, err = ringhash.NewMaglev(keys, 65537)
	case ringhash.PolicySkipper:
		for i := range keys {
			keys[i].Key = "http://" + keys[i].Key
		}
		r, err = ringhash.NewSkipper(keys)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return r, eps
}

func benchBalancer(tb testing.TB, policy string, n int, opts ...BalancerOption) (*Balancer, ringhash.Ring) {
	tb.Helper()
	o := defaultBalancerOptions()
	for _, opt := range opts {
		opt(&o)
	}
	b := newBalancer("bench", o, zap.NewNop())
	r, eps := benchRing(tb, policy, n)
	b.setState(policy, eps, r, nil)
	return &Balancer{balancer: b}, r
}

var benchKeys = func() []string {
	k := make([]string, 1024)
	for i := range k {
		k[i] = "product-" + strconv.Itoa(i*7919)
	}
	return k
}()

var sink int

// BenchmarkPick compares Balancer.Pick with the bare ring lookup it wraps,
// per dialect, bounded load off and on. The bare lookup is what a caller of
// internal/ringhash does to get an address: hash the key, look it up, and
// index its own endpoint slice with the result (Ring returns indices).
func BenchmarkPick(b *testing.B) {
	for _, policy := range []string{ringhash.PolicyRingHash, ringhash.PolicyMaglev, ringhash.PolicySkipper} {
		bal, ring := benchBalancer(b, policy, 50)
		pure, _ := benchBalancer(b, policy, 50, WithBoundedLoad(false))
		eps := pure.Endpoints()
		b.Run(policy+"/bare-ring", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				sink += len(eps[ring.Pick(ringhash.HashKey(benchKeys[i&1023]))].Addr)
			}
		})
		b.Run(policy+"/bounded-off", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				ep, _ := pure.Pick(benchKeys[i&1023])
				sink += len(ep.Addr)
			}
		})
		b.Run(policy+"/bounded-on", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				ep, _ := bal.Pick(benchKeys[i&1023])
				sink += len(ep.Addr)
			}
		})
		// Failure-aware picking: one endpoint of the 50 ejected, so every
		// pick checks ejection and keys owned by it walk past it.
		for _, bounded := range []bool{false, true} {
			ej, _ := benchBalancer(b, policy, 50, WithBoundedLoad(bounded))
			ejectOne(ej)
			b.Run(fmt.Sprintf("%s/bounded-%v-one-ejected", policy, map[bool]string{false: "off", true: "on"}[bounded]), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					ep, _ := ej.Pick(benchKeys[i&1023])
					sink += len(ep.Addr)
				}
			})
		}
	}
}

// ejectOne ejects the balancer's first endpoint, as consecutive failures
// would.
func ejectOne(b *Balancer) {
	s := b.state.Load()
	s.stats[0].failures.Store(int32(b.opts.ejectAfter))
	b.eject(s.stats[0], s.eps[0].Addr, time.Now().UnixNano())
}

// BenchmarkPickParallel runs Pick on every P; with -cpu 1,2 ns/op should
// halve from 1 to 2 cores: picks only read shared state.
func BenchmarkPickParallel(b *testing.B) {
	for _, bounded := range []bool{false, true} {
		bal, _ := benchBalancer(b, ringhash.PolicySkipper, 50, WithBoundedLoad(bounded))
		b.Run(fmt.Sprintf("bounded=%v", bounded), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i, n := 0, 0
				for pb.Next() {
					ep, _ := bal.Pick(benchKeys[i&1023])
					n += len(ep.Addr)
					i++
				}
				_ = n
			})
		})
	}
}

// BenchmarkDo is the tracked call path around an empty call.
func BenchmarkDo(b *testing.B) {
	bal, _ := benchBalancer(b, ringhash.PolicySkipper, 50)
	ctx := context.Background()
	fn := func(context.Context, Endpoint) error { return nil }
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = bal.Do(ctx, benchKeys[i&1023], fn)
	}
}

// BenchmarkDoError is Do's failure path, which a failing endpoint takes at
// full rate: a plain error, a gRPC Unavailable and a caller's NotFound.
func BenchmarkDoError(b *testing.B) {
	for _, c := range failureCases {
		b.Run(c.name, func(b *testing.B) {
			bal, _ := benchBalancer(b, ringhash.PolicySkipper, 50, WithoutRetry(), WithEjection(0, time.Second, time.Second, 0.5))
			ctx := context.Background()
			fn := func(context.Context, Endpoint) error { return c.err }
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				_ = bal.Do(ctx, benchKeys[i&1023], fn)
			}
		})
	}
}

var failureCases = []struct {
	name string
	err  error
}{
	{"plain", errors.New("connection reset")},
	{"grpc-unavailable", fmt.Errorf("get: %w", status.Error(codes.Unavailable, "down"))},
	{"grpc-not-found", status.Error(codes.NotFound, "no such key")},
	{"caller-fault", CallerFault(errors.New("404"))},
}

// A failed call must not allocate either: classifying its error is on the
// path of every call to a failing endpoint.
func TestFailedDoDoesNotAllocate(t *testing.T) {
	for _, c := range failureCases {
		bal, _ := benchBalancer(t, ringhash.PolicySkipper, 20, WithoutRetry(), WithEjection(0, time.Second, time.Second, 0.5))
		fn := func(context.Context, Endpoint) error { return c.err }
		i := 0
		if a := testing.AllocsPerRun(1000, func() {
			_ = bal.Do(context.Background(), benchKeys[i&1023], fn)
			i++
		}); a != 0 {
			t.Errorf("%s: %v allocs per failed Do", c.name, a)
		}
	}
}

// Picks must not allocate, in any dialect, bounded load on or off, also
// when the walk runs because owners are over their bound.
func TestPickDoesNotAllocate(t *testing.T) {
	for _, policy := range []string{ringhash.PolicyRingHash, ringhash.PolicyMaglev, ringhash.PolicySkipper} {
		for _, bounded := range []bool{false, true} {
			bal, _ := benchBalancer(t, policy, 20, WithBoundedLoad(bounded))
			// Load every endpoint but one so bounded picks walk.
			for i, st := range bal.state.Load().stats {
				if i > 0 {
					st.inflight.Store(100)
				}
			}
			bal.load.inflight.Store(1900)
			i := 0
			if a := testing.AllocsPerRun(1000, func() {
				ep, _ := bal.Pick(benchKeys[i&1023])
				sink += len(ep.Addr)
				i++
			}); a != 0 {
				t.Errorf("%s bounded=%v: %v allocs per Pick", policy, bounded, a)
			}
		}
	}
}

// Endpoint counters must not share cache lines.
func TestEndpointStatsArePadded(t *testing.T) {
	// 320 is a Go size class: its objects sit at multiples of 320 from a
	// page-aligned span start, so on 64-byte boundaries.
	if s := unsafe.Sizeof(endpointStats{}); s != 320 {
		t.Fatalf("endpointStats is %d bytes, want 320", s)
	}
	if o := unsafe.Offsetof(endpointStats{}.lastProgress); o != 64 {
		t.Fatalf("the completion-written fields start at byte %d, want 64", o)
	}
	if s := unsafe.Sizeof(loadTracker{}); s != 256 {
		t.Fatalf("loadTracker is %d bytes, want 4 cache lines", s)
	}
}
