package e2e_test

import (
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/testcp"
)

// This package does not link clientlib/grpcbalancer, so grpc-go's xDS
// client skips the ringxds.ring_hash entry of a fading cluster and follows
// the published weight ramp. The measure sits beside the one with the
// package (clientlib/grpcbalancer TestBatchFadeIsExactWithThePackage);
// docs/fade-in.md reads both. Every key agrees with /debug/pick before and
// after (testcp.BatchFade checks it). grpc-go may apply a step's Cluster
// before its endpoints' weights; when each step published minimum =
// maximum = its total, that mixed pair sent about 1 key in 2,000 to another
// old endpoint and back. The maximum now stays and the minimum moves only
// where no minimum serves both steps (fadein.RingSizeSchedule): here twice,
// and the step's weights are exact under the new Cluster, so no key flaps.
// Mid-fade keys sampled against /debug/pick?client=grpc-go within a step
// (OffPick) are logged, not asserted: a step's weights reach the client by
// push, a moment after /debug/pick shows them.
func TestBatchFadeWeightRampGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10 s fade through 110 backends")
	}
	m := testcp.BatchFade(t, 100, 10, 2000, 10*time.Second, dataplane.GRPCGo)
	t.Logf("grpc-go without grpcbalancer (weight ramp), 100 -> 110 batch: %v", m)
	if m.Flaps != 0 {
		t.Fatalf("%v flaps per key: a key left an old endpoint and came back", m.Flaps)
	}
}
