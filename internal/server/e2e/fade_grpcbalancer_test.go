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
// docs/fade-in.md reads both. Only what the ramp promises for any batch is
// asserted: no key moves back to an old endpoint, and every key agrees
// with /debug/pick before and after.
func TestBatchFadeWeightRampGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10 s fade through 110 backends")
	}
	m := testcp.BatchFade(t, 100, 10, 2000, 10*time.Second)
	t.Logf("grpc-go without grpcbalancer (weight ramp), 100 -> 110 batch: %v", m)
	if m.Flaps != 0 {
		t.Fatalf("keys moved back to old endpoints: %v", m)
	}
}
