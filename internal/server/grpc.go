package server

import (
	"crypto/tls"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// GRPCOptions configure the xDS gRPC server's transport.
type GRPCOptions struct {
	// TLS, if set, serves xDS over TLS with this configuration, mTLS if it
	// requires client certificates; nil means plaintext. Build it with
	// package tlsreload to follow certificate and CA files as they rotate.
	TLS *tls.Config
	// MaxConnectionAge closes connections after this age (plus a grace
	// period) so clients spread over replicas after a scale-out. Zero
	// means 30 minutes, as Istio does.
	MaxConnectionAge time.Duration
	// ServerOptions are added after the transport's own, so they win:
	// Server.GRPCServerOptions, which enforce the per-connection limits.
	ServerOptions []grpc.ServerOption
}

// The transport's flow-control windows. A stream the server is not
// reading (its handler blocked on a client that does not read its
// responses) holds up to streamWindow of what the client sent, so it stays
// at HTTP/2's default: the per-stream memory the limits are sized by.
// grpc-go widens a stream's window for a larger message it is reading.
const (
	streamWindow = 64 << 10
	connWindow   = 1 << 20
)

// NewGRPCServer builds a grpc.Server tuned for long-lived xDS streams.
func NewGRPCServer(opts GRPCOptions) (*grpc.Server, error) {
	age := opts.MaxConnectionAge
	if age == 0 {
		age = 30 * time.Minute
	}
	sopts := []grpc.ServerOption{
		// A non-ADS Envoy opens one EDS stream per cluster; the HTTP/2
		// stream limit is not what refuses a client: --max-streams-per-
		// connection does, with a status (ServerOptions).
		grpc.MaxConcurrentStreams(math.MaxUint32),
		// Static flow-control windows turn off grpc-go's bandwidth-delay
		// estimation, which answered every request (a client's ACK) with
		// a window update and a ping, and read the ping's ack: a write and
		// a read more per response, on every connection. xDS requests are
		// small; one larger than the window (an Envoy naming tens of
		// thousands of clusters) still gets through, since grpc-go widens
		// a stream's window for the message it is reading.
		grpc.StaticStreamWindowSize(streamWindow),
		grpc.StaticConnWindowSize(connWindow),
		// Envoy pings every 15-30 s on idle connections; a stricter policy
		// would make the server GOAWAY healthy proxies.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  30 * time.Second,
			Timeout:               10 * time.Second,
			MaxConnectionAge:      age,
			MaxConnectionAgeGrace: 10 * time.Second,
		}),
	}
	if opts.TLS != nil {
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	return grpc.NewServer(append(sopts, opts.ServerOptions...)...), nil
}
