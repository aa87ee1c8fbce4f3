package snapshot

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/ringhash"
)

var fadeT0 = time.Date(2026, 6, 1, 12, 0, 0, 300_000_000, time.UTC)

// fadeCluster has n established endpoints plus the given fading ones.
func fadeCluster(policy model.Policy, n int, fading map[int]time.Time, extra int) model.Cluster {
	c := model.Cluster{Name: "products", Policy: policy, FadeIn: &model.FadeIn{Duration: 6 * time.Second, Exponent: 2.5}}
	for i := 0; i < n+extra; i++ {
		ep := model.Endpoint{Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 8080}
		ep.FirstSeen = fading[i]
		c.Endpoints = append(c.Endpoints, ep)
	}
	return c
}

func fadeKeys(n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = ringhash.HashKey(fmt.Sprintf("product-%d", i))
	}
	return hs
}

// fadeOwners builds the snapshot of c at now, decodes it as Envoy, grpc-go
// and the client library see it, checks the three rings give every key the
// same owner, and returns the owners.
func fadeOwners(t *testing.T, c model.Cluster, now time.Time, keys []uint64) ([]string, *Snapshot) {
	t.Helper()
	snap, err := Build(state(t, c), now)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	var ref []string
	for _, kind := range []Kind{KindEnvoy, KindGRPC, KindClientlib} {
		d := decode(t, snap, kind, c.Name)
		if d.Policy != ringhash.PolicyRingHash {
			continue
		}
		owners := make([]string, len(keys))
		for i, h := range keys {
			owners[i] = d.Endpoints[d.Ring.Pick(h)].Addr
		}
		if ref == nil {
			ref = owners
			continue
		}
		for i := range keys {
			if owners[i] != ref[i] {
				t.Fatalf("at %v: %s picks %s for key %d, envoy %s", now, kind, owners[i], i, ref[i])
			}
		}
	}
	return ref, snap
}

// fadeChecker accumulates the fade-in properties over a sequence of steps.
//
// A key on a fading endpoint that does not own it at the end is a "hop":
// with several endpoints fading at once, a key that falls through a sibling's
// missing entry lands on the next fading entry, and moves on to the sibling
// when that entry appears. Hops never go back to an old endpoint; they are
// counted, and forbidden when one endpoint fades alone (hopsAllowed false).
type fadeChecker struct {
	t           *testing.T
	old         map[string]bool
	final       []string
	prev        []string
	moved       int
	hops        map[int]bool
	hopsAllowed bool
}

func (f *fadeChecker) step(what string, owners []string) {
	f.t.Helper()
	if f.hops == nil {
		f.hops = map[int]bool{}
	}
	for i, o := range owners {
		if !f.old[o] && o != f.final[i] {
			if !f.hopsAllowed || f.old[f.final[i]] {
				f.t.Fatalf("%s: key %d on fading %s, which will not own it (final owner %s)", what, i, o, f.final[i])
			}
			f.hops[i] = true
		}
		if f.prev != nil && f.prev[i] != o {
			switch p := f.prev[i]; {
			case f.old[p] && f.old[o]:
				f.t.Fatalf("%s: key %d moved between old endpoints %s -> %s", what, i, p, o)
			case !f.old[p] && f.old[o]:
				f.t.Fatalf("%s: key %d flapped back %s -> %s", what, i, p, o)
			}
			f.moved++
		}
	}
	f.prev = owners
}

