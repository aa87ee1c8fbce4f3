package debug

import (
	"fmt"
	"strings"

	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// configuredWeights maps each endpoint of c, by "host:port", to the weight
// its source gives it.
func configuredWeights(c *model.Cluster) map[string]uint32 {
	if c == nil {
		return nil
	}
	out := make(map[string]uint32, len(c.Endpoints))
	for i := range c.Endpoints {
		out[c.Endpoints[i].HostPort()] = c.Endpoints[i].Weight
	}
	return out
}

// weightsNote says in plain words why the weights and ring size a data
// plane receives differ from the configured ones, or "" when they do not.
// Published numbers that nobody wrote (weights near 2^31 / n, a ring of
// 4096 entries under a configured minimum of 1024) otherwise read as a bug.
func weightsNote(c *model.Cluster, d *snapshot.Decoded, size int, fading bool) string {
	if c == nil || d == nil {
		return ""
	}
	if d.Policy == ringhash.PolicySkipper {
		for i := range c.Endpoints {
			if c.Endpoints[i].Weight != 1 {
				return fmt.Sprintf("Skipper's ring has no weights: every endpoint holds %d entries whatever its weight. "+
					"The configured weights apply where this cluster runs as ring_hash (Envoy, and gRPC clients without clientlib/grpcbalancer).", ringhash.SkipperVnodes)
			}
		}
		return ""
	}
	if d.Policy != ringhash.PolicyRingHash {
		return ""
	}
	// A cluster laid out for fade-in publishes each endpoint's final ring
	// entries; k is entries per unit of configured weight.
	var final, weightSum, k uint64
	for _, ep := range d.Endpoints {
		final += ep.RingEntries
	}
	if final == 0 {
		return ""
	}
	for i := range c.Endpoints {
		weightSum += uint64(c.Endpoints[i].Weight)
	}
	for _, ep := range d.Endpoints {
		for i := range c.Endpoints {
			if c.Endpoints[i].HostPort() == ep.Addr && c.Endpoints[i].Weight > 0 && ep.RingEntries > 0 {
				k = ep.RingEntries / uint64(c.Endpoints[i].Weight)
				break
			}
		}
		if k > 0 {
			break
		}
	}
	var rule string
	switch {
	case c.FadeIn != nil && c.FadeIn.Capacity > 0 && weightSum <= c.FadeIn.Capacity:
		rule = fmt.Sprintf("maximum_ring_size %d / fade_in.capacity %d", c.MaxRingSize, c.FadeIn.Capacity)
	default:
		rule = fmt.Sprintf("the largest power of two that fits the weight sum %d into maximum_ring_size %d", weightSum, c.MaxRingSize)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The published weights are not the configured ones, by design: with fade_in the ring is laid out at %d entries per unit of weight (%s), %d entries once no endpoint fades in", k, rule, final)
	if uint64(size) != final {
		fmt.Fprintf(&b, ", %d now", size)
	}
	fmt.Fprintf(&b, "; minimum_ring_size (%d) plays no part. ", c.MinRingSize)
	b.WriteString("ringxds publishes the EDS weights and ring sizes under which Envoy, grpc-go, grpc-js and C-core all build exactly that ring, so every endpoint's share still follows its configured weight.")
	if fading {
		b.WriteString(" While an endpoint fades in they change every second: each step's ring keeps every entry of the one before and adds some of the new endpoint's.")
	}
	return b.String()
}
