package clientlib

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringxds/ringxds/clientlib/internal/ads"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// How the client identifies itself, so the server sends it clientlib
// resources (internal/server ClassifyNode reads both).
const (
	// UserAgent is the xDS node's user_agent_name.
	UserAgent = "ringxds-clientlib"
	// clientKindKey is the node metadata field naming the client kind.
	clientKindKey = "ringxds.io/client"
)

// Client holds one ADS stream to a ringxds server and the balancers of the
// clusters asked for through it.
type Client struct {
	log    *zap.Logger
	conn   *grpc.ClientConn
	node   *corev3.Node
	ads    *ads.Client
	cancel context.CancelFunc
	done   chan struct{}
	closed atomic.Bool

	// unknown notes the clusters the server was found not to publish, and
	// published the last list of those it does (unknown.go).
	unknownMu   sync.Mutex
	unknown     map[string]unknownNote
	published   []string
	publishedAt time.Time

	// xDS counters, exported by the collector.
	connected          atomic.Bool
	upSince            atomic.Int64          // unix nanos the current stream delivered its first response
	lastStreamErr      atomic.Pointer[error] // why the last stream ended, nil once one delivered
	acks, nacks        [2]atomic.Uint64      // by typeIndex
	reconnects         atomic.Uint64
	overBudgets        [numBudgets]atomic.Uint64 // resources NACKed, by budget
	unsolicited        atomic.Uint64             // resources dropped: not subscribed to
	budget             budgets
	metricsUnregister  func()
	ctx                context.Context // ends at Close; balancer tickers run under it
	mu                 sync.Mutex
	balancers          map[string]*balancer
	clusters           map[string]*clusterv3.Cluster                // accepted, by name
	endpoints          map[string]*endpointv3.ClusterLoadAssignment // accepted, by EDS service name
	subscribedClusters []string
}

const (
	typeCDS = iota
	typeEDS
)

// Dial connects to the ringxds (or any xDS) server at target, "host:port",
// and returns at once: the stream is set up in the background and retried
// with backoff for as long as the client lives. Transport security must be
// chosen with WithTLS or WithInsecure.
func Dial(ctx context.Context, target string, opts ...Option) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o := options{backoffBase: 100 * time.Millisecond, backoffMax: 30 * time.Second, budget: defaultBudgets()}
	for _, opt := range opts {
		opt(&o)
	}
	var creds credentials.TransportCredentials
	switch {
	case o.tls != nil:
		creds = credentials.NewTLS(o.tls)
	case o.insecure:
		creds = insecure.NewCredentials()
	default:
		return nil, ErrNoTransportSecurity
	}
	if o.logger == nil {
		o.logger = zap.NewNop()
	}
	if o.nodeID == "" {
		host, err := os.Hostname()
		if err != nil {
			host = "unknown"
		}
		o.nodeID = host
	}
	dialOpts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// grpc-go's own reconnect backoff tops out at 120 s; keep the
		// channel as eager as the stream loop above it.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: o.backoffBase, Multiplier: 1.6, Jitter: 0.2, MaxDelay: o.backoffMax},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithUserAgent(UserAgent),
		// Pings find a dead connection (a server gone without a FIN, a
		// dropped NAT entry) that an idle stream would never notice. The
		// interval stays above ringxds' enforcement minimum (10 s,
		// internal/server), so the server does not GOAWAY the client for
		// pinging too often; without a stream there is nothing to watch.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
	}, o.dialOpts...)
	conn, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("clientlib: dial %s: %w", target, err)
	}

	runCtx, cancel := context.WithCancel(context.Background())
	c := &Client{
		log:       o.logger,
		conn:      conn,
		cancel:    cancel,
		done:      make(chan struct{}),
		ctx:       runCtx,
		balancers: make(map[string]*balancer),
		clusters:  make(map[string]*clusterv3.Cluster),
		endpoints: make(map[string]*endpointv3.ClusterLoadAssignment),
		budget:    o.budget,
	}
	node := &corev3.Node{
		Id:            o.nodeID,
		UserAgentName: UserAgent,
		Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			clientKindKey: structpb.NewStringValue(string(snapshot.KindClientlib)),
		}},
	}
	c.node = node
	c.ads = ads.New(ads.Config{
		Conn:        conn,
		Node:        node,
		Handler:     (*handler)(c),
		Logger:      o.logger.Named("ads"),
		BackoffBase: o.backoffBase,
		BackoffMax:  o.backoffMax,
		Types:       []string{resourcev3.ClusterType, resourcev3.EndpointType},
	})
	if o.registerer != nil {
		label := o.metricsLabel
		if label == "" {
			label = target
		}
		reg := prometheus.WrapRegistererWith(prometheus.Labels{"client": label}, o.registerer)
		col := &collector{c: c}
		if err := reg.Register(col); err != nil {
			cancel()
			_ = conn.Close()
			return nil, fmt.Errorf("clientlib: register metrics with client=%q (give each Client sharing a registry its own WithMetricsLabel): %w", label, err)
		}
		c.metricsUnregister = func() { reg.Unregister(col) }
	}
	go func() {
		defer close(c.done)
		c.ads.Run(runCtx)
	}()
	return c, nil
}