// TestFadeRampIsIdenticalEverywhereAndMovesOnlyOldToNew walks scale-ups
// step by step from the established ring before the event to the one after
// the fade: at every step Envoy, grpc-go and ringxds decode the same ring,
// each endpoint holds exactly its planned entries, keys only move from old
// endpoints to new ones, only to their final owner, and never back.
func TestFadeRampIsIdenticalEverywhereAndMovesOnlyOldToNew(t *testing.T) {
	keys := fadeKeys(4000)
	for _, tc := range []struct {
		policy model.Policy
		n, add int
	}{{model.PolicyRingHash, 10, 1}, {model.PolicyRingHash, 10, 3}, {model.PolicyRingHash, 100, 10}, {model.PolicySkipper, 20, 5}} {
		t.Run(fmt.Sprintf("%s/%d+%d", tc.policy, tc.n, tc.add), func(t *testing.T) {
			fading := map[int]time.Time{}
			for i := tc.n; i < tc.n+tc.add; i++ {
				fading[i] = fadeT0
			}
			before := fadeCluster(tc.policy, tc.n, nil, 0)
			during := fadeCluster(tc.policy, tc.n, fading, tc.add)
			after := fadeCluster(tc.policy, tc.n+tc.add, nil, 0)

			final, _ := fadeOwners(t, after, fadeT0, keys)
			f := &fadeChecker{t: t, old: map[string]bool{}, final: final, hopsAllowed: tc.add > 1}
			for _, ep := range before.Endpoints {
				f.old[ep.HostPort()] = true
			}
			owners, _ := fadeOwners(t, before, fadeT0, keys)
			f.step("before", owners)
			now := fadeT0
			steps := 0
			for {
				owners, snap := fadeOwners(t, during, now, keys)
				f.step(now.Sub(fadeT0).String(), owners)
				checkEntries(t, snap, during, now)
				steps++
				if snap.NextStep.IsZero() {
					if len(snap.Fading) != 0 {
						t.Fatalf("no next step while %v fade", snap.Fading)
					}
					break
				}
				if d := snap.NextStep.Sub(now); d <= 0 || snap.NextStep.Sub(fadein.StepTime(now)) < fadein.StepInterval || !snap.NextStep.Equal(fadein.StepTime(snap.NextStep)) {
					t.Fatalf("at %v next step %v is not a later grid instant", now, snap.NextStep)
				}
				now = snap.NextStep
			}
			if !now.After(fadeT0.Add(6*time.Second)) || now.After(fadeT0.Add(7*time.Second)) {
				t.Fatalf("fade ended at %v, want the first step after %v", now, fadeT0.Add(6*time.Second))
			}
			f.step("after", final)
			if f.moved == 0 || steps < 3 {
				t.Fatalf("%d keys moved over %d steps", f.moved, steps)
			}
			t.Logf("%d steps, %d moves, %d of %d keys hopped between fading endpoints", steps, f.moved, len(f.hops), len(keys))
		})
	}
}

// checkEntries: each endpoint holds k x weight entries, a fading one
// RampEntries of that, and the fade metadata decodes back to the model.
func checkEntries(t *testing.T, snap *Snapshot, c model.Cluster, now time.Time) {
	t.Helper()
	d := decode(t, snap, KindEnvoy, c.Name)
	counts := map[int]uint64{}
	d.Ring.(ringhash.Drawable).Entries(func(_ uint64, ep int) { counts[ep]++ })
	k, _ := fadein.LayoutEntriesPerWeight(uint64(len(c.Endpoints)), model.DefaultRingSize, c.FadeIn.Capacity)
	curve := fadein.Curve{Duration: c.FadeIn.Duration, Exponent: c.FadeIn.Exponent}
	byAddr := map[string]model.Endpoint{}
	for _, ep := range c.Endpoints {
		byAddr[ep.HostPort()] = ep
	}
	// The published EDS order is the walk order PlanRamp takes.
	ramp := make([]fadein.RampEndpoint, len(d.Endpoints))
	for i, de := range d.Endpoints {
		ramp[i] = fadein.RampEndpoint{Key: de.Addr, Final: k, Start: byAddr[de.Addr].FirstSeen}
	}
	plan, err := fadein.PlanRamp(ramp, curve, ringhash.XXHash, c.MaxRingSize, now)
	if err != nil {
		t.Fatal(err)
	}
	fading := 0
	// One endpoint may run ahead of its own curve, the fading endpoints
	// together never.
	var planned, byCurve uint64
	defer func() {
		if planned > byCurve {
			t.Fatalf("at %v the fading endpoints hold %d entries, more than the curve's %d", now, planned, byCurve)
		}
	}()
	for i, de := range d.Endpoints {
		ep := byAddr[de.Addr]
		want := k
		share := 1.0
		if !ep.FirstSeen.IsZero() {
			share = curve.Share(fadein.StepTime(now).Sub(ep.FirstSeen))
		}
		if share < 1 {
			want = plan.Counts[i]
			planned += want
			byCurve += fadein.RampEntries(k, share)
			fading++
			if !de.FadeStart.Equal(ep.FirstSeen) || de.FadeCurve != curve {
				t.Fatalf("%s: fade metadata %v %+v, want %v %+v", de.Addr, de.FadeStart, de.FadeCurve, ep.FirstSeen, curve)
			}
		} else if !de.FadeStart.IsZero() {
			t.Fatalf("%s: established but publishes fade_start %v", de.Addr, de.FadeStart)
		}
		if counts[i] != want || de.RingEntries != k {
			t.Fatalf("at %v %s: %d entries (final %d), want %d (final %d)", now, de.Addr, counts[i], de.RingEntries, want, k)
		}
	}
	if len(snap.Fading[c.Name]) != fading {
		t.Fatalf("Fading lists %d endpoints, want %d", len(snap.Fading[c.Name]), fading)
	}
	held := map[string]uint64{}
	for i, de := range d.Endpoints {
		held[de.Addr] = counts[i]
	}
	for _, st := range snap.Fading[c.Name] {
		if st.Entries != held[st.Endpoint] || st.FinalEntries != k {
			t.Fatalf("status of %s: %d of %d entries, the ring has %d of %d", st.Endpoint, st.Entries, st.FinalEntries, held[st.Endpoint], k)
		}
	}
}

