package grpcbalancer

import (
	"fmt"
	"testing"
	"time"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/snapshot"
)

type simMetrics struct {
	pairs, good, newNew, oldOld, flaps, multi int
}

func (m simMetrics) String() string {
	return fmt.Sprintf("precision %.3f%% (%d/%d pairs), new->new moves %d, old->old %d, flaps %d, keys moving more than once %d",
		100*float64(m.good)/float64(max(m.pairs, 1)), m.good, m.pairs, m.newNew, m.oldOld, m.flaps, m.multi)
}

// simFade replays a 100 -> 110 fade step by step: the package's N-ring
// built from the grpc kind's TypedStruct as updateFade does, and the
// weight ramp as grpc-go builds it (Decode of the grpc kind).
func simFade(t *testing.T, stagger time.Duration, skew time.Duration) (pkg, ramp simMetrics) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	eps := make([]model.Endpoint, 110)
	for i := range eps {
		eps[i] = model.Endpoint{Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 8080, HashKey: fmt.Sprintf("backend-%03d", i)}
		if i >= 100 {
			eps[i].FirstSeen = t0.Add(300*time.Millisecond + time.Duration(i-100)*stagger)
		}
	}
	st := model.State{Clusters: []model.Cluster{{Name: "products", HashHeader: "x-product-id", FadeIn: &model.FadeIn{Duration: 10 * time.Second, Exponent: 2.5}, Endpoints: eps}}}
	if err := st.Normalize(); err != nil {
		t.Fatal(err)
	}
	const keys = 20000
	hs := make([]uint64, keys)
	for i := range hs {
		hs[i] = ringhash.HashKey(fmt.Sprintf("product-%d", i))
	}
	isNew := map[string]bool{}
	for _, ep := range eps[100:] {
		isNew[ep.HostPort()] = true
	}
	var nring *fadein.NRing
	var order []string
	var lastKeys string
	type track struct {
		prev  []string
		seen  map[[2]any]bool
		moves []int
		m     *simMetrics
	}
	newTrack := func(m *simMetrics) *track {
		return &track{seen: map[[2]any]bool{}, moves: make([]int, keys), m: m}
	}
	tp, tr := newTrack(&pkg), newTrack(&ramp)
	observe := func(tk *track, cur []string) {
		for i, be := range cur {
			if isNew[be] {
				tk.seen[[2]any{i, be}] = true
			}
			if tk.prev != nil && tk.prev[i] != be {
				tk.moves[i]++
				switch p := tk.prev[i]; {
				case isNew[p] && isNew[be]:
					tk.m.newNew++
				case !isNew[p] && !isNew[be]:
					tk.m.oldOld++
				case isNew[p] && !isNew[be]:
					tk.m.flaps++
				}
			}
		}
		tk.prev = cur
	}
	// Sample every 100 ms of server time; the client's clock reads
	// server time + skew.
	for at := t0; at.Before(t0.Add(25 * time.Second)); at = at.Add(100 * time.Millisecond) {
		snap, err := snapshot.Build(st, fadein.StepTime(at))
		if err != nil {
			t.Fatal(err)
		}
		cds := snap.Kinds[snapshot.KindGRPC][resource.ClusterType]["products"].(*clusterv3.Cluster)
		cla := snap.Kinds[snapshot.KindGRPC][resource.EndpointType]["products"].(*endpointv3.ClusterLoadAssignment)
		d, err := snapshot.Decode(cds, cla, snapshot.KindGRPC)
		if err != nil {
			t.Fatal(err)
		}
		ts := &xdstypev3.TypedStruct{}
		if err := cds.GetLoadBalancingPolicy().GetPolicies()[0].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(ts); err != nil {
			t.Fatal(err)
		}
		js, _ := protojson.Marshal(ts.GetValue())
		cfg, err := parseFadeConfig(js)
		if err != nil {
			t.Fatal(err)
		}
		clientNow := at.Add(skew)
		if string(js) != lastKeys {
			lastKeys = string(js)
			var index []int
			if nring, index, err = cfg.fade.Build(func(string) bool { return true }, clientNow); err != nil {
				t.Fatal(err)
			}
			order = make([]string, len(index))
			for i, m := range index {
				order[i] = cfg.fade.Members[m].Address
			}
		}
		cp, cr := make([]string, keys), make([]string, keys)
		for i, h := range hs {
			cp[i] = order[nring.Pick(h, fadein.StepTime(clientNow))]
			cr[i] = d.Endpoints[d.Ring.Pick(h)].Addr
		}
		observe(tp, cp)
		observe(tr, cr)
	}
	for _, tk := range []*track{tp, tr} {
		for p := range tk.seen {
			tk.m.pairs++
			if tk.prev[p[0].(int)] == p[1].(string) {
				tk.m.good++
			}
		}
		for _, n := range tk.moves {
			if n > 1 {
				tk.m.multi++
			}
		}
	}
	return pkg, ramp
}

// TestFadeSimulation replays a 100 -> 110 fade step by step through the
// package and through grpc-go's weight ramp, on 20,000 keys. Starts within
// one fade step (a batch, pods ready milliseconds apart) are one event, so
// every key moves once, to its final owner, whatever the client's clock
// skew. Starts seconds apart are measured and not asserted: a key taken by
// an early pod moves on when a later pod that owns it arrives
// (docs/fade-in.md).
func TestFadeSimulation(t *testing.T) {
	for _, tc := range []struct {
		stagger, skew time.Duration
		exact         bool
	}{
		{0, 0, true}, {50 * time.Millisecond, 0, true}, {0, 3 * time.Second, true}, {0, -3 * time.Second, true},
		{200 * time.Millisecond, 0, false}, {time.Second, 0, false},
	} {
		pkg, ramp := simFade(t, tc.stagger, tc.skew)
		t.Logf("starts %v apart, client clock %v off:\n  grpcbalancer: %v\n  weight ramp : %v", tc.stagger, tc.skew, pkg, ramp)
		if pkg.oldOld != 0 || pkg.flaps != 0 {
			t.Errorf("starts %v apart, skew %v: the package moved keys between old endpoints or back: %v", tc.stagger, tc.skew, pkg)
		}
		if tc.exact && (pkg.good != pkg.pairs || pkg.multi != 0) {
			t.Errorf("starts %v apart, skew %v: a batch within one step is not exact: %v", tc.stagger, tc.skew, pkg)
		}
	}
}