// Close ends the stream and every balancer: their background work stops
// and Pick and Do return ErrClosed, as does a Balancer call still waiting.
func (c *Client) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	c.cancel()
	<-c.done
	c.mu.Lock()
	for name, b := range c.balancers {
		b.shutdown()
		delete(c.balancers, name)
	}
	c.mu.Unlock()
	if c.metricsUnregister != nil {
		c.metricsUnregister()
	}
	return c.conn.Close()
}

// Balancer returns the balancer of cluster, subscribing to it on first use,
// and waits, bounded by ctx, until the cluster's first CDS and EDS
// resources have arrived. Each Balancer that returns a balancer holds a
// reference to it: close the balancer when done with it, and the client
// unsubscribes once no reference is left (or closes it with the client).
//
// Options apply when the balancer is created; passing options for a
// cluster whose balancer exists returns ErrBalancerOptions. The error of a
// cluster that does not arrive wraps ErrNotReady and says why when the
// client knows: ErrUnknownCluster, ErrRejected or ErrNoServer.
func (c *Client) Balancer(ctx context.Context, cluster string, opts ...BalancerOption) (*Balancer, error) {
	if err := c.lockCtx(ctx); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNotReady, cluster, err)
	}
	if c.closed.Load() {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	b := c.balancers[cluster]
	if b != nil && len(opts) > 0 {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrBalancerOptions, cluster)
	}
	if b == nil {
		bo := defaultBalancerOptions()
		for _, opt := range opts {
			opt(&bo)
		}
		b = newBalancer(cluster, bo, c.log.With(zap.String("cluster", cluster)))
		b.life.owner, b.life.server, b.life.asked = c, c.serverState, time.Now()
		if note, ok := c.recentUnknown(cluster); ok {
			// Found missing moments ago: say so at once again, and do
			// not list every cluster again to say it.
			b.life.cause = unknownCause(cluster, "", note.didYouMean)
			b.life.didYouMean, b.life.suggested = note.didYouMean, true
		}
		var tickCtx context.Context
		tickCtx, b.life.cancel = context.WithCancel(c.ctx)
		c.balancers[cluster] = b
		go b.runTicker(tickCtx)
		c.subscribedClusters = append(c.subscribedClusters, cluster)
		// Subscribing under c.mu keeps concurrent first calls from
		// sending their name lists out of order (lock order: c.mu, then
		// the ADS client's).
		c.ads.Subscribe(resourcev3.ClusterType, slices.Clone(c.subscribedClusters))
	}
	b.life.refs++
	c.mu.Unlock()
	if err := b.wait(ctx); err != nil {
		c.release(b)
		return nil, err
	}
	return &Balancer{balancer: b}, nil
}

// lockCtx locks c.mu unless ctx ends first: the lock is held while a
// response is applied, which can take a while for large rings.
func (c *Client) lockCtx(ctx context.Context) error {
	if c.mu.TryLock() {
		return nil
	}
	got, abandoned := make(chan struct{}), make(chan struct{})
	go func() {
		c.mu.Lock()
		select {
		case got <- struct{}{}:
		case <-abandoned:
			c.mu.Unlock()
		}
	}()
	select {
	case <-got:
		return nil
	case <-ctx.Done():
		close(abandoned)
		return ctx.Err()
	}
}

