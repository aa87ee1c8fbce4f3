package e2e_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/testcp"
)

// TestFadeDepartureMidFadeGRPCAgrees scales 8 backends to 12 and, partway
// through the fade, removes one old and one fading backend. At every step
// from then to the end, grpc-go's own xDS client must route 1000 keys where
// /debug/pick says; apart from the keys the removed backends held, no key
// moves between old backends and none goes back from a new backend to an
// old one: the plan replays the departures instead of taking entries back.
func TestFadeDepartureMidFadeGRPCAgrees(t *testing.T) {
	backends, clk, cp, route := startBatch(t, 240*time.Second)

	const keys = 1000
	before := sweepAgreed(t, cp, keys, route, "before the scale-up")
	start := scaleUpBatch(t, cp, backends)
	curve := fadein.Curve{Duration: 6 * time.Second, Exponent: 0.5}
	stepAt := func(m int) time.Time {
		return fadein.StepTime(start).Add(time.Duration(m)*time.Second + 500*time.Millisecond)
	}
	holdAt := func(m int) {
		t.Helper()
		at := stepAt(m)
		clk.Set(at)
		share := curve.Share(fadein.StepTime(at).Sub(start))
		testcp.WaitFor(t, 5*time.Second, "the server to build the held step", func() bool {
			st := cp.Server.Current().Fading["products"]
			if share >= 1 {
				return len(st) == 0
			}
			return len(st) > 0 && st[0].Share == share
		})
	}
	holdAt(2)
	mid := sweepAgreed(t, cp, keys, route, "mid-fade")
	newSet := map[string]bool{}
	for _, be := range backends[8:] {
		newSet[be.Addr] = true
	}
	isNew := func(be string) bool { return newSet[be] }
	newOnly(t, "mid-fade", before, mid, isNew)

	// One old and one fading backend leave.
	goneOld, goneNew := backends[3].Addr, backends[10].Addr
	stay := append(append([]*testcp.Backend{}, backends[:3]...), backends[4:10]...)
	stay = append(stay, backends[11])
	testcp.WriteFile(t, cp.File, batchYAMLKeys(backends, stay))
	testcp.WaitFor(t, 5*time.Second, "the departures to be published", func() bool {
		return len(cp.Server.Current().Fading["products"]) == 3
	})
	// The source recorded both, and the plan replays them.
	if notes := cp.Server.Current().Notes["products"]; !slices.ContainsFunc(notes, func(n string) bool {
		return strings.Contains(n, "2 endpoint(s) left during the fade")
	}) {
		t.Fatalf("no departure note on /debug/snapshot: %q", notes)
	}
	// Their keys move, to whichever backend follows on the ring.
	without := func(m map[string]string, from map[string]string) map[string]string {
		out := maps.Clone(m)
		for key, be := range from {
			if be == goneOld || be == goneNew {
				delete(out, key)
			}
		}
		return out
	}
	prev := mid
	for m := 2; m <= 7; m++ {
		holdAt(m) // the fade is over at m = 7
		now := sweepAgreed(t, cp, keys, route, "after the departures")
		for _, be := range now {
			if be == goneOld || be == goneNew {
				t.Fatalf("step %d: a key still routes to removed backend %s", m, be)
			}
		}
		newOnly(t, "after the departures", without(prev, mid), without(now, mid), isNew)
		prev = now
	}
	newOnly(t, "over the fade", without(before, mid), without(prev, mid), isNew)
}
