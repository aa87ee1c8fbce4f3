package snapshot

import (
	"maps"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ringxds/ringxds/internal/model"
)

func TestConsistent(t *testing.T) {
	snap := build(t,
		model.Cluster{Name: "a", Endpoints: threeEndpoints()},
		model.Cluster{Name: "b", Policy: model.PolicySkipper, Endpoints: threeEndpoints()},
	)
	// clone copies the type maps so a test case can drop or replace
	// resources without touching the snapshot.
	clone := func(r Resources) Resources {
		out := make(Resources, len(r))
		for typ, byName := range r {
			out[typ] = maps.Clone(byName)
		}
		return out
	}

	tests := []struct {
		name    string
		kind    Kind
		mutate  func(Resources)
		wantErr string
	}{
		{"grpc as built", KindGRPC, func(Resources) {}, ""},
		{"envoy as built", KindEnvoy, func(Resources) {}, ""},
		{"route missing", KindGRPC, func(r Resources) { delete(r[resourcev3.RouteType], "a") }, `listener "a" names route "a"`},
		{"cluster missing", KindClientlib, func(r Resources) { delete(r[resourcev3.ClusterType], "b") }, `route "b" names cluster "b"`},
		{"endpoints missing", KindEnvoy, func(r Resources) { delete(r[resourcev3.EndpointType], "a") }, `cluster "a" needs endpoints "a"`},
		{"eds service name", KindEnvoy, func(r Resources) {
			c := proto.Clone(r[resourcev3.ClusterType]["a"]).(*clusterv3.Cluster)
			c.EdsClusterConfig.ServiceName = "elsewhere"
			r[resourcev3.ClusterType]["a"] = c
		}, `cluster "a" needs endpoints "elsewhere"`},
		{"unreferenced endpoints are fine", KindEnvoy, func(r Resources) { delete(r[resourcev3.ClusterType], "a") }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := clone(snap.Kinds[tt.kind])
			tt.mutate(r)
			err := r.Consistent()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Consistent: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Consistent = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