// release drops one reference to b; the last one unsubscribes its cluster
// and shuts it down.
func (c *Client) release(b *balancer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.balancers[b.cluster] != b || b.life.refs == 0 {
		return
	}
	if b.life.refs--; b.life.refs > 0 {
		return
	}
	delete(c.balancers, b.cluster)
	c.subscribedClusters = slices.DeleteFunc(c.subscribedClusters, func(n string) bool { return n == b.cluster })
	if cds := c.clusters[b.cluster]; cds != nil {
		delete(c.clusters, b.cluster)
		delete(c.endpoints, edsName(cds))
		c.ads.Subscribe(resourcev3.EndpointType, c.edsNamesLocked())
	}
	c.ads.Subscribe(resourcev3.ClusterType, slices.Clone(c.subscribedClusters))
	b.shutdown()
}

// serverState says since when a stream has been delivering (zero if none
// has), and why the server cannot be heard: ErrNoServer with the last
// stream error, nil once a response arrived on the stream or, before any
// stream failed, while the connection is up.
func (c *Client) serverState() (time.Time, error) {
	since := time.Time{}
	if n := c.upSince.Load(); n != 0 {
		since = time.Unix(0, n)
	}
	if c.connected.Load() {
		return since, nil
	}
	if p := c.lastStreamErr.Load(); p != nil {
		return since, fmt.Errorf("%w: %w", ErrNoServer, *p)
	}
	if c.conn.GetState() == connectivity.Ready {
		return since, nil
	}
	return since, ErrNoServer
}

// Connected reports whether the stream to the management server is up and
// has delivered a response. Balancers keep picking while it is down.
func (c *Client) Connected() bool { return c.connected.Load() }

// handler is the Client as the ADS stream's Handler.
type handler Client

func (h *handler) Connected(up bool, err error) {
	c := (*Client)(h)
	if err != nil {
		c.lastStreamErr.Store(&err)
	}
	if up {
		c.upSince.Store(time.Now().UnixNano())
	}
	was := c.connected.Swap(up)
	if was && !up {
		c.reconnects.Add(1)
		c.log.Warn("lost the management server; picking from the last good rings", zap.Error(err))
	}
}

func (h *handler) Resources(typeURL, _ string, resources []*anypb.Any) error {
	c := (*Client)(h)
	var err error
	var ti int
	switch typeURL {
	case resourcev3.ClusterType:
		ti = typeCDS
		err = c.onClusters(resources)
	case resourcev3.EndpointType:
		ti = typeEDS
		err = c.onEndpoints(resources)
	default:
		return nil
	}
	if err != nil {
		c.nacks[ti].Add(1)
	} else {
		c.acks[ti].Add(1)
	}
	return err
}

// edsName is the EDS resource a cluster reads its endpoints from.
func edsName(cds *clusterv3.Cluster) string {
	if n := cds.GetEdsClusterConfig().GetServiceName(); n != "" {
		return n
	}
	return cds.GetName()
}

// probeAssignment stands in for a cluster's endpoints before they arrive,
// so a CDS resource is validated (its policy decoded) on its own.
func probeAssignment(name string) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: name,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 1},
				}}},
			}},
		}}}},
	}
}

// onClusters applies a CDS response. A resource clientlib cannot build a
// ring from is rejected and its cluster keeps its last good state; the
// others apply. A subscribed cluster missing from the response also keeps
// its state, marked stale: dropping a ring because of a control-plane
// mistake would stop traffic, and static stability is the point of running
// in-process. One that never had a ring is unknown to the server.
func (c *Client) onClusters(resources []*anypb.Any) error {
	var rejected []string
	c.mu.Lock()
	defer c.mu.Unlock()
	present := make(map[string]bool, len(resources))
	for _, a := range resources {
		cds := &clusterv3.Cluster{}
		if err := a.UnmarshalTo(cds); err != nil {
			rejected = append(rejected, fmt.Sprintf("undecodable Cluster: %v", err))
			continue
		}
		present[cds.GetName()] = true
		b := c.balancers[cds.GetName()]
		if b == nil {
			c.unsolicited.Add(1) // not asked for: dropped
			continue
		}
		if msg := c.applyClusterLocked(b, cds); msg != "" {
			rejected = append(rejected, msg)
		}
	}
	for name, b := range c.balancers {
		if !present[name] {
			c.missingLocked(b)
		}
	}
	c.ads.Subscribe(resourcev3.EndpointType, c.edsNamesLocked())
	return c.rejected(rejected)
}

