// Package snapshot turns a model.State into the xDS resources each kind of
// client is served, and turns published resources back into the ring a data
// plane builds from them.
//
// Build is a pure function: the same State always yields byte-identical
// resources and versions, so caches can diff by proto equality and any
// replica serves the same versions.
//
// # Resource names
//
// Every resource of a cluster is named after the cluster, one name per type:
//
//   - CDS Cluster, EDS ClusterLoadAssignment: the cluster name.
//   - LDS Listener (gRPC and clientlib kinds): the cluster name, because a
//     gRPC client dialing xds:///products asks LDS for "products".
//   - RDS RouteConfiguration (gRPC and clientlib kinds): the cluster name as
//     well; type URLs keep the namespaces apart, and a debug reader finds
//     every resource of a cluster by one name.
//
// Envoy is served CDS and EDS only: its listeners and the route hash_policy
// live in its bootstrap.
//
// # Kinds
//
// Each cluster is translated once per Kind, because the data planes accept
// different policies and read different fields. Envoy cannot run Skipper's
// ring and gets ring_hash; gRPC clients NACK MAGLEV and get ring_hash for
// maglev clusters; the ringxds client library keeps the real policy. Each
// such substitution is recorded in Snapshot.Notes. The gRPC kinds differ in
// where the policy goes: KindGRPC carries the typed list and the legacy
// fields, KindGRPCLegacy the legacy fields alone (grpc-js), and
// KindGRPCRoundRobin asks for round_robin (gRPC C-core 1.50 and 1.51, which
// crash in ring_hash); docs/grpc-clients.md says why.
//
// # Endpoints
//
// The ClusterLoadAssignment is shared by all kinds. It has one locality
// (zones are endpoint metadata only: a ring per zone would fragment the
// caches the ring exists for) and lists endpoints sorted by ring key, the
// order grpc-go walks them in, so that Envoy, which walks EDS order, builds
// the identical ring. The locality's metadata
// filter_metadata["ringxds"]["cluster_version"] is the content version of
// the cluster's CDS resources, so a Cluster never changes without its CLA
// (docs/xds.md, "Wire order"). Endpoint metadata:
//
//   - filter_metadata["envoy.lb"]["hash_key"]: the endpoint's HashKey, when set.
//   - filter_metadata["ringxds"]: {"scheme", "zone"} (zone only when set);
//     for a fading endpoint also "fade_start" (RFC 3339, UTC),
//     "fade_duration" and "fade_exponent", so clients and replicas compute
//     the same share without extra pushes; and, in clusters laid out for
//     fade-in, "ring_entries", the endpoint's final entry count, and
//     "ring_sizes", the [minimum, maximum] ring sizes under which these
//     weights build their step's planned ring: the step's own and, where
//     exact, a neighbouring step's (see PairConsistent and
//     docs/fade-in.md). Servers before it published "ring_size" alone.
//
// # Decoding
//
// DecodeAs reads a published Cluster and ClusterLoadAssignment and builds
// the ring one implementation (a Dialect) would build from them, for the
// debug endpoint, the client verdicts and the client library; Decode does
// so for the implementation a Kind is chosen for. Disagreement measures how
// much of the key space two such rings send to different endpoints.
package snapshot
