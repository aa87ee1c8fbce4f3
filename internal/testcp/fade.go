package testcp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/ringxds/ringxds/internal/fadein"
)

// FadeMetrics are docs/fade-in.md's measures of one scale-up, taken from
// the owners a real client routed keys to: before the scale-up, in every
// round of the fade, and once it agrees with /debug/pick after it.
type FadeMetrics struct {
	// Precision is the share, in percent, of the (key, new endpoint) pairs
	// seen during the fade where that endpoint owns the key afterwards.
	Precision float64
	// Pairs is the number of such pairs.
	Pairs int
	// OldOld is the key moves between two old endpoints, per 100 keys.
	OldOld float64
	// Flaps is the moves from a new endpoint back to an old one, per key.
	Flaps float64
	// Moved is all owner changes per 100 keys; Ideal the keys the
	// scale-up must move, per 100 keys.
	Moved, Ideal float64
	// Rounds is the number of sweeps of every key during the fade.
	Rounds int
	// OffRamp counts, over sampled keys in rounds mid-fade, the keys the
	// client sent elsewhere than the weight ramp (/debug/pick for grpc-go
	// without clientlib/grpcbalancer) did at that moment; OffRampOf is how
	// many were sampled.
	OffRamp, OffRampOf int
	// OffPick counts, over keys sampled mid-fade one at a time, the keys
	// the client sent elsewhere than /debug/pick said for the
	// implementation BatchFade was given, asked in the same fade step;
	// OffPickOf is how many were sampled.
	OffPick, OffPickOf int
}

func (m FadeMetrics) String() string {
	return fmt.Sprintf("precision %.2f%% (%d pairs), old-old %.3f per 100 keys, flaps %.4f per key, moved %.2f%% (ideal %.2f%%), %d rounds; %d/%d sampled keys off the weight ramp, %d/%d off /debug/pick",
		m.Precision, m.Pairs, m.OldOld, m.Flaps, m.Moved, m.Ideal, m.Rounds, m.OffRamp, m.OffRampOf, m.OffPick, m.OffPickOf)
}

// BatchFade runs a batch scale-up of a ring_hash cluster from old to
// old+add backends (fade_in over fade, exponent 2.5, fixed hash keys)
// through grpc-go's own xDS client, on the real clock, and measures it
// over keys keys. Which ring_hash the client runs depends on the test
// binary: with clientlib/grpcbalancer linked, its ringxds.ring_hash.
// Mid-fade, sampled keys are checked against /debug/pick for the
// implementation pick (OffPick).
func BatchFade(t *testing.T, old, add, keys int, fade time.Duration, pick string) FadeMetrics {
	t.Helper()
	backends := StartBackends(t, old+add)
	yaml := func(n int) string { return batchFadeYAML(backends[:n], fade) }
	cp := Start(t, TempFile(t, yaml(old)))
	client := testgrpc.NewTestServiceClient(DialXDS(t, cp.XDSAddr, "products"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*fade+60*time.Second)
	defer cancel()
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("product-%d", i)
	}
	sweep := func() []string { return sweepKeys(ctx, t, client, names) }
	tally := fadeTally{isNew: map[string]bool{}, seen: map[keyOn]bool{}}
	tally.prev = agreedSweep(t, cp, names, sweep, "before the scale-up")

	WriteFile(t, cp.File, yaml(old+add))
	var start time.Time
	WaitFor(t, 5*time.Second, "the new endpoints to fade in", func() bool {
		if st := cp.Server.Current().Fading["products"]; len(st) == add {
			start = st[0].Start
			return true
		}
		return false
	})
	for _, be := range backends[old:] {
		tally.isNew[be.Addr] = true
	}

	var m FadeMetrics
	for len(cp.Server.Current().Fading["products"]) > 0 {
		if time.Since(start) > 2*fade+10*time.Second {
			t.Fatal("the fade did not end")
		}
		cur := sweep()
		if el := time.Since(start); el > fade/5 && el < fade*9/10 {
			// Sample the weight ramp mid-fade, where it and a per-key
			// cut-over part most.
			for i := 0; i < keys; i += max(keys/100, 1) {
				m.OffRampOf++
				if cur[i] != cp.Pick("products", names[i], "grpc").Endpoint {
					m.OffRamp++
				}
			}
			off, of := offPick(ctx, t, cp, client, names, max(keys/25, 1), pick)
			m.OffPick += off
			m.OffPickOf += of
		}
		tally.step(cur)
		m.Rounds++
		time.Sleep(50 * time.Millisecond)
	}
	final := agreedSweep(t, cp, names, sweep, "after the fade")
	tally.step(final)
	if !slices.ContainsFunc(final, func(be string) bool { return tally.isNew[be] }) {
		t.Fatal("no key moved to a new backend")
	}
	return tally.metrics(m, final, old, add)
}