// applyClusterLocked validates one Cluster against the endpoints it has
// (or a stand-in) and publishes its ring when both halves of a step are
// here. It returns the rejection, or "".
func (c *Client) applyClusterLocked(b *balancer, cds *clusterv3.Cluster) string {
	eds := edsName(cds)
	cla := c.endpoints[eds]
	probe := cla
	if probe == nil {
		probe = probeAssignment(eds)
	}
	d, err := snapshot.Decode(cds, probe, snapshot.KindClientlib)
	if err != nil && !errors.Is(err, snapshot.ErrNoEndpoints) {
		msg := fmt.Sprintf("cluster %q: %v", cds.GetName(), err)
		if b.state.Load() == nil {
			b.life.setCause(fmt.Errorf("%w: %s", ErrRejected, msg))
		}
		return msg
	}
	prev, hadPrev := c.clusters[cds.GetName()]
	c.clusters[cds.GetName()] = cds
	b.life.setSeen()
	c.forgetUnknown(b.cluster)
	if b.life.setStale(time.Time{}) {
		c.log.Info("cluster published again", zap.String("cluster", b.cluster))
	}
	if b.state.Load() == nil && cla == nil {
		b.life.setCause(nil) // known now; its endpoints are on their way
	}
	if cla == nil {
		return ""
	}
	if err := c.installLocked(b, cds, cla, d, err); err != nil {
		// The ring stays the last good one, and so does the Cluster it
		// was built from, for the endpoints to come.
		if hadPrev {
			c.clusters[cds.GetName()] = prev
		} else {
			delete(c.clusters, cds.GetName())
		}
		msg := fmt.Sprintf("cluster %q: %v", cds.GetName(), err)
		if b.state.Load() == nil {
			b.life.setCause(fmt.Errorf("%w: cluster %q: %w", ErrRejected, cds.GetName(), err))
		}
		return msg
	}
	return ""
}

// installLocked puts what cds and cla decoded to (d, or decodeErr) in use:
// no ring for an assignment without usable endpoints, else the ring once
// both halves of a fade step are here. A fade step changes CDS and EDS
// together, but they arrive as separate responses: the current ring stays
// until the other half arrives, or keys would move between old endpoints.
func (c *Client) installLocked(b *balancer, cds *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment, d *snapshot.Decoded, decodeErr error) error {
	switch {
	case errors.Is(decodeErr, snapshot.ErrNoEndpoints):
		b.setState(policyOf(cds), nil, nil, nil)
		b.ringEntries = 0
		b.life.setCause(nil)
		return nil
	case decodeErr != nil:
		return decodeErr
	case !snapshot.PairConsistent(cds, cla):
		return nil
	}
	return c.publishLocked(b, cds, cla, d)
}

// missingLocked handles a subscribed cluster absent from a CDS response.
func (c *Client) missingLocked(b *balancer) {
	if b.state.Load() == nil {
		if b.life.setUnknown(b.cluster) {
			go c.suggestFor(b, true)
		}
		return
	}
	if b.life.setStale(time.Now()) {
		c.log.Warn("the management server no longer publishes this cluster; picking from its last ring", zap.String("cluster", b.cluster))
	}
}

// policyOf is the ring dialect a cluster runs, decoded against a stand-in
// endpoint.
func policyOf(cds *clusterv3.Cluster) string {
	d, err := snapshot.Decode(cds, probeAssignment(edsName(cds)), snapshot.KindClientlib)
	if err != nil {
		return ""
	}
	return d.Policy
}

// edsNamesLocked lists the EDS resources of the accepted clusters.
func (c *Client) edsNamesLocked() []string {
	names := make([]string, 0, len(c.clusters))
	for _, cds := range c.clusters {
		names = append(names, edsName(cds))
	}
	return names
}

