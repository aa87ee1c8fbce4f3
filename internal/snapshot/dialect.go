package snapshot

import "github.com/ringxds/ringxds/internal/ringhash"

// Dialect is how one data plane implementation reads a published Cluster
// and ClusterLoadAssignment and turns them into a ring. The implementations
// read different CDS fields and build ring_hash differently
// (docs/grpc-clients.md); a Dialect holds exactly those differences, so
// DecodeAs can predict each one's picks from the resources it was sent.
//
// The package-level dialects describe each implementation at the versions
// ringxds recommends; internal/dataplane adjusts the fields that older
// versions lack.
type Dialect struct {
	// Name names the implementation, as /debug/pick and /debug/clients do:
	// "envoy", "grpc-go", "grpc-js", "c-core", "grpc-java" or "clientlib".
	Name string
	// LoadBalancingPolicy is set when the typed load_balancing_policy list,
	// if present, wins over the legacy lb_policy field (gRFC A52). A dialect
	// without it reads lb_policy alone, so a Cluster carrying only the typed
	// list runs its zero value, ROUND_ROBIN.
	LoadBalancingPolicy bool
	// Maglev is set when the implementation runs Maglev. gRPC clients skip
	// a typed Maglev entry and NACK lb_policy MAGLEV.
	Maglev bool
	// Skipper is set when the implementation runs the ringxds.skipper
	// TypedStruct (the client library, and grpc-go with
	// clientlib/grpcbalancer registered).
	Skipper bool
	// GRPC applies the rules every gRPC implementation shares: ring_hash
	// must use XX_HASH, and unset ring sizes default to 1024 and 8M before
	// RingCap applies.
	GRPC bool
	// TypedRingSizesRejected is set when an explicit minimum_ring_size or
	// maximum_ring_size in the typed RingHash extension makes the client
	// NACK the Cluster (grpc-js-xds 1.10 to 1.14 decode the UInt64 wrappers
	// as strings).
	TypedRingSizesRejected bool
	// SortByKey sorts endpoints by ring key before the ring walk (grpc-go);
	// otherwise the walk follows EDS order.
	SortByKey bool
	// HashKey is set when the envoy.lb hash_key metadata replaces the
	// address as an endpoint's ring key (gRFC A76).
	HashKey bool
	// KeyPrefix precedes the address in each entry key: grpc-java hashes
	// the Java socket address text, "/127.0.0.1:8080".
	KeyPrefix string
	// CanonicalAddress hashes the address as inet_ntop prints it (Envoy's
	// Address::Ipv6Instance, C-core's grpc_sockaddr_to_string); otherwise
	// the address text is hashed as published (grpc-go, grpc-js).
	CanonicalAddress bool
	// Weights is how endpoint and locality weights become ring shares.
	Weights WeightRule
	// RingCap caps both ring sizes; 0 means no cap.
	RingCap uint64
	// Approximate is set when the implementation's ring depends on things
	// the resources do not fix (grpc-java walks endpoints in hash map
	// order), so a decoded ring only estimates it: /debug/pick does not
	// answer for such a dialect.
	Approximate bool
}

// WeightRule is how a dialect turns EDS weights into ring shares.
type WeightRule int

// The weight rules of the data planes ringxds serves.
const (
	// WeightsEndpoint: each endpoint weight over the sum, as doubles;
	// locality weights are ignored (Envoy without locality_weighted_lb_config).
	WeightsEndpoint WeightRule = iota
	// WeightsLocalityProduct: locality weight x endpoint weight as an
	// integer, then over the sum as doubles; localities of weight 0 are
	// dropped (grpc-js, gRPC C-core, grpc-go before v1.79, grpc-java before
	// v1.79).
	WeightsLocalityProduct
	// WeightsA113: gRFC A113 fixed point, fp(ew / sum ew) x fp(lw / sum lw)
	// in UQ1.31, floored at 1 (grpc-go and grpc-java from v1.79).
	WeightsA113
)

// The dialects of the implementations ringxds serves, at the versions it
// recommends (docs/grpc-clients.md).
var (
	// DialectEnvoy is Envoy: typed policy first, Maglev, EDS order,
	// hash_key, double weights, no cap.
	DialectEnvoy = Dialect{Name: "envoy", LoadBalancingPolicy: true, Maglev: true, HashKey: true, CanonicalAddress: true, Weights: WeightsEndpoint}
	// DialectClientlib is the ringxds client library: Envoy's rings, plus
	// Skipper through its TypedStruct.
	DialectClientlib = Dialect{Name: "clientlib", LoadBalancingPolicy: true, Maglev: true, Skipper: true, HashKey: true, CanonicalAddress: true, Weights: WeightsEndpoint}
	// DialectGRPCGo is grpc-go v1.80 and later: keys sorted, A113 weights,
	// hash_key honoured, ring capped at 4096 (balancer/ringhash).
	DialectGRPCGo = Dialect{Name: "grpc-go", LoadBalancingPolicy: true, GRPC: true, SortByKey: true, HashKey: true,
		Weights: WeightsA113, RingCap: ringhash.GRPCRingHashCap}
	// DialectGRPCJS is grpc-js-xds 1.10 to 1.14: EDS order, address keys
	// (no hash_key), locality x endpoint weights, cap 4096
	// (grpc.lb.ring_hash.ring_size_cap), and typed ring sizes rejected.
	DialectGRPCJS = Dialect{Name: "grpc-js", LoadBalancingPolicy: true, GRPC: true, TypedRingSizesRejected: true,
		Weights: WeightsLocalityProduct, RingCap: ringhash.GRPCRingHashCap}
	// DialectCCore is gRPC C-core 1.55 and later (C++, Python, Ruby, PHP):
	// EDS order within a locality, canonical address keys (hash_key only
	// behind GRPC_XDS_ENDPOINT_HASH_KEY_BACKWARD_COMPAT=false), locality x
	// endpoint weights, cap 4096.
	DialectCCore = Dialect{Name: "c-core", LoadBalancingPolicy: true, GRPC: true, CanonicalAddress: true,
		Weights: WeightsLocalityProduct, RingCap: ringhash.GRPCRingHashCap}
	// DialectGRPCJava is grpc-java v1.79 and later: entry keys carry the
	// Java address text with its leading slash, so it never builds Envoy's
	// ring; endpoints are walked in hash map order, which DecodeAs
	// approximates with EDS order.
	DialectGRPCJava = Dialect{Name: "grpc-java", LoadBalancingPolicy: true, GRPC: true, KeyPrefix: "/",
		Weights: WeightsA113, RingCap: ringhash.GRPCRingHashCap, Approximate: true}
)

// Dialect returns the dialect of the implementation a kind is chosen for:
// the one Decode uses for the kind.
func (k Kind) Dialect() Dialect {
	switch k {
	case KindEnvoy:
		return DialectEnvoy
	case KindGRPCLegacy:
		return DialectGRPCJS
	case KindGRPCRoundRobin:
		return DialectCCore
	case KindClientlib:
		return DialectClientlib
	}
	return DialectGRPCGo
}
