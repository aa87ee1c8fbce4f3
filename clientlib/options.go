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
	nodeID       string
	metricsLabel string
	tls          *tls.Config
	insecure     bool
	dialOpts     []grpc.DialOption
	logger       *zap.Logger
	registerer   prometheus.Registerer
	backoffBase  time.Duration
	backoffMax   time.Duration
	budget       budgets
}

// budgets bound what a management server can make the client build.
type budgets struct {
	fadeEvents     int // distinct fade events per cluster
	clusterEntries int // ring entries per cluster, fade-in rings included
	entries        int // ring entries over all clusters
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
// the xDS stream and of every balancer) with r. Every series carries the
// constant label client (see WithMetricsLabel), so several Clients can
// share one registry.
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.registerer = r } }

// WithMetricsLabel sets the value of the client label on the Client's
// metrics; the default is the Dial target. Two Clients registering with one
// registry need different values.
func WithMetricsLabel(value string) Option { return func(o *options) { o.metricsLabel = value } }

// WithReconnectBackoff bounds the delay between attempts to reach the
// management server: exponential from base, at most maxDelay, full jitter.
// The defaults are 100 ms and 30 s.
func WithReconnectBackoff(base, maxDelay time.Duration) Option {
	return func(o *options) { o.backoffBase, o.backoffMax = base, maxDelay }
}

// WithFadeBudget bounds the distinct fade-in events (endpoints grouped by
// fade_start and curve) a cluster may have fading at once: the client builds
// one ring per event, and each pick looks at every event. A response with
// more is NACKed, naming the budget, and the cluster keeps its last good
// ring. The default is DefaultMaxFadeEvents; n < 1 is taken as 1.
func WithFadeBudget(n int) Option { return func(o *options) { o.budget.fadeEvents = max(n, 1) } }

// WithRingBudget bounds the ring entries the client holds for one cluster
// (its ring and, while endpoints fade in, every ring of its N-ring) and
// over all its clusters. A response that would exceed either is NACKed,
// naming the budget, before the fade-in rings are built, and the cluster
// keeps its last good ring. A ring entry costs about 11 bytes. The defaults
// are DefaultMaxClusterRingEntries and DefaultMaxRingEntries; a budget
// below a cluster's own ring (up to 8,388,608 entries for Envoy's largest
// ring_hash ring) rejects the cluster. Values below 1 are taken as 1.
func WithRingBudget(perCluster, total int) Option {
	return func(o *options) { o.budget.clusterEntries, o.budget.entries = max(perCluster, 1), max(total, 1) }
}

// Budgets, documented in docs/clientlib.md ("Hostile or broken servers").
const (
	// DefaultMaxFadeEvents is the fade-in events a cluster may have at
	// once. ringxds starts one per scale-up; 16 overlapping scale-ups
	// within one fade duration is far beyond a sane deployment.
	DefaultMaxFadeEvents = 16
	// DefaultMaxClusterRingEntries is 33,554,432 entries (about 370 MB):
	// Envoy's largest ring_hash ring, 8,388,608 entries, four times, so
	// even that ring can fade in one event (published ring, established
	// ring, one event's ring), and a Maglev cluster with its largest table
	// too.
	DefaultMaxClusterRingEntries = 4 * maxLegalRing
	// DefaultMaxRingEntries is 67,108,864 entries (about 740 MB) over all
	// the client's clusters.
	DefaultMaxRingEntries = 8 * maxLegalRing

	// maxLegalRing is Envoy's largest ring_hash ring.
	maxLegalRing = 8388608
)

// The client's keepalive: a ping after 30 s without frames, the connection
// dropped when it goes unanswered for 10 s. ringxds' server lets clients
// ping every 10 s (keepalive.EnforcementPolicy in internal/server); a
// server with a stricter policy needs WithDialOptions(grpc.WithKeepaliveParams(...)).
const (
	keepaliveTime    = 30 * time.Second
	keepaliveTimeout = 10 * time.Second
)

func defaultBudgets() budgets {
	return budgets{fadeEvents: DefaultMaxFadeEvents, clusterEntries: DefaultMaxClusterRingEntries, entries: DefaultMaxRingEntries}
}

