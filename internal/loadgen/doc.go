// Package loadgen drives an xds-server with many simulated xDS clients and
// measures what operators ask of a control plane at scale: how long an
// endpoint change takes to reach every subscriber, what each connected client
// costs the server in memory, how many bytes one change costs, how the server
// survives a reconnect storm, whether clients that stop reading hurt the
// others, and whether replicas that share no state send clients the same
// versions for the same content.
//
// The clients speak ADS the way the real data planes do: Envoy-like clients
// subscribe to every cluster (wildcard CDS, then EDS for each cluster, SotW
// or delta), gRPC-like clients follow LDS -> RDS -> CDS -> EDS for one or a
// few clusters (SotW, user agent "gRPC Go"). Every response is ACKed with its
// version and nonce.
//
// Correctness is checked against the file's history: each EDS response is
// decoded and its endpoint set looked up among the sets the tool wrote, so a
// client that receives content older than what it already holds, or content
// that was never written, is counted as an error.
//
// cmd/xds-loadgen is the command-line front end; hack/bench-scale.sh runs the
// matrix recorded in docs/benchmarks.md.
package loadgen