// TestFadeLayoutChangeIsConfinedToTheFirstStep: 100 -> 150 crosses 128, so
// entries per weight halve (32 -> 16) and the first step re-lays the ring
// out, moving keys between old endpoints once; from then on the fade has
// none of that.
func TestFadeLayoutChangeIsConfinedToTheFirstStep(t *testing.T) {
	keys := fadeKeys(4000)
	fading := map[int]time.Time{}
	for i := 100; i < 150; i++ {
		fading[i] = fadeT0
	}
	before := fadeCluster(model.PolicyRingHash, 100, nil, 0)
	during := fadeCluster(model.PolicyRingHash, 100, fading, 50)
	after := fadeCluster(model.PolicyRingHash, 150, nil, 0)
	final, _ := fadeOwners(t, after, fadeT0, keys)
	first, snap := fadeOwners(t, during, fadeT0, keys)
	prev, _ := fadeOwners(t, before, fadeT0, keys)
	old := map[string]bool{}
	for _, ep := range before.Endpoints {
		old[ep.HostPort()] = true
	}
	oldOld := 0
	for i := range keys {
		if prev[i] != first[i] && old[first[i]] {
			oldOld++
		}
	}
	if oldOld == 0 {
		t.Fatal("the re-layout moved no key between old endpoints; the test would not see one")
	}
	t.Logf("re-layout 32 -> 16 entries per weight moved %d of %d keys between old endpoints", oldOld, len(keys))
	f := &fadeChecker{t: t, old: old, final: final, prev: first, hopsAllowed: true}
	for now := snap.NextStep; !now.IsZero(); {
		owners, s := fadeOwners(t, during, now, keys)
		f.step(now.String(), owners)
		now = s.NextStep
	}
	f.step("after", final)
}

