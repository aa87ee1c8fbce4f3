// Package conformance is the server's xDS protocol conformance suite: raw
// ADS streams that behave on the wire as Envoy and the gRPC clients do
// (warming, NACKs, reconnects), over SotW and delta, against the real
// server. It holds tests only; docs/xds.md states the guarantees they pin.
package conformance
