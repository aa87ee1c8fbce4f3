package grpcbalancer

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/debug"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// onePublisher serves one snapshot to the debug handler.
type onePublisher struct{ snap *snapshot.Snapshot }

func (p onePublisher) Current() *snapshot.Snapshot                    { return p.snap }
func (p onePublisher) Ready() bool                                    { return true }
func (p onePublisher) Clients() []server.ClientStatus                 { return nil }
func (p onePublisher) RefusedConnections() []server.RefusedConnection { return nil }

// clientPicker runs the grpc kind's Cluster through the balancer as grpc-go
// hands it over: the TypedStruct's value marshalled with encoding/json
// (xdslbregistry convertCustomPolicy), and one READY child per endpoint of
// the assignment, in a rotated order as endpointsharding hands them. It
// returns the picker and each child's address.
func clientPicker(t *testing.T, cds *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) (*picker, []string) {
	t.Helper()
	ts := &xdstypev3.TypedStruct{}
	first := cds.GetLoadBalancingPolicy().GetPolicies()[0].GetTypedExtensionConfig()
	if first.GetName() != NameRingHash {
		t.Fatalf("first load_balancing_policy entry is %s, want %s", first.GetName(), NameRingHash)
	}
	if err := first.GetTypedConfig().UnmarshalTo(ts); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(ts.GetValue())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := builder{name: NameRingHash}.ParseConfig(js)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, loc := range cla.GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			addrs = append(addrs, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
		}
	}
	cc := &capturingConn{}
	b := &ringBalancer{ClientConn: cc, cfg: cfg.(*config)}
	b.updateFade(readyChildren(append(addrs[7:], addrs[:7]...)...))
	p, ok := cc.picker.(*picker)
	if !ok {
		t.Fatalf("the balancer published %T, not a ring picker", cc.picker)
	}
	byChild := make([]string, len(p.children))
	for i, c := range p.children {
		byChild[i] = c.Endpoint.Addresses[0].Addr
	}
	return p, byChild
}

// /debug/pick?client=grpc-go-grpcbalancer answers, key for key, what this
// package's picker picks from the Cluster and endpoints the server
// publishes: at several steps of a 100 -> 110 batch fade, where it parts
// from the weight ramp grpc-go runs without the package, and once the fade
// is over, where the two agree again.
func TestDebugPickPredictsThePackage(t *testing.T) {
	// The balancer builds its N-ring on the real clock (updateFade), and a
	// ring built after a fade ends no longer shows it; starting the fade
	// in the future keeps every step below after the build.
	t0 := time.Now().Add(time.Minute).Truncate(time.Second)
	eps := make([]model.Endpoint, 110)
	for i := range eps {
		eps[i] = model.Endpoint{Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 8080, HashKey: fmt.Sprintf("backend-%03d", i)}
		if i >= 100 {
			eps[i].FirstSeen = t0.Add(300*time.Millisecond + time.Duration(i-100)*20*time.Millisecond)
		}
	}
	st := model.State{Clusters: []model.Cluster{{Name: "products", HashHeader: "x-product-id",
		FadeIn: &model.FadeIn{Duration: 10 * time.Second, Exponent: 2.5}, Endpoints: eps}}}
	if err := st.Normalize(); err != nil {
		t.Fatal(err)
	}
	isNew := map[string]bool{}
	for _, ep := range eps[100:] {
		isNew[ep.HostPort()] = true
	}
	for _, step := range []struct {
		at     time.Duration
		fading bool
	}{
		{3 * time.Second, true}, {6 * time.Second, true}, {9 * time.Second, true}, {12 * time.Second, false},
	} {
		at := t0.Add(step.at)
		snap, err := snapshot.Build(st, at)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(snap.Fading["products"]) > 0; got != step.fading {
			t.Fatalf("t0+%v: fading %v, want %v", step.at, got, step.fading)
		}
		grpc := snap.Kinds[snapshot.KindGRPC]
		p, addrs := clientPicker(t, grpc[resource.ClusterType]["products"].(*clusterv3.Cluster), grpc[resource.EndpointType]["products"].(*endpointv3.ClusterLoadAssignment))
		// compare asks /debug/pick with its clock at now, and checks each
		// key against the package's pick at now.
		compare := func(now time.Time) (picks []string, offRamp int) {
			h := debug.New(debug.Options{Server: onePublisher{snap}, Gatherer: prometheus.NewRegistry(), Now: func() time.Time { return now }})
			for i := range 1000 {
				key := fmt.Sprintf("product-%d", i)
				hash := ringhash.HashKey(key)
				ring, idx := p.ringAt(hash, now)
				want := addrs[member(idx, ring.Pick(hash))]
				res := pickOf(t, h, "products", key, dataplane.GRPCGoBalancer)
				if res.Endpoint != want || res.ByClient[dataplane.GRPCGoBalancer] != want {
					t.Fatalf("t0+%v, clock %v: key %s: /debug/pick says %s (by client %s), the package picks %s",
						step.at, now.Sub(t0), key, res.Endpoint, res.ByClient[dataplane.GRPCGoBalancer], want)
				}
				if res.ByClient[dataplane.GRPCGo] != want {
					offRamp++
				}
				picks = append(picks, want)
			}
			return picks, offRamp
		}
		// Mid-step, as a client reads its clock at any instant of it.
		picks, offRamp := compare(at.Add(400 * time.Millisecond))
		// Two steps on with the snapshot not yet republished: the package
		// reads its clock, not the server's step, and so must the answer.
		later, _ := compare(at.Add(2400 * time.Millisecond))
		toNew, movedLater := 0, 0
		for i := range picks {
			if isNew[picks[i]] {
				toNew++
			}
			if later[i] != picks[i] {
				movedLater++
			}
		}
		t.Logf("t0+%v: %d of 1000 keys off the weight ramp, %d on a new endpoint, %d more 2 s later", step.at, offRamp, toNew, movedLater)
		switch {
		case !step.fading && (offRamp != 0 || movedLater != 0):
			t.Errorf("t0+%v, after the fade: %d keys differ from grpc-go's ring, %d moved", step.at, offRamp, movedLater)
		case step.fading && offRamp == 0:
			t.Errorf("t0+%v, mid-fade: every key where the weight ramp sends it; the schedule was not followed", step.at)
		case step.fading && movedLater == 0:
			t.Errorf("t0+%v, mid-fade: no key cut over in 2 s; the clock was not read", step.at)
		}
	}
}

func pickOf(t *testing.T, h http.Handler, cluster, key, client string) debug.PickResult {
	t.Helper()
	q := url.Values{"cluster": {cluster}, "key": {key}, "client": {client}}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pick?"+q.Encode(), nil))
	var res debug.PickResult
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("/debug/pick?%s: %d %s", q.Encode(), rec.Code, rec.Body)
	}
	if res.Client != client {
		t.Fatalf("/debug/pick?%s answered for %q", q.Encode(), res.Client)
	}
	return res
}
