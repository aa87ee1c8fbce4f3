package debug_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/debug"
)

// Outside a fade, grpc-go with clientlib/grpcbalancer picks as grpc-go on
// ring_hash (its ringxds.ring_hash schedule ends on grpc-go's ring) and on
// Maglev (served to gRPC as ring_hash), and from the Skipper ring on a
// skipper cluster, which grpc-go alone cannot run. (Mid-fade picks are
// checked against the package's picker in clientlib/grpcbalancer.)
func TestPickForGRPCBalancerOutsideFades(t *testing.T) {
	h := newHandler(&fakePublisher{snap: exampleSnapshot(t)})
	for _, tc := range []struct {
		cluster, policy, sameAs string
	}{
		{"products", "ring_hash", dataplane.GRPCGo},
		{"inventory", "ring_hash", dataplane.GRPCGo},
		{"catalog", "skipper", dataplane.Clientlib},
	} {
		offGRPCGo := 0
		for i := range 1000 {
			q := url.Values{"cluster": {tc.cluster}, "key": {fmt.Sprintf("product-%d", i)}, "client": {dataplane.GRPCGoBalancer}}
			resp := get(t, h, "/debug/pick?"+q.Encode(), nil)
			var res debug.PickResult
			if err := json.Unmarshal([]byte(body(t, resp)), &res); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: status %d, %v", q.Encode(), resp.StatusCode, err)
			}
			if res.Client != dataplane.GRPCGoBalancer || res.Policy != tc.policy || res.Endpoint != res.ByClient[dataplane.GRPCGoBalancer] {
				t.Fatalf("%s: answered for %s with %s, endpoint %s, by client %v", q.Encode(), res.Client, res.Policy, res.Endpoint, res.ByClient)
			}
			if res.Endpoint != res.ByClient[tc.sameAs] {
				t.Fatalf("%s: %s, while %s picks %s", q.Encode(), res.Endpoint, tc.sameAs, res.ByClient[tc.sameAs])
			}
			if res.Endpoint != res.ByClient[dataplane.GRPCGo] {
				offGRPCGo++
			}
		}
		// Proof the Skipper ring answered: it and ring_hash part on many keys.
		if tc.sameAs != dataplane.GRPCGo && offGRPCGo == 0 {
			t.Errorf("%s: every key where grpc-go's ring_hash sends it", tc.cluster)
		}
	}
}
