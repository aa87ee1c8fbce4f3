package server

import (
	"bytes"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// holdAll documents "of one name listed twice, the later wins"; a
// full-state (CDS/LDS) SotW response listing a name twice keeps the
// first since 8aa0d8f (before it, CSDS listed both).
func TestFullStateDuplicateLaterWins(t *testing.T) {
	first, later := clusterBytes(t, "k", 1), clusterBytes(t, "k", 2)
	var ts TypeStatus
	ts.holdSotW("cds", []*anypb.Any{{TypeUrl: resource.ClusterType, Value: first}, {TypeUrl: resource.ClusterType, Value: later}}, &response{seq: 1})
	var eds TypeStatus
	eds.holdSotW("eds", []*anypb.Any{{TypeUrl: resource.ClusterType, Value: first}, {TypeUrl: resource.ClusterType, Value: later}}, &response{seq: 1})
	if ts.held.len() != 1 || eds.held.len() != 1 {
		t.Fatalf("held %d / %d", ts.held.len(), eds.held.len())
	}
	t.Logf("cds keeps later: %v; eds keeps later: %v", bytes.Equal(ts.held.at(0).v.value, later), bytes.Equal(eds.held.at(0).v.value, later))
	if !bytes.Equal(ts.held.at(0).v.value, later) {
		t.Fatal("full-state path keeps the first of a duplicated name, partial path keeps the later")
	}
}