// onEndpoints applies an EDS response, rejecting assignments that do not
// decode into a ring with their cluster's policy. An assignment without
// endpoints is accepted, as Envoy and grpc-go accept it: Pick and Do then
// return ErrNoEndpoints.
//
// Assignments no accepted cluster reads are dropped unread: a server can
// send anything, and only what was asked for may take memory.
func (c *Client) onEndpoints(resources []*anypb.Any) error {
	var rejected []string
	c.mu.Lock()
	defer c.mu.Unlock()
	wanted := make(map[string]bool, len(c.clusters))
	for _, cds := range c.clusters {
		wanted[edsName(cds)] = true
	}
	for _, a := range resources {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := a.UnmarshalTo(cla); err != nil {
			rejected = append(rejected, fmt.Sprintf("undecodable ClusterLoadAssignment: %v", err))
			continue
		}
		if !wanted[cla.GetClusterName()] {
			c.unsolicited.Add(1)
			continue
		}
		ok := true
		for name, cds := range c.clusters {
			if edsName(cds) != cla.GetClusterName() {
				continue
			}
			b := c.balancers[name]
			d, err := snapshot.Decode(cds, cla, snapshot.KindClientlib)
			if err = c.installLocked(b, cds, cla, d, err); err != nil {
				rejected = append(rejected, fmt.Sprintf("endpoints %q: %v", cla.GetClusterName(), err))
				if b.state.Load() == nil {
					b.life.setCause(fmt.Errorf("%w: endpoints %q: %w", ErrRejected, cla.GetClusterName(), err))
				}
				ok = false
			}
		}
		if ok {
			c.endpoints[cla.GetClusterName()] = cla
		}
	}
	return c.rejected(rejected)
}

// rejected is the NACK's error_detail for the rejected resources, nil when
// there are none.
func (c *Client) rejected(rejected []string) error {
	if len(rejected) == 0 {
		return nil
	}
	err := errors.New(strings.Join(rejected, "; "))
	c.log.Warn("rejected xDS resources; keeping the last good state", zap.Error(err))
	return err
}

// publishLocked installs the ring decoded from cds and cla into b.
func (c *Client) publishLocked(b *balancer, cds *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment, d *snapshot.Decoded) error {
	eps := make([]Endpoint, len(d.Endpoints))
	for i, de := range d.Endpoints {
		eps[i] = Endpoint{Addr: de.Addr, meta: &endpointMeta{scheme: de.Scheme, zone: de.Zone, weight: de.Weight}}
	}
	// The ring budget: this cluster's rings, and all clusters' together.
	others := 0
	for _, o := range c.balancers {
		if o != b {
			others += o.ringEntries
		}
	}
	size := d.Ring.Size()
	left := min(c.budget.clusterEntries, c.budget.entries-others) - size
	if left < 0 {
		return c.countBudget(b, overRingBudget(size, others, c.budget))
	}
	fade, fadeEntries, err := newFader(cds, cla, d, time.Now(), c.budget.fadeEvents, left)
	if err != nil {
		return c.countBudget(b, err)
	}
	b.setState(d.Policy, eps, d.Ring, fade)
	b.ringEntries = size + fadeEntries
	b.life.setCause(nil)
	c.log.Debug("ring updated", zap.String("cluster", b.cluster), zap.String("policy", d.Policy), zap.Int("endpoints", len(eps)), zap.Bool("fading", fade != nil))
	return nil
}

// overRingBudget says which ring budget a cluster's ring of size entries
// exceeds with others entries held by the other clusters.
func overRingBudget(size, others int, bud budgets) error {
	if size > bud.clusterEntries {
		return &budgetError{budget: budgetClusterEntries, msg: fmt.Sprintf(
			"a ring of %d entries exceeds the ring-entry budget of %d per cluster (WithRingBudget)", size, bud.clusterEntries)}
	}
	return &budgetError{budget: budgetEntries, msg: fmt.Sprintf(
		"a ring of %d entries, with the %d the other clusters hold, exceeds the client's total ring-entry budget of %d (WithRingBudget)", size, others, bud.entries)}
}

// countBudget counts err when it is a budget's and returns it.
func (c *Client) countBudget(b *balancer, err error) error {
	var be *budgetError
	if errors.As(err, &be) {
		c.overBudgets[be.budget].Add(1)
		c.log.Warn("NACKing a cluster over budget; keeping its last good ring", zap.String("cluster", b.cluster), zap.Error(err))
	}
	return err
}
