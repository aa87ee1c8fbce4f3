// Package e2e_test runs the xDS server end to end against real clients: the
// grpc-go xDS resolver and balancers, raw ADS streams, and real gRPC
// backends on loopback. Endpoints come from a real file through the file
// source, so reloads travel the same path as in production.
package e2e_test
