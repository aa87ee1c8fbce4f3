// Package grpcbalancer is a grpc-go load-balancing policy that runs the
// ringxds rings inside a proxyless gRPC client, so a service dialing
// xds:///products through grpc-go's own xDS client picks the endpoint that
// Envoy, ringxds' Go client library and /debug/pick name for a key.
//
// Importing the package registers the policy under the name
// "ringxds.skipper" (grpc-go registers its own policies the same way):
//
//	import _ "github.com/ringxds/ringxds/clientlib/grpcbalancer"
//
// ringxds publishes a skipper cluster to gRPC clients as a
// load_balancing_policy list whose first entry is a TypedStruct with
// type_url ".../ringxds.skipper"; grpc-go's xDS client (xdslbregistry,
// convertCustomPolicy) selects the first entry whose name has a registered
// balancer and hands the TypedStruct's value to it as JSON config. Without
// this package the client falls back to the list's ring_hash entry.
//
// The config (all fields optional):
//
//	{"hash_header": "x-product-id", "policy": "skipper", "scheme": "http",
//	 "min_ring_size": 1024, "max_ring_size": 4096, "table_size": 65537}
//
// grpc-go keeps the xDS route's request hash under a context key no other
// package can read, so the picker hashes the RPC's outgoing metadata
// itself: the values of hash_header joined with "," through XXH64, as
// grpc-go's ring_hash does for its request_hash_header (gRFC A76). An RPC
// without the header gets a random hash. hash_header defaults to
// "x-hash-key", ringxds' default hash header.
//
// policy selects the ring: "skipper" (the default; endpoint identity
// scheme://host:port, scheme from the config, 100 vnodes), "ring_hash"
// (grpc-go's ring: hash keys from the endpoints' hash key attribute, sorted,
// weighted) or "maglev" (Envoy's table), so the policy also serves a plain
// gRPC service config that wants Maglev, which grpc-go lacks.
//
// # Exact fade-in: ringxds.ring_hash
//
// The package also registers "ringxds.ring_hash". For a ring_hash cluster
// laid out for fade-in, ringxds publishes to gRPC clients
// [TypedStruct ".../ringxds.ring_hash", ring_hash]. Clients without this
// package (and grpc-js, C-core, grpc-java) skip the TypedStruct and follow
// the weight ramp the ring_hash entry and EDS weights publish, whole ring
// entries at a time. With it, grpc-go cuts each key over on its own with
// an N-ring (internal/fadein.NRing): one ring per scale-up event (the
// starts that fall in one fade step, so a batch of pods turning ready
// milliseconds apart is one event), each the cluster's final ring_hash
// entries of the members up to that event (fadein.NewCountRing, the ring
// Envoy and grpc-go build once the fade ends); a key uses the newest ring
// whose event's share, at the fade step in force (whole wall-clock
// seconds, fadein.StepTime), exceeds a second hash of the key. In a batch
// every key is either on its pre-fade owner or on its final one, moves at
// most once and never between old endpoints: a 100 -> 110 batch keeps
// 100% warm precision. Pods arriving seconds apart are separate events: a
// key an early pod took moves on when a later pod that owns it arrives,
// and there the weight ramp can do better (docs/fade-in.md). The client
// library itself follows the weight ramp on laid-out clusters, so mid-fade
// this package routes some keys elsewhere than Envoy and clientlib until
// the fade ends. /debug/pick answers for it as "grpc-go-grpcbalancer",
// from the same schedule parser and N-ring (internal/fadeschedule) and
// the server's clock; its other answers show the weight ramp.
//
// Cost: one ring per event, each of the cluster's final entry count, built
// on every schedule change; a cluster laid out at 1000 endpoints x 1024
// entries costs about 25 MiB and 0.2 s per event.
//
// grpc-go hands balancers no endpoint metadata, so the schedule travels
// in the config, which changes on scale events and fade ends, never per
// step (the Cluster resource carrying it still changes when its ring size
// does, and it holds about 90 bytes per endpoint):
//
//	{"hash_header": "x-product-id", "fade_duration": "30s", "fade_exponent": 2.5,
//	 "endpoints": [{"address": "10.0.0.1:8080", "key": "pod-a", "ring_entries": 32},
//	               {"address": "10.0.0.9:8080", "key": "pod-z", "ring_entries": 32,
//	                "fade_start": "2026-01-01T00:00:00.5Z"}]}
//
// Endpoints are matched to EDS by address; only those in both the
// schedule and EDS are on the ring (CDS and EDS arrive separately, and
// leaving one out moves only its own keys). The EDS weights of each
// step are ignored.
//
// ringxds cannot see that a client imports the package. Set
// "ringxds.io/grpcbalancer": true in the node metadata of the client's
// xDS bootstrap so that /debug/clients judges it by what it runs (the
// Skipper ring on skipper clusters).
//
// Endpoints in TRANSIENT_FAILURE are walked past in ring order, as
// grpc-go's ring_hash does; an owner that is still connecting holds the
// RPC rather than send the key elsewhere. A keyed pick allocates only
// grpc-go's copy of the hash header's values.
package grpcbalancer
