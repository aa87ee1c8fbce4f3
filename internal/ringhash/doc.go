// Package ringhash owns the consistent-hash rings that ringxds shares between
// Envoy, proxyless gRPC and Go services: Envoy's RING_HASH and MAGLEV and
// Skipper's consistentHash, each reproduced entry for entry, plus the request
// hashing of Envoy's and grpc-go's route hash policies.
//
// Every ring is built once from a slice of Endpoint values and is immutable
// afterwards, so any number of goroutines may pick from it without locking.
// Picks return an index into the slice given to the builder; callers keep
// their own endpoint records and map back by that index.
//
// Picking is allocation-free and does not binary-search: the sorted rings
// keep an index over the top bits of the hash and store each entry's owner
// beside its hash (see lookup.go), so a pick is about two cache-line loads
// and no data-dependent branch. Walk reports distinct endpoints without
// scratch memory, using each entry's distance to the previous entry of the
// same endpoint.
package ringhash
