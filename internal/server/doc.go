// Package server is the xDS side of ringxds: it holds one go-control-plane
// LinearCache per client kind and resource type, feeds them from snapshots by
// diffing, and serves them over ADS (SotW and delta) and the per-type
// services on one gRPC server.
//
// Why LinearCache rather than SnapshotCache: a LinearCache only wakes the
// watches of resources that changed and marshals each resource once, and it
// keeps no per-node state that would grow with churned node IDs
// (../../docs/xds.md has the details). Client kinds (Envoy, proxyless gRPC,
// clientlib) are told apart by node metadata and user agent, and each kind
// reads its own caches, because a kind may need a different translation of
// the same cluster (gRPC must never see MAGLEV).
//
// Versions derive from content. go-control-plane numbers LinearCache
// versions with a per-process counter; the server replaces each response's
// version with a hash of the resources it carries, so two replicas given the
// same input send identical versions and a client moving between them sees
// no change.
package server
