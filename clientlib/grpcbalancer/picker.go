package grpcbalancer

import (
	"math/rand/v2"
	"strings"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// picker is immutable: a ring and a snapshot of each child's state.
type picker struct {
	ring     ringhash.Ring
	header   string
	children []balancer.State // ring index -> child state
}

// requestHash is grpc-go ring_hash's header hash (balancer/ringhash
// picker.go): XXH64 of the header's values joined with ",", which for one
// value is Envoy's single-header hash.
func (p *picker) requestHash(info balancer.PickInfo) (uint64, bool) {
	md, _ := metadata.FromOutgoingContext(info.Ctx)
	v := md.Get(p.header)
	if len(v) == 0 {
		return 0, false
	}
	if len(v) == 1 {
		return ringhash.HashKey(v[0]), true
	}
	return ringhash.HashKey(strings.Join(v, ",")), true
}

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	h, ok := p.requestHash(info)
	if !ok {
		h = rand.Uint64()
	}
	owner := p.ring.Pick(h)
	if p.children[owner].ConnectivityState != connectivity.TransientFailure {
		// READY picks; CONNECTING and IDLE queue the RPC (and start the
		// connection) rather than send the key elsewhere while the channel
		// warms up.
		return p.children[owner].Picker.Pick(info)
	}
	// Walk past failed endpoints in ring order, as grpc-go's ring_hash
	// does (gRFC A61), so every client falls back to the same endpoint.
	found := -1
	p.ring.Walk(h, func(i int) bool {
		if p.children[i].ConnectivityState != connectivity.TransientFailure {
			found = i
			return false
		}
		return true
	})
	if found >= 0 {
		return p.children[found].Picker.Pick(info)
	}
	return p.children[owner].Picker.Pick(info)
}
