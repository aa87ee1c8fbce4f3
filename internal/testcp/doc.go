// Package testcp starts a complete in-process ringxds control plane for
// tests: the file source, the xDS server and the debug HTTP server, wired
// as cmd/xds-server wires them, plus real gRPC backends and grpc-go xDS
// clients to point at it. It listens on loopback only and stops everything
// through t.Cleanup.
//
// It is imported by tests only; nothing in the product depends on it.
package testcp