// TestFadeEdgeCases pins the decisions docs/fade-in.md describes.
func TestFadeEdgeCases(t *testing.T) {
	keys := fadeKeys(4000)
	mid := fadeT0.Add(3 * time.Second)
	t.Run("scale down during a fade", func(t *testing.T) {
		// An old endpoint leaves mid-fade: only its keys move; the fading
		// endpoint keeps its entries and keeps growing.
		c := fadeCluster(model.PolicyRingHash, 10, map[int]time.Time{10: fadeT0}, 1)
		before, _ := fadeOwners(t, c, mid, keys)
		gone := c.Endpoints[4].HostPort()
		c.Endpoints = append(c.Endpoints[:4:4], c.Endpoints[5:]...)
		after, snap := fadeOwners(t, c, mid, keys)
		for i := range keys {
			if before[i] != gone && after[i] != before[i] {
				t.Fatalf("key %d moved %s -> %s though its endpoint stayed", i, before[i], after[i])
			}
		}
		checkEntries(t, snap, c, mid)
	})
	t.Run("overlapping fades", func(t *testing.T) {
		// A second endpoint joins while the first fades: the first keeps its
		// ramp, no key moves between old endpoints, each ramps on its own
		// start and the steps stay one grid.
		one := fadeCluster(model.PolicyRingHash, 10, map[int]time.Time{10: fadeT0}, 1)
		two := fadeCluster(model.PolicyRingHash, 10, map[int]time.Time{10: fadeT0, 11: mid}, 2)
		final, _ := fadeOwners(t, fadeCluster(model.PolicyRingHash, 12, nil, 0), mid, keys)
		f := &fadeChecker{t: t, old: map[string]bool{}, final: final, hopsAllowed: true}
		for _, ep := range one.Endpoints[:10] {
			f.old[ep.HostPort()] = true
		}
		prev, _ := fadeOwners(t, one, mid, keys)
		f.prev = prev
		for now := mid; !now.IsZero(); {
			owners, snap := fadeOwners(t, two, now, keys)
			// Keys the first fading endpoint holds may pass on to the second
			// (it owns them at the end), never back to an old one.
			f.final = final
			f.step(now.String(), owners)
			checkEntries(t, snap, two, now)
			now = snap.NextStep
		}
	})
	t.Run("vanish and come back", func(t *testing.T) {
		// A returning endpoint is a new one to the source (new FirstSeen):
		// it fades in again from one entry, its cache being cold.
		back := fadeT0.Add(20 * time.Second)
		c := fadeCluster(model.PolicyRingHash, 10, map[int]time.Time{10: back}, 1)
		_, snap := fadeOwners(t, c, back, keys)
		checkEntries(t, snap, c, back)
		if st := snap.Fading[c.Name]; len(st) != 1 || st[0].Share != 0 {
			t.Fatalf("returning endpoint status %+v, want share 0", st)
		}
	})
	t.Run("server restart mid-fade", func(t *testing.T) {
		// The file source restarts with every endpoint established: the
		// fading endpoint jumps to its final entries. Keys still only move
		// from old endpoints to it, and the ring is the one the fade ends in.
		c := fadeCluster(model.PolicyRingHash, 10, map[int]time.Time{10: fadeT0}, 1)
		mid, _ := fadeOwners(t, c, fadeT0.Add(3*time.Second), keys)
		restarted := fadeCluster(model.PolicyRingHash, 11, nil, 0)
		final, snap := fadeOwners(t, restarted, fadeT0.Add(3*time.Second), keys)
		f := &fadeChecker{t: t, old: map[string]bool{}, final: final, prev: mid}
		for _, ep := range c.Endpoints[:10] {
			f.old[ep.HostPort()] = true
		}
		f.step("restart", final)
		if !snap.NextStep.IsZero() || len(snap.Fading) != 0 {
			t.Fatalf("restarted snapshot still fades: %v %v", snap.NextStep, snap.Fading)
		}
	})
	t.Run("same step same resources", func(t *testing.T) {
		// Replicas building at different instants of one step publish the
		// same versions.
		c := fadeCluster(model.PolicyRingHash, 10, map[int]time.Time{10: fadeT0}, 1)
		a, _ := Build(state(t, c), fadeT0.Add(2100*time.Millisecond))
		b, _ := Build(state(t, c), fadeT0.Add(2650*time.Millisecond))
		for _, typ := range []string{"type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", "type.googleapis.com/envoy.config.cluster.v3.Cluster"} {
			va, _ := Version(a.Kinds[KindEnvoy][typ][c.Name])
			vb, _ := Version(b.Kinds[KindEnvoy][typ][c.Name])
			if va != vb {
				t.Fatalf("%s differs within one step", typ)
			}
		}
	})
}

