// Package dataplane knows the data plane implementations ringxds serves:
// it recognises each from its xDS node (Identify), chooses the translation
// (snapshot.Kind) it reads correctly, knows how it builds rings at its
// version (Client.Dialect), and judges whether it sends a cluster's keys
// where Envoy does (Assess).
//
// The implementations differ in which CDS fields they read and in how they
// build ring_hash; docs/grpc-clients.md has the table and its sources. A
// client that silently runs another policy, or builds another ring, is the
// failure ringxds exists to prevent, so every such case is a Verdict the
// server shows on /debug/clients, on the debug page, in metrics and in the
// log.
package dataplane