// agreedSweep sweeps until every key goes where /debug/pick says the
// published ring sends it, outside any fade.
func agreedSweep(t *testing.T, cp *ControlPlane, names []string, sweep func() []string, when string) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, bad := sweep(), 0
		for i, key := range names {
			if got[i] != cp.Pick("products", key, "grpc").Endpoint {
				bad++
			}
		}
		if bad == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d/%d keys disagree with /debug/pick", when, bad, len(names))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// keyOn is a key (by index) seen on a backend.
type keyOn struct {
	key int
	be  string
}

// fadeTally follows every key through a fade, sweep by sweep.
type fadeTally struct {
	isNew map[string]bool
	// seen holds every key seen on a new backend; prev is the last sweep.
	seen                 map[keyOn]bool
	prev                 []string
	moved, oldOld, flaps int
}

func (f *fadeTally) step(cur []string) {
	for i, be := range cur {
		if f.isNew[be] {
			f.seen[keyOn{i, be}] = true
		}
		if be == f.prev[i] {
			continue
		}
		f.moved++
		switch {
		case !f.isNew[f.prev[i]] && !f.isNew[be]:
			f.oldOld++
		case f.isNew[f.prev[i]] && !f.isNew[be]:
			f.flaps++
		}
	}
	f.prev = cur
}

// metrics completes m with the tally over a fade ending in final.
func (f *fadeTally) metrics(m FadeMetrics, final []string, old, add int) FadeMetrics {
	keys := len(final)
	good := 0
	for p := range f.seen {
		if final[p.key] == p.be {
			good++
		}
	}
	m.Pairs = len(f.seen)
	m.Precision = 100 * float64(good) / float64(max(len(f.seen), 1))
	m.OldOld = 100 * float64(f.oldOld) / float64(keys)
	m.Flaps = float64(f.flaps) / float64(keys)
	m.Moved = 100 * float64(f.moved) / float64(keys)
	m.Ideal = 100 * float64(add) / float64(old+add)
	return m
}

// offPick sends every stride-th key once and asks /debug/pick where
// implementation pick sends it, and returns how many of them the client
// sent elsewhere, and how many it compared. A sweep spans steps, while a
// per-key cut-over moves keys at each step's instant: each key is compared
// within one step (fadein.StepTime), and sent again if the step changed.
func offPick(ctx context.Context, t *testing.T, cp *ControlPlane, client testgrpc.TestServiceClient, names []string, stride int, pick string) (off, of int) {
	t.Helper()
	for i := 0; i < len(names); i += stride {
		for try := 0; ; try++ {
			step := fadein.StepTime(time.Now())
			got, err := Call(ctx, client, "x-product-id", names[i])
			if err != nil {
				t.Fatalf("RPC for %s: %v", names[i], err)
			}
			want := cp.Pick("products", names[i], pick).Endpoint
			if !fadein.StepTime(time.Now()).Equal(step) {
				if try < 3 {
					continue
				}
				break // a machine too slow to finish within a step
			}
			of++
			if got != want {
				off++
				t.Logf("key %s: sent to %s, /debug/pick?client=%s says %s", names[i], got, pick, want)
			}
			break
		}
	}
	return off, of
}

// batchFadeYAML is the products cluster of BatchFade over backends, each
// with a fixed hash key so that ports drawn at random do not move keys.
func batchFadeYAML(backends []*Backend, fade time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "clusters:\n  - name: products\n    lb_policy: ring_hash\n    hash_header: x-product-id\n    fade_in: {duration: %s, exponent: 2.5}\n    endpoints:\n", fade)
	for i, be := range backends {
		host, port, _ := strings.Cut(be.Addr, ":")
		fmt.Fprintf(&b, "      - {address: %s, port: %s, hash_key: backend-%03d}\n", host, port, i)
	}
	return b.String()
}

// sweepKeys routes every key once through client, 16 at a time, and
// returns the backend each reached.
func sweepKeys(ctx context.Context, t *testing.T, client testgrpc.TestServiceClient, names []string) []string {
	out := make([]string, len(names))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	const workers = 16
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(names); i += workers {
				be, err := Call(ctx, client, "x-product-id", names[i])
				if err != nil {
					mu.Lock()
					firstErr = fmt.Errorf("RPC for %s: %w", names[i], err)
					mu.Unlock()
					return
				}
				out[i] = be
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	return out
}