// TestFadeMaglevKeepsWeightsAndPublishesTiming: Envoy's Maglev is not
// ramped; the timing is published for the client library.
func TestFadeMaglevKeepsWeightsAndPublishesTiming(t *testing.T) {
	c := fadeCluster(model.PolicyMaglev, 10, map[int]time.Time{10: fadeT0}, 1)
	snap, err := Build(state(t, c), fadeT0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	d := decode(t, snap, KindEnvoy, c.Name)
	for _, de := range d.Endpoints {
		if de.Weight != 1 || de.RingEntries != 0 {
			t.Fatalf("%s: weight %d, ring entries %d; want the model weight and no layout", de.Addr, de.Weight, de.RingEntries)
		}
	}
	for _, de := range d.Endpoints {
		if fading := de.Addr == "10.0.0.11:8080"; fading != de.FadeStart.Equal(fadeT0) {
			t.Fatalf("%s publishes fade start %v", de.Addr, de.FadeStart)
		}
	}
	if len(snap.Fading[c.Name]) != 1 || snap.NextStep.IsZero() {
		t.Fatalf("fading %v, next %v", snap.Fading, snap.NextStep)
	}
	assertNotes(t, snap.Notes[c.Name], []string{
		"fade-in: maglev clusters fade in only in the client library: Envoy's Maglev has no slow start, and ramping a Maglev weight moves keys between old endpoints",
		"maglev is published to grpc clients as ring_hash: gRPC NACKs MAGLEV",
	})
}

// TestFadeOffLeavesResourcesAlone: FirstSeen without fade_in changes nothing.
func TestFadeOffLeavesResourcesAlone(t *testing.T) {
	c := fadeCluster(model.PolicyRingHash, 10, map[int]time.Time{10: fadeT0}, 1)
	c.FadeIn = nil
	plain := fadeCluster(model.PolicyRingHash, 11, nil, 0)
	plain.FadeIn = nil
	a, _ := Build(state(t, c), fadeT0)
	b, _ := Build(state(t, plain), fadeT0)
	va, _ := Version(a.Kinds[KindEnvoy]["type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"][c.Name])
	vb, _ := Version(b.Kinds[KindEnvoy]["type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"][c.Name])
	if va != vb || !a.NextStep.IsZero() || len(a.Fading) != 0 {
		t.Fatal("a cluster without fade_in published fade-in changes")
	}
}

// Each fade step publishes its ring size in CDS and in the EDS metadata, so
// a client holding one step's CDS and another step's EDS can tell.
func TestPairConsistentAcrossFadeSteps(t *testing.T) {
	start := epoch
	c := fadeCluster(model.PolicyRingHash, 8, map[int]time.Time{8: start}, 1)
	st := state(t, c)
	early, err := Build(st, start.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	late, err := Build(st, start.Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cds := func(s *Snapshot) *clusterv3.Cluster {
		return s.Kinds[KindGRPC][resourcev3.ClusterType]["products"].(*clusterv3.Cluster)
	}
	cla := func(s *Snapshot) *endpointv3.ClusterLoadAssignment {
		return s.Kinds[KindGRPC][resourcev3.EndpointType]["products"].(*endpointv3.ClusterLoadAssignment)
	}
	if !PairConsistent(cds(early), cla(early)) || !PairConsistent(cds(late), cla(late)) {
		t.Fatal("a step's own CDS and EDS do not pair")
	}
	if PairConsistent(cds(early), cla(late)) || PairConsistent(cds(late), cla(early)) {
		t.Fatal("CDS and EDS of different steps pair")
	}
	plain, err := Build(state(t, model.Cluster{Name: "products", Endpoints: []model.Endpoint{{Address: "10.0.0.1", Port: 80}}}), start)
	if err != nil {
		t.Fatal(err)
	}
	if !PairConsistent(cds(early), cla(plain)) {
		t.Fatal("an assignment without fade layout must always pair")
	}
}

// TestFadeCapacityKeepsOldEndpointsThroughALargeScaleUp: the same 100 -> 150
// with fade_in.capacity 256 is laid out for 256 endpoints from the start,
// so no step, the first included, moves a key between old endpoints, and
// nothing goes back to an old one.
func TestFadeCapacityKeepsOldEndpointsThroughALargeScaleUp(t *testing.T) {
	keys := fadeKeys(4000)
	fading := map[int]time.Time{}
	for i := 100; i < 150; i++ {
		fading[i] = fadeT0
	}
	withCapacity := func(c model.Cluster) model.Cluster {
		c.FadeIn.Capacity = 256
		return c
	}
	before := withCapacity(fadeCluster(model.PolicyRingHash, 100, nil, 0))
	during := withCapacity(fadeCluster(model.PolicyRingHash, 100, fading, 50))
	after := withCapacity(fadeCluster(model.PolicyRingHash, 150, nil, 0))
	final, _ := fadeOwners(t, after, fadeT0, keys)
	prev, _ := fadeOwners(t, before, fadeT0, keys)
	f := &fadeChecker{t: t, old: map[string]bool{}, final: final, prev: prev, hopsAllowed: true}
	for _, ep := range before.Endpoints {
		f.old[ep.HostPort()] = true
	}
	steps := 0
	for now := fadeT0; !now.IsZero(); steps++ {
		owners, snap := fadeOwners(t, during, now, keys)
		f.step(now.Sub(fadeT0).String(), owners)
		checkEntries(t, snap, during, now)
		now = snap.NextStep
	}
	f.step("after", final)
	if f.moved == 0 || steps < 3 {
		t.Fatalf("%d keys moved over %d steps", f.moved, steps)
	}
	t.Logf("%d steps, %d moves, %d of %d keys hopped between fading endpoints", steps, f.moved, len(f.hops), len(keys))
}

// TestFadeDepartureKeepsPublishedEntries replays a staggered scale-up in
// which one fading and one established endpoint leave mid-fade (found by
// fadein's random removal test). Passed on as model.Departed, no endpoint
// that stays ever publishes fewer entries than before; without them, the
// plan redone over the endpoints left takes entries back.
func TestFadeDepartureKeepsPublishedEntries(t *testing.T) {
	t0 := time.Unix(1_780_000_000, 0).UTC()
	const never = time.Duration(-1)
	type spec struct {
		key                 string
		weight              uint32
		start, known, leave time.Duration // never: established / never leaves
	}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	specs := []spec{
		{"m-000", 1, never, 0, never}, {"m-001", 1, never, 0, never}, {"m-002", 2, never, 0, never},
		{"m-003", 3, never, 0, never}, {"m-004", 2, never, 0, never}, {"m-005", 1, never, 0, ms(1471)},
		{"m-006", 1, never, 0, never}, {"m-007", 2, never, 0, never}, {"m-008", 3, never, 0, ms(20177)},
		{"m-009", 1, never, 0, never}, {"m-010", 2, never, 0, never}, {"m-011", 2, never, 0, never},
		{"y-012", 2, ms(1830), ms(2198), ms(5313)}, {"k-013", 2, ms(2493), ms(3475), never},
		{"z-014", 2, ms(6663), ms(7867), never}, {"q-015", 1, ms(1643), ms(3521), never},
		{"f-016", 3, ms(1381), ms(2463), never}, {"v-017", 2, ms(7760), ms(9340), never},
		{"g-018", 2, ms(8271), ms(9606), never}, {"v-019", 1, ms(10641), ms(11194), never},
	}
	clusterAt := func(now time.Time, departures bool) model.Cluster {
		c := model.Cluster{Name: "products", MaxRingSize: 4096,
			FadeIn: &model.FadeIn{Duration: 20 * time.Second, Exponent: 2.5, Capacity: 256}}
		for i, sp := range specs {
			ep := model.Endpoint{Address: fmt.Sprintf("10.0.0.%d", i+1), Port: 8080, Weight: sp.weight, HashKey: sp.key}
			if sp.start != never {
				ep.FirstSeen = t0.Add(sp.start)
			}
			switch {
			case t0.Add(sp.known).After(now):
			case sp.leave != never && !t0.Add(sp.leave).After(now):
				if departures {
					c.Departed = append(c.Departed, model.Departure{Endpoint: ep, Gone: t0.Add(sp.leave)})
				}
			default:
				c.Endpoints = append(c.Endpoints, ep)
			}
		}
		return c
	}
	for _, departures := range []bool{true, false} {
		prev := map[string]uint64{}
		tookBack := false
		for s := 0; s <= 34; s++ {
			now := t0.Add(time.Duration(s) * time.Second)
			c := clusterAt(now, departures)
			snap, err := Build(state(t, c), now)
			if err != nil {
				t.Fatalf("Build at %ds: %v", s, err)
			}
			// The entries each endpoint holds in the ring Envoy builds from
			// the published CDS and EDS.
			d := decode(t, snap, KindEnvoy, c.Name)
			if len(d.Endpoints) != len(c.Endpoints) {
				t.Fatalf("at %ds EDS has %d endpoints, want %d (departed ones are not published)", s, len(d.Endpoints), len(c.Endpoints))
			}
			counts := map[string]uint64{}
			d.Ring.(ringhash.Drawable).Entries(func(_ uint64, ep int) { counts[d.Endpoints[ep].Addr]++ })
			for _, st := range snap.Fading[c.Name] {
				if counts[st.Endpoint] != st.Entries {
					t.Fatalf("at %ds %s holds %d entries in Envoy's ring, status says %d", s, st.Endpoint, counts[st.Endpoint], st.Entries)
				}
			}
			noted := slices.ContainsFunc(snap.Notes[c.Name], func(n string) bool { return strings.Contains(n, "left during the fade") })
			if want := departures && len(c.Departed) > 0 && len(snap.Fading[c.Name]) > 0; noted != want {
				t.Fatalf("at %ds the departure note is shown: %v, want %v (notes %q)", s, noted, want, snap.Notes[c.Name])
			}
			for ep, n := range counts {
				if n < prev[ep] {
					if departures {
						t.Fatalf("at %ds %s went from %d to %d entries", s, ep, prev[ep], n)
					}
					tookBack = true
				}
				prev[ep] = n
			}
		}
		if !departures && !tookBack {
			t.Fatal("without departures no entry was taken back: the scenario shows nothing")
		}
	}
}

// TestFadeLayoutNoteNamesTheBounds: without fade_in.capacity,
// /debug/snapshot names the weight sums within which the layout holds, and
// the ring Envoy builds does change entries per endpoint exactly there.
func TestFadeLayoutNoteNamesTheBounds(t *testing.T) {
	entriesPerEndpoint := func(n int, capacity uint64) (uint64, []string) {
		c := fadeCluster(model.PolicyRingHash, n, nil, 0)
		c.FadeIn.Capacity = capacity
		snap, err := Build(state(t, c), fadeT0)
		if err != nil {
			t.Fatal(err)
		}
		d := decode(t, snap, KindEnvoy, c.Name)
		var total uint64
		d.Ring.(ringhash.Drawable).Entries(func(uint64, int) { total++ })
		return total / uint64(n), snap.Notes[c.Name]
	}
	k, notes := entriesPerEndpoint(100, 0)
	want := "laid out at 32 entries per unit of weight, which holds while endpoint weights sum to 65..128 (now 100)"
	if k != 32 || !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, want) }) {
		t.Fatalf("100 endpoints: %d entries each, notes %q; want 32 and %q", k, notes, want)
	}
	// The note ends with what to do, in words for either source.
	if !slices.ContainsFunc(notes, func(n string) bool {
		return strings.Contains(n, want) && strings.Contains(n, "ringxds.io/fade-in-capacity") && strings.HasSuffix(n, "times their weight.")
	}) {
		t.Fatalf("the layout note does not end with the setting for both sources: %q", notes)
	}
	for n, wantK := range map[int]uint64{64: 64, 65: 32, 128: 32, 129: 16} {
		if k, _ := entriesPerEndpoint(n, 0); k != wantK {
			t.Errorf("%d endpoints: %d entries each, want %d", n, k, wantK)
		}
	}
	if _, notes := entriesPerEndpoint(100, 256); slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "no fade_in.capacity") }) {
		t.Fatalf("with a capacity the layout note still shows: %q", notes)
	}
}
