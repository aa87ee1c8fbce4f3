package clientlib

import (
	"crypto/tls"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Option configures Dial.
type Option func(*options)

type options struct {
	nodeID      string
	tls         *tls.Config
	insecure    bool
	dialOpts    []grpc.DialOption
	logger      *zap.Logger
	registerer  prometheus.Registerer
	backoffBase time.Duration
	backoffMax  time.Duration
}

// WithNodeID sets the xDS node id the management server sees (its debug
// pages list clients by it). The default is the host name.
func WithNodeID(id string) Option { return func(o *options) { o.nodeID = id } }

// WithTLS connects to the management server over TLS with cfg.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithInsecure connects to the management server in plaintext, for
// loopback, a sidecar or a mesh that already encrypts.
func WithInsecure() Option { return func(o *options) { o.insecure = true } }

// WithDialOptions adds grpc-go dial options to the management server
// connection, e.g. per-RPC credentials.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// WithLogger sets the logger; the default discards logs.
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.logger = l } }

// WithRegisterer registers the client's Prometheus collector (metrics of
// the xDS stream and of every balancer) with r.
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.registerer = r } }

// WithReconnectBackoff bounds the delay between attempts to reach the
// management server: exponential from base, at most maxDelay, full jitter.
// The defaults are 100 ms and 30 s.
func WithReconnectBackoff(base, maxDelay time.Duration) Option {
	return func(o *options) { o.backoffBase, o.backoffMax = base, maxDelay }
}

// BalancerOption configures a Balancer. Options apply when the client
// first creates the cluster's balancer; later Balancer calls for the same
// cluster return it unchanged.
type BalancerOption func(*balancerOptions)

type balancerOptions struct {
	bounded     bool
	factor      float64
	maxInFlight int
	queueLimit  int
	freezeAfter time.Duration
	retry       bool
	retryJitter time.Duration
	retryIf     func(error) bool
}

// Defaults, documented in docs/clientlib.md.
const (
	// DefaultBalanceFactor is Zalando's bounded-load factor: an endpoint is
	// under its bound while its load stays within 1.25 x the average.
	DefaultBalanceFactor = 1.25
	// MaxWalk is how many distinct endpoints a bounded-load pick considers,
	// the key's owner included, before it settles for the least loaded.
	MaxWalk = 10
	// DefaultMaxInFlight caps a balancer's concurrent calls through Do.
	DefaultMaxInFlight = 4096
	// DefaultQueueLimit bounds the calls waiting for a slot under the cap.
	DefaultQueueLimit = 4096
	// DefaultFreezeAfter is the shortest time an endpoint may hold requests
	// without completing any before it counts as frozen.
	DefaultFreezeAfter = 200 * time.Millisecond
	// DefaultRetryJitter is the upper bound of the random pause before the
	// retry on another endpoint.
	DefaultRetryJitter = 5 * time.Millisecond
)

func defaultBalancerOptions() balancerOptions {
	return balancerOptions{
		bounded:     true,
		factor:      DefaultBalanceFactor,
		maxInFlight: DefaultMaxInFlight,
		queueLimit:  DefaultQueueLimit,
		freezeAfter: DefaultFreezeAfter,
		retry:       true,
		retryJitter: DefaultRetryJitter,
	}
}

// WithBoundedLoad switches occupancy-bounded load on (the default) or off.
// Off, every pick is the ring owner: the pure ring, as Envoy and grpc-go
// pick it.
func WithBoundedLoad(on bool) BalancerOption { return func(o *balancerOptions) { o.bounded = on } }

// WithBalanceFactor sets the bounded-load factor f (default 1.25); values
// below 1 are raised to 1.
func WithBalanceFactor(f float64) BalancerOption {
	return func(o *balancerOptions) { o.factor = max(f, 1) }
}

// WithMaxInFlight caps the balancer's concurrent Do calls at n and lets
// queue more wait for a slot in FIFO order; beyond that Do fails fast with
// an *OverloadError. n <= 0 removes the cap.
func WithMaxInFlight(n, queue int) BalancerOption {
	return func(o *balancerOptions) { o.maxInFlight, o.queueLimit = n, max(queue, 0) }
}

// WithFreezeAfter sets the minimum stall before an endpoint counts as
// frozen (default 200 ms). The effective threshold is the larger of d and
// four times the cluster's mean latency, so slow clusters are not flagged
// by their normal requests.
func WithFreezeAfter(d time.Duration) BalancerOption {
	return func(o *balancerOptions) { o.freezeAfter = d }
}

// WithRetry configures Do's single retry on a different endpoint: it waits
// a random pause in [0, jitter) and retries when retryIf(err) holds (nil
// means every error while the context is live).
func WithRetry(jitter time.Duration, retryIf func(error) bool) BalancerOption {
	return func(o *balancerOptions) { o.retry, o.retryJitter, o.retryIf = true, jitter, retryIf }
}

// WithoutRetry turns Do's retry off.
func WithoutRetry() BalancerOption { return func(o *balancerOptions) { o.retry = false } }
