package e2e_test

import (
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/testcp"
)

// This package does not link clientlib/grpcbalancer, so grpc-go's xDS
// client skips the ringxds.ring_hash entry of a fading cluster and follows
// the published weight ramp. The measure sits beside the one with the
// package (clientlib/grpcbalancer TestBatchFadeIsExactWithThePackage);
// docs/fade-in.md reads both. Every key agrees with /debug/pick before and
// after (testcp.BatchFade checks it). Flaps are reported, not asserted:
// grpc-go may apply a step's Cluster (ring size) before its endpoints'
// weights, and that mixed pair can send a key to another old endpoint and
// back, about 1 flap in 2,000 keys here; a ring size that stays fixed
// across steps removes the mixed pair.
func TestBatchFadeWeightRampGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10 s fade through 110 backends")
	}
	m := testcp.BatchFade(t, 100, 10, 2000, 10*time.Second)
	t.Logf("grpc-go without grpcbalancer (weight ramp), 100 -> 110 batch: %v", m)
}
