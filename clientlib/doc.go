// Package clientlib gives Go services the consistent-hash ring that Envoy
// and proxyless gRPC clients of the same ringxds server use, in process.
//
// A Client holds one ADS stream (state of the world, CDS and EDS) to the
// server and identifies itself as clientlib, so it receives each cluster's
// real policy: ring_hash, maglev or skipper. Each cluster gets a Balancer
// whose ring is decoded exactly as the data planes decode it, so a key
// picks the same endpoint here as in Envoy and grpc-go (ring_hash, maglev)
// or Skipper (skipper):
//
//	c, err := clientlib.Dial(ctx, "xds.example:18000", clientlib.WithInsecure())
//	...
//	defer c.Close()
//	b, err := c.Balancer(ctx, "products")
//	...
//	ep, err := b.Pick("product-123") // ep.Addr is "host:port"
//
// Around the ring, a Balancer adds what a client-side balancer needs at
// scale (after Zalando's in-process balancer, see docs/clientlib.md):
//
//   - occupancy-bounded load: an endpoint's load is max(in-flight,
//     occupancy) times a latency penalty; a key whose owner is over the
//     bound walks the ring, at most MaxWalk endpoints;
//   - freeze avoidance: an endpoint holding requests and completing none
//     is walked around until it completes again;
//   - N-ring fade-in, driven by the server's fade-in metadata, so a new
//     endpoint only ever receives keys it will own;
//   - Do: a tracked call with one jittered retry on a different endpoint,
//     and an in-flight cap with a FIFO wait queue that sheds beyond its
//     bound with an *OverloadError;
//   - Transport, an http.RoundTripper routing each request by its key.
//
// The ring keeps working when the server is unreachable: the last good
// state stays in use (static stability), resources the client cannot build
// a ring from are NACKed and ignored, and the stream reconnects with
// exponential backoff and jitter.
//
// Proxyless gRPC services use the sibling package grpcbalancer instead.
package clientlib
