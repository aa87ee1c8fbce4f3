// Package server is the xDS side of ringxds: it holds one cache (package
// xdscache) per client kind and resource type, feeds them from snapshots by
// diffing, and serves them with go-control-plane's stream handling over ADS
// (SotW and delta) and the per-type services on one gRPC server.
//
// The caches answer as go-control-plane's LinearCache does, rather than its
// SnapshotCache: they wake only the watches of resources that changed,
// marshal each resource once, and keep no per-node state that would grow
// with churned node IDs. Unlike LinearCache they cost a response what its
// change costs, not what its subscription does (../../docs/xds.md has the
// details). Client kinds (Envoy, proxyless gRPC, clientlib) are told apart
// by node metadata and user agent, and each kind reads its own caches,
// because a kind may need a different translation of the same cluster
// (gRPC must never see MAGLEV).
//
// Versions derive from content. The caches number SotW versions with a
// per-process counter; the server replaces each response's version with a
// hash of the resources it carries, so two replicas given the same input
// send identical versions and a client moving between them sees no change.
package server
