package grpcbalancer

import (
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/ringhash"
)

// picker is immutable: a ring and a snapshot of each child's state.
type picker struct {
	ring ringhash.Ring
	// nring, when set, replaces ring: the ring a key uses depends on the
	// fade-in step in force, and its indices map to members.
	nring    *fadein.NRing
	header   string
	children []endpointsharding.ChildState // ring member index -> child
}

// ringFor returns the ring request hash h uses now and, for an N-ring, the
// member index of each of its endpoints (nil: the ring's own indices).
// Steps are whole wall-clock seconds (fadein.StepTime), the grid the
// control plane steps its weight ramp on, so every client and every
// replica cuts a key over at the same instant. It does not allocate.
func (p *picker) ringFor(h uint64) (ringhash.Ring, []int) { return p.ringAt(h, time.Now()) }

// ringAt is ringFor at the instant now.
func (p *picker) ringAt(h uint64, now time.Time) (ringhash.Ring, []int) {
	if p.nring == nil {
		return p.ring, nil
	}
	return p.nring.Ring(h, fadein.StepTime(now))
}

// member maps a ring index to a member (child) index.
func member(idx []int, i int) int {
	if idx == nil {
		return i
	}
	return idx[i]
}

// requestHash is grpc-go ring_hash's header hash (balancer/ringhash
// picker.go): XXH64 of the header's values joined with ",", which for one
// value is Envoy's single-header hash.
func (p *picker) requestHash(info balancer.PickInfo) (uint64, bool) {
	// One small copy of the header's values: grpc-go's metadata API has no
	// way to read them without it (FromOutgoingContext copies every key).
	v := metadata.ValueFromOutgoingContext(info.Ctx, p.header)
	if len(v) == 0 {
		return 0, false
	}
	if len(v) == 1 {
		return ringhash.HashKey(v[0]), true
	}
	return ringhash.HashKey(strings.Join(v, ",")), true
}

// Pick follows grpc-go's ring_hash picker (balancer/ringhash, gRFC A61 and
// A76). A keyed RPC goes to the first child in ring order from the key's
// owner that is not in TRANSIENT_FAILURE; an idle child there connects and
// holds the RPC, so the key is not sent elsewhere while the channel warms
// up. An RPC without the hash header takes the first READY child from a
// random point, starting one idle child connecting on its way if none is.
func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	h, keyed := p.requestHash(info)
	if !keyed {
		h = rand.Uint64()
	}
	return p.pick(h, keyed, info)
}

// pick is Pick for request hash h. A keyed pick whose owner is not in
// TRANSIENT_FAILURE allocates nothing here.
func (p *picker) pick(h uint64, keyed bool, info balancer.PickInfo) (balancer.PickResult, error) {
	ring, idx := p.ringFor(h)
	owner := member(idx, ring.Pick(h))
	if keyed && p.children[owner].State.ConnectivityState != connectivity.TransientFailure {
		return p.children[owner].State.Picker.Pick(info)
	}
	found, connecting := -1, false
	for _, c := range p.children {
		connecting = connecting || c.State.ConnectivityState == connectivity.Connecting
	}
	ring.Walk(h, func(i int) bool {
		i = member(idx, i)
		switch st := p.children[i].State.ConnectivityState; {
		case keyed && st != connectivity.TransientFailure, st == connectivity.Ready:
			found = i
			return false
		case !keyed && !connecting && st == connectivity.Idle:
			connecting = true
			p.children[i].ExitIdle()
		}
		return true
	})
	switch {
	case found >= 0:
		return p.children[found].State.Picker.Pick(info)
	case !keyed && connecting:
		return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
	}
	return p.children[owner].State.Picker.Pick(info)
}
