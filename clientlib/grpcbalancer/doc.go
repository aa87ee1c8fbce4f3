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
// Endpoints in TRANSIENT_FAILURE are walked past in ring order, as
// grpc-go's ring_hash does; an owner that is still connecting holds the
// RPC rather than send the key elsewhere.
package grpcbalancer
