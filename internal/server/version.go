package server

import (
	"strconv"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/protobuf/types/known/anypb"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// mix spreads a resource hash before summing, so that the sum is order
// independent (the caches return resources in map order) while two equal
// hashes do not cancel as they would under XOR.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

// contentVersion derives a response version from the serialized resources it
// carries. The resources are marshalled deterministically, so every replica
// computes the same version for the same content.
func contentVersion(resources []*anypb.Any) string {
	acc := uint64(len(resources))
	for _, r := range resources {
		acc += mix(xxhash.Sum64(r.GetValue()))
	}
	return strconv.FormatUint(acc, 16)
}

// deltaContentVersion does the same for a delta response, where removals are
// content too.
func deltaContentVersion(resp *discovery.DeltaDiscoveryResponse) string {
	acc := uint64(len(resp.GetResources()))<<32 | uint64(len(resp.GetRemovedResources()))
	for _, r := range resp.GetResources() {
		acc += mix(xxhash.Sum64(r.GetResource().GetValue()))
	}
	for _, name := range resp.GetRemovedResources() {
		acc += mix(^xxhash.Sum64String(name))
	}
	return strconv.FormatUint(acc, 16)
}