// BalancerOption configures a Balancer. Options apply when the client
// creates the cluster's balancer; a later Balancer call for the same
// cluster, while it lives, returns it and refuses options
// (ErrBalancerOptions).
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
	idempotent  bool
	// Retry budget: retries in flight at most ratio x calls in flight, or
	// min.
	retryBudgetRatio float64
	retryBudgetMin   int
	// Ejection: after ejectAfter consecutive failed calls (0: never), for
	// ejectBase x recent ejections, at most ejectMax, and at most
	// maxEjectedShare of the endpoints (at least one).
	ejectAfter      int
	ejectBase       time.Duration
	ejectMax        time.Duration
	maxEjectedShare float64
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
	// DefaultRetryBudgetRatio and DefaultRetryBudgetMin bound retries in
	// flight to 20% of the calls in flight, or 3, Envoy's retry budget.
	DefaultRetryBudgetRatio = 0.2
	DefaultRetryBudgetMin   = 3
	// DefaultEjectAfter, DefaultEjectBase, DefaultEjectMax and
	// DefaultMaxEjectedShare are the ejection rule: 5 consecutive failed
	// calls take an endpoint out of picks for 10 s times its recent
	// ejections, at most 5 min, and at most half of the endpoints are out
	// at once (at least one). Envoy's outlier detection uses 5 failures,
	// 30 s and 300 s; an in-process client learns of a dead pod from the
	// server within seconds, so its ejections can be shorter.
	DefaultEjectAfter      = 5
	DefaultEjectBase       = 10 * time.Second
	DefaultEjectMax        = 5 * time.Minute
	DefaultMaxEjectedShare = 0.5
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

		retryBudgetRatio: DefaultRetryBudgetRatio,
		retryBudgetMin:   DefaultRetryBudgetMin,
		ejectAfter:       DefaultEjectAfter,
		ejectBase:        DefaultEjectBase,
		ejectMax:         DefaultEjectMax,
		maxEjectedShare:  DefaultMaxEjectedShare,
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
// by their normal requests. d <= 0 turns freeze detection off.
func WithFreezeAfter(d time.Duration) BalancerOption {
	return func(o *balancerOptions) { o.freezeAfter = max(d, 0) }
}

// WithRetry configures Do's single retry on a different endpoint: it waits
// a random pause in [0, jitter) and retries when retryIf(err) holds. A nil
// retryIf keeps the default: only errors for which ConnectFailed holds, or
// every error with WithIdempotent.
func WithRetry(jitter time.Duration, retryIf func(error) bool) BalancerOption {
	return func(o *balancerOptions) { o.retry, o.retryJitter, o.retryIf = true, max(jitter, 0), retryIf }
}

// WithIdempotent declares the calls made through Do safe to repeat, so a
// failed call is retried on another endpoint whatever its error (while the
// context is live). Without it, Do retries only calls that never reached
// their endpoint (ConnectFailed). Transport decides per request instead,
// by method and body (see Transport).
func WithIdempotent() BalancerOption { return func(o *balancerOptions) { o.idempotent = true } }

// WithRetryBudget bounds the retries in flight to ratio x the calls in
// flight, or min, whichever is larger (defaults 0.2 and 3): when a whole
// cluster fails, retries cannot multiply its load.
func WithRetryBudget(ratio float64, min int) BalancerOption {
	return func(o *balancerOptions) { o.retryBudgetRatio, o.retryBudgetMin = max(ratio, 0), max(min, 0) }
}

// WithEjection sets the ejection rule: after consecutive failed calls
// (Do explains which calls fail), an endpoint leaves the picks for base times its recent ejections,
// at most maxTime, with at most maxShare of the endpoints out at once (and
// at least one). after <= 0 turns ejection off. The defaults are 5, 10 s,
// 5 min and 0.5.
func WithEjection(after int, base, maxTime time.Duration, maxShare float64) BalancerOption {
	return func(o *balancerOptions) {
		o.ejectAfter, o.ejectBase, o.ejectMax = after, max(base, time.Millisecond), max(maxTime, base, time.Millisecond)
		o.maxEjectedShare = min(max(maxShare, 0), 1)
	}
}

// WithoutRetry turns Do's retry off.
func WithoutRetry() BalancerOption { return func(o *balancerOptions) { o.retry = false } }
