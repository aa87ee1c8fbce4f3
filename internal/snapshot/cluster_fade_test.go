package snapshot

import (
	"encoding/json"
	"testing"
	"time"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ringxds/ringxds/internal/model"
)

// A laid-out ring_hash cluster reaches the grpc kind, and only it, with
// the ringxds.ring_hash schedule ahead of ring_hash; the schedule lists
// every endpoint with its final entries and a fading one's start, is the
// same at every step of a fade, and every dialect without the package
// still decodes the ring_hash entry.
func TestFadeScheduleForGRPC(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	eps := threeEndpoints()
	eps[2].FirstSeen = now.Add(-3 * time.Second)
	c := model.Cluster{Name: "products", FadeIn: &model.FadeIn{Duration: 10 * time.Second, Exponent: 2.5}, Endpoints: eps}
	st := state(t, c)
	schedule := func(at time.Time) (*xdstypev3.TypedStruct, *Snapshot) {
		snap, err := Build(st, at)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range AllKinds() {
			cds, _ := snap.Kinds[k][resource.ClusterType]["products"].(*clusterv3.Cluster)
			pols := cds.GetLoadBalancingPolicy().GetPolicies()
			has := len(pols) > 0 && pols[0].GetTypedExtensionConfig().GetName() == PolicyNameRingHashFade
			if has != (k == KindGRPC) {
				t.Fatalf("%s: schedule published %v", k, has)
			}
			if k != KindGRPCRoundRobin {
				d, err := Decode(cds, snap.Kinds[k][resource.EndpointType]["products"].(*endpointv3.ClusterLoadAssignment), k)
				if err != nil || d.Policy != "ring_hash" {
					t.Fatalf("%s: decoded %v, %v", k, d, err)
				}
			}
		}
		cds := snap.Kinds[KindGRPC][resource.ClusterType]["products"].(*clusterv3.Cluster)
		ts := &xdstypev3.TypedStruct{}
		if err := cds.GetLoadBalancingPolicy().GetPolicies()[0].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(ts); err != nil {
			t.Fatal(err)
		}
		return ts, snap
	}
	mid, _ := schedule(now)
	if mid.GetTypeUrl() != RingHashFadeTypeURL {
		t.Fatalf("type_url %q", mid.GetTypeUrl())
	}
	list := mid.GetValue().GetFields()["endpoints"].GetListValue().GetValues()
	if len(list) != 3 {
		t.Fatalf("%d endpoints in the schedule", len(list))
	}
	starts := 0
	for _, v := range list {
		f := v.GetStructValue().GetFields()
		if f["ring_entries"].GetNumberValue() < 1 || f["address"].GetStringValue() == "" || f["key"].GetStringValue() == "" {
			t.Errorf("endpoint %v", f)
		}
		if s := f["fade_start"].GetStringValue(); s != "" {
			starts++
			if s != eps[2].FirstSeen.Format(time.RFC3339Nano) {
				t.Errorf("fade_start %s, want %s", s, eps[2].FirstSeen.Format(time.RFC3339Nano))
			}
		}
	}
	if starts != 1 {
		t.Errorf("%d endpoints with a fade start, want 1", starts)
	}
	next, _ := schedule(now.Add(2 * time.Second))
	if !proto.Equal(mid, next) {
		t.Error("the schedule changed between two steps of one fade")
	}
}

// RingHashFadeConfig finds the schedule where a client with a
// ringxds.ring_hash balancer runs it (first in the grpc kind's list) and
// nowhere else: not for a client that reads only lb_policy, not on a
// skipper cluster, and not behind an entry the client runs first.
func TestRingHashFadeConfig(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	eps := threeEndpoints()
	eps[2].FirstSeen = now.Add(-3 * time.Second)
	fading := model.Cluster{Name: "products", FadeIn: &model.FadeIn{Duration: 10 * time.Second, Exponent: 2.5}, Endpoints: eps}
	skipper := fading
	skipper.Name, skipper.Policy = "catalog", model.PolicySkipper
	snap, err := Build(state(t, fading, skipper), now)
	if err != nil {
		t.Fatal(err)
	}
	grpc := snap.Kinds[KindGRPC][resource.ClusterType]
	withPackage := DialectGRPCGo
	withPackage.Skipper = true
	js, ok, err := RingHashFadeConfig(grpc["products"].(*clusterv3.Cluster), withPackage)
	if err != nil || !ok {
		t.Fatalf("products: ok %v, %v", ok, err)
	}
	var sched struct {
		Endpoints []struct {
			Address   string `json:"address"`
			FadeStart string `json:"fade_start"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(js, &sched); err != nil || len(sched.Endpoints) != 3 || sched.Endpoints[2].FadeStart == "" {
		t.Fatalf("config %s: %v", js, err)
	}
	preA52 := withPackage
	preA52.LoadBalancingPolicy = false
	ringHashFirst := proto.Clone(grpc["products"]).(*clusterv3.Cluster)
	pols := ringHashFirst.GetLoadBalancingPolicy().GetPolicies()
	pols[0], pols[1] = pols[1], pols[0]
	for name, tc := range map[string]struct {
		cds *clusterv3.Cluster
		d   Dialect
	}{
		"before gRFC A52": {grpc["products"].(*clusterv3.Cluster), preA52},
		"skipper cluster": {grpc["catalog"].(*clusterv3.Cluster), withPackage},
		"ring_hash first": {ringHashFirst, withPackage},
		"the envoy kind":  {snap.Kinds[KindEnvoy][resource.ClusterType]["products"].(*clusterv3.Cluster), withPackage},
	} {
		if _, ok, err := RingHashFadeConfig(tc.cds, tc.d); ok || err != nil {
			t.Errorf("%s: ok %v, %v", name, ok, err)
		}
	}
}
