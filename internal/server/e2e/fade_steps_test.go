package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/testcp"
)

// TestFadeGRPCAgreesAtEveryStep holds each step of a fade (10 -> 11), then
// a removal with no fade under way, then a second fade (10 -> 13), and at
// every step checks that grpc-go's own xDS client routes 1000 keys where
// /debug/pick says, and that no key moves between old backends or back to
// an old one.
func TestFadeGRPCAgreesAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("three phases, a sweep of 1000 keys at every step")
	}
	const fade = "    fade_in: {duration: 5s, exponent: 1}\n"
	backends := testcp.StartBackends(t, 13)
	clk := &clock{}
	yaml := func(bs []*testcp.Backend) string {
		return endpointsYAML("products", "ring_hash", "x-product-id", fade, bs, nil)
	}
	cp := testcp.Start(t, testcp.TempFile(t, yaml(backends[:10])), testcp.WithClock(clk.Now))
	client := dialXDS(t, cp.XDSAddr, "products")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	route := func(key string) (string, error) { return testcp.Call(ctx, client, "x-product-id", key) }
	const keys = 1000
	prev := sweepAgreed(t, cp, keys, route, "before")

	phase := func(name string, bs []*testcp.Backend, newOnes []*testcp.Backend) {
		isNew := func(be string) bool {
			for _, b := range newOnes {
				if b.Addr == be {
					return true
				}
			}
			return false
		}
		clk.Set(time.Time{})
		testcp.WriteFile(t, cp.File, yaml(bs))
		if len(newOnes) == 0 {
			testcp.WaitFor(t, 5*time.Second, name, func() bool {
				c, ok := cp.Server.Current().State.Cluster("products")
				return ok && len(c.Endpoints) == len(bs)
			})
			prev = sweepAgreed(t, cp, keys, route, name)
			return
		}
		var start time.Time
		testcp.WaitFor(t, 5*time.Second, name+": the fade to start", func() bool {
			if st := cp.Server.Current().Fading["products"]; len(st) == len(newOnes) {
				start = st[0].Start
				return true
			}
			return false
		})
		for step := 1; step <= 6; step++ {
			clk.Set(start.Add(time.Duration(step)*time.Second + 500*time.Millisecond))
			testcp.WaitFor(t, 5*time.Second, fmt.Sprintf("%s: step %d", name, step), func() bool {
				st := cp.Server.Current().Fading["products"]
				return len(st) == 0 || st[0].Share >= (float64(step)-0.5)/5-1e-9
			})
			now := sweepAgreed(t, cp, keys, route, fmt.Sprintf("%s, step %d", name, step))
			newOnly(t, fmt.Sprintf("%s, step %d", name, step), prev, now, isNew)
			prev = now
		}
		// Let the real clock, which the file source dates changes by,
		// pass the held one before letting go of it: time never runs
		// backwards for the server, and the source's fade is over too.
		held := start.Add(6500 * time.Millisecond)
		for time.Now().Before(held) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	phase("fade 10 -> 11", backends[:11], backends[10:11])
	phase("removal 11 -> 10", append(backends[:9:9], backends[10]), nil)
	phase("fade 10 -> 13", append(append(backends[:9:9], backends[10]), backends[9], backends[11], backends[12]), []*testcp.Backend{backends[9], backends[11], backends[12]})
}
