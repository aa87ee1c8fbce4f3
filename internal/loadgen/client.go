package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// clientKind is how a simulated client talks to the server.
type clientKind int

const (
	// envoySotW subscribes to all clusters over SotW ADS, as Envoy does with
	// a wildcard CDS and an EDS request naming every cluster.
	envoySotW clientKind = iota
	// envoyDelta does the same over delta (incremental) ADS.
	envoyDelta
	// grpcSotW resolves xds:///cluster as grpc-go does: LDS, RDS, CDS, EDS
	// for the clusters it dials, over SotW ADS.
	grpcSotW
)

func (k clientKind) String() string {
	switch k {
	case envoySotW:
		return "envoy-sotw"
	case envoyDelta:
		return "envoy-delta"
	}
	return "grpc-sotw"
}

// sample is the first arrival at a client of a cluster's generation.
type sample struct {
	cluster, gen int
	at           time.Time
}

// shared is what every client of a run uses.
type shared struct {
	topo    *topology
	decoder *decoder
	// reconnectJitter bounds the random wait before a client reopens its
	// stream, so a storm is a storm and not a lockstep.
	reconnectJitter time.Duration
	log             *zap.Logger
	// book compares versions across replicas; nil with one server.
	book *versionBook
	// rateRefused counts streams the server refused over its new
	// connection rate: its documented smoothing of a reconnect storm,
	// which a client meets by retrying, not a failure.
	rateRefused atomic.Int64
}

// client is one simulated data plane with its own ADS stream. Its protocol
// state survives reconnects, as a real client's does: on a new stream it
// asks again for what it holds, with the versions it holds.
type client struct {
	id     int
	kind   clientKind
	node   *core.Node
	conn   grpc.ClientConnInterface
	gate   *gate // non-nil for a client that can be made to stop reading
	sh     *shared
	dialed []string // gRPC kind: the clusters it resolves
	rng    *rand.Rand

	// replica is the index of the server the client connects to.
	replica int

	// Protocol state, touched only by the client's goroutine.
	sotw  map[string]*sotwState
	delta map[string]*deltaState

	// The fields below are read by the runner while the client runs.
	mu sync.Mutex
	// last is the newest generation received per cluster index.
	last map[int]int
	// watched are the cluster indexes of the EDS names subscribed.
	watched map[int]bool
	// samples are first arrivals of generations, for propagation times.
	samples []sample
	// stale counts content older than what the client held; unknown,
	// content the file never held; errs, the first few protocol errors.
	stale, unknown int
	errs           []error
	// withdrawn counts clusters, listeners or assignments the server told
	// the client to drop. The file never removes any, so each one is a
	// window in which a real proxy would have had no route or no endpoint.
	withdrawn int
	// streams counts streams opened; liveAt is when the current one
	// first proved live; lastEDSAt, the latest EDS response.
	streams   int
	liveAt    time.Time
	lastEDSAt time.Time
	// edsBytes and edsPushes total the EDS responses received.
	edsBytes  int64
	edsPushes int
	// redundant counts EDS resources re-sent unchanged within a stream;
	// streamEDS is set once the current stream delivered EDS (the first
	// response of a SotW stream legitimately repeats everything).
	redundant int
	streamEDS bool
}

type sotwState struct {
	names   []string
	version string
	nonce   string
	sent    bool
	// held are the names the last full-state (LDS, CDS) response carried.
	held map[string]bool
}

type deltaState struct {
	versions   map[string]string
	subscribed map[string]bool
}

func newClient(id int, kind clientKind, conn grpc.ClientConnInterface, g *gate, sh *shared, dialed []string, seed uint64) *client {
	role := ""
	if g != nil {
		role = "slow-"
	}
	n := &core.Node{Id: fmt.Sprintf("loadgen-%s%s-%d", role, kind, id), Cluster: "xds-loadgen"}
	if kind == grpcSotW {
		n.UserAgentName = "gRPC Go"
		n.UserAgentVersionType = &core.Node_UserAgentVersion{UserAgentVersion: "1.85.0"}
	} else {
		n.UserAgentName = "envoy"
		n.UserAgentVersionType = &core.Node_UserAgentVersion{UserAgentVersion: "1.37.0"}
	}
	c := &client{
		id: id, kind: kind, node: n, conn: conn, gate: g, sh: sh, dialed: dialed,
		rng:     rand.New(rand.NewPCG(seed, uint64(id))),
		sotw:    map[string]*sotwState{},
		delta:   map[string]*deltaState{},
		last:    map[int]int{},
		watched: map[int]bool{},
	}
	return c
}

// run keeps a stream open until ctx ends, reopening it after any failure.
func (c *client) run(ctx context.Context) {
	for ctx.Err() == nil {
		var err error
		if c.kind == envoyDelta {
			err = c.deltaStream(ctx)
		} else {
			err = c.sotwStream(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil || isStreamEnd(err):
		case isRateRefusal(err):
			c.sh.rateRefused.Add(1)
		default:
			c.fail(err)
		}
		if err != nil {
			c.sh.log.Debug("stream ended", zap.String("node", c.node.GetId()), zap.Error(err))
		}
		wait := time.Duration(0)
		if c.sh.reconnectJitter > 0 {
			wait = time.Duration(c.rng.Int64N(int64(c.sh.reconnectJitter)))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (c *client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) < 5 {
		c.errs = append(c.errs, err)
	}
}

func (c *client) beginStream() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.streams++
	c.liveAt = time.Time{}
	c.streamEDS = false
}

// sotwStream runs one SotW ADS stream.
func (c *client) sotwStream(ctx context.Context) error {
	ads := discovery.NewAggregatedDiscoveryServiceClient(c.conn)
	st, err := ads.StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("open SotW stream: %w", err)
	}
	c.beginStream()
	for _, s := range c.sotw {
		s.nonce, s.sent = "", false
	}
	first := true
	send := func(typeURL string) error {
		s := c.sotwFor(typeURL)
		req := &discovery.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: s.version, ResponseNonce: s.nonce, ResourceNames: s.names}
		if first {
			req.Node, first = c.node, false
		}
		s.sent = true
		if err := st.Send(req); err != nil {
			return fmt.Errorf("send %s: %w", shortType(typeURL), err)
		}
		return nil
	}
	if err := c.resubscribe(send); err != nil {
		return err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		now := time.Now()
		c.markLive(now)
		if c.sh.book != nil {
			c.sh.book.sotw(c.replica, resp)
		}
		typeURL := resp.GetTypeUrl()
		s := c.sotwFor(typeURL)
		var next string // the type whose subscription this response changes
		var refs []string
		switch typeURL {
		case resource.EndpointType:
			c.observeEDS(resp.GetResources(), now, proto.Size(resp))
		case resource.ListenerType, resource.RouteType, resource.ClusterType:
			var names []string
			names, refs, err = c.refsOf(resp.GetResources())
			if err != nil {
				c.fail(err)
			}
			if typeURL != resource.RouteType {
				// LDS and CDS responses are full state: a name held
				// before and missing now is withdrawn.
				c.checkFullState(s, typeURL, names, now)
			}
			next = map[string]string{resource.ListenerType: resource.RouteType, resource.RouteType: resource.ClusterType, resource.ClusterType: resource.EndpointType}[typeURL]
		}
		s.version, s.nonce = resp.GetVersionInfo(), resp.GetNonce()
		if err := send(typeURL); err != nil { // ACK
			return err
		}
		if next != "" {
			slices.Sort(refs)
			refs = slices.Compact(refs)
			ns := c.sotwFor(next)
			if !slices.Equal(ns.names, refs) || !ns.sent {
				ns.names = refs
				if next == resource.EndpointType {
					c.setWatched(refs)
				}
				if err := send(next); err != nil {
					return err
				}
			}
		}
	}
}

// resubscribe opens a SotW stream's subscriptions. A reconnecting client
// asks again for everything it held, with the version it held, in
// dependency order.
func (c *client) resubscribe(send func(typeURL string) error) error {
	types := []string{resource.ClusterType, resource.EndpointType}
	if c.kind == grpcSotW {
		c.sotwFor(resource.ListenerType).names = c.dialed
		types = []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType}
	}
	for _, t := range types {
		if t != types[0] && len(c.sotwFor(t).names) == 0 {
			continue
		}
		if err := send(t); err != nil {
			return err
		}
	}
	return nil
}

func (c *client) sotwFor(typeURL string) *sotwState {
	s := c.sotw[typeURL]
	if s == nil {
		s = &sotwState{}
		c.sotw[typeURL] = s
	}
	return s
}

// deltaStream runs one delta ADS stream. On a reconnect it sends the
// resource versions it holds, so the server can skip what did not change.
func (c *client) deltaStream(ctx context.Context) error {
	ads := discovery.NewAggregatedDiscoveryServiceClient(c.conn)
	st, err := ads.DeltaAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("open delta stream: %w", err)
	}
	c.beginStream()
	cds, eds := c.deltaFor(resource.ClusterType), c.deltaFor(resource.EndpointType)
	if err := st.Send(&discovery.DeltaDiscoveryRequest{
		Node: c.node, TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"*"},
		InitialResourceVersions: cds.versions,
	}); err != nil {
		return fmt.Errorf("send cds: %w", err)
	}
	if len(eds.subscribed) > 0 {
		names := sortedKeys(eds.subscribed)
		if err := st.Send(&discovery.DeltaDiscoveryRequest{
			TypeUrl: resource.EndpointType, ResourceNamesSubscribe: names, InitialResourceVersions: eds.versions,
		}); err != nil {
			return fmt.Errorf("send eds: %w", err)
		}
	}
	// The stream is usable as soon as it is open: with all versions current
	// the server rightly sends nothing.
	c.markLive(time.Now())
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		now := time.Now()
		typeURL := resp.GetTypeUrl()
		anys := c.applyDelta(resp, now)
		var sub, unsub []string
		switch typeURL {
		case resource.EndpointType:
			c.observeEDS(anys, now, proto.Size(resp))
		case resource.ClusterType:
			_, refs, err := c.refsOf(anys)
			if err != nil {
				c.fail(err)
			}
			for _, name := range refs {
				if !eds.subscribed[name] {
					eds.subscribed[name] = true
					sub = append(sub, name)
				}
			}
			// A removed cluster takes its EDS subscription with it; names
			// are equal by construction (see internal/snapshot).
			for _, name := range resp.GetRemovedResources() {
				if eds.subscribed[name] {
					delete(eds.subscribed, name)
					delete(eds.versions, name)
					unsub = append(unsub, name)
				}
			}
		}
		if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: resp.GetNonce()}); err != nil {
			return fmt.Errorf("ack %s: %w", shortType(typeURL), err)
		}
		if len(sub) > 0 || len(unsub) > 0 {
			c.setWatched(sortedKeys(eds.subscribed))
			if err := st.Send(&discovery.DeltaDiscoveryRequest{
				TypeUrl: resource.EndpointType, ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub,
			}); err != nil {
				return fmt.Errorf("send eds: %w", err)
			}
		}
	}
}

// applyDelta records the versions a delta response sets and removes, and
// returns its resources.
func (c *client) applyDelta(resp *discovery.DeltaDiscoveryResponse, now time.Time) []*anypb.Any {
	if c.sh.book != nil {
		c.sh.book.delta(c.replica, resp)
	}
	ds := c.deltaFor(resp.GetTypeUrl())
	anys := make([]*anypb.Any, 0, len(resp.GetResources()))
	for _, r := range resp.GetResources() {
		ds.versions[r.GetName()] = r.GetVersion()
		anys = append(anys, r.GetResource())
	}
	for _, name := range resp.GetRemovedResources() {
		delete(ds.versions, name)
	}
	if len(resp.GetRemovedResources()) > 0 {
		c.withdraw(resp.GetTypeUrl(), resp.GetRemovedResources(), now)
	}
	return anys
}

func (c *client) deltaFor(typeURL string) *deltaState {
	s := c.delta[typeURL]
	if s == nil {
		s = &deltaState{versions: map[string]string{}, subscribed: map[string]bool{}}
		c.delta[typeURL] = s
	}
	return s
}

// refsOf returns the names of the resources and what they refer to.
func (c *client) refsOf(anys []*anypb.Any) (names, refs []string, err error) {
	var errs []error
	for _, a := range anys {
		d, err := c.sh.decoder.decode(a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		names = append(names, d.name)
		refs = append(refs, d.refs...)
	}
	return names, refs, errors.Join(errs...)
}

// checkFullState records the names of a full-state SotW response and
// counts those it dropped.
func (c *client) checkFullState(s *sotwState, typeURL string, names []string, now time.Time) {
	next := make(map[string]bool, len(names))
	for _, n := range names {
		next[n] = true
	}
	var gone []string
	for n := range s.held {
		if !next[n] {
			gone = append(gone, n)
		}
	}
	s.held = next
	if len(gone) > 0 {
		c.withdraw(typeURL, gone, now)
	}
}

func (c *client) withdraw(typeURL string, names []string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.withdrawn += len(names)
	slices.Sort(names)
	level := zap.DebugLevel
	if c.withdrawn == len(names) {
		level = zap.WarnLevel // the first time per client
	}
	if ce := c.sh.log.Check(level, "the server withdrew resources the file still holds"); ce != nil {
		ce.Write(zap.String("node", c.node.GetId()),
			zap.String("type", shortType(typeURL)), zap.Int("count", len(names)), zap.String("first", names[0]),
			zap.Int("stream", c.streams), zap.Time("at", now))
	}
}

func (c *client) markLive(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.liveAt.IsZero() {
		c.liveAt = now
	}
}

func (c *client) setWatched(edsNames []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watched = map[int]bool{}
	for _, n := range edsNames {
		if ci, ok := c.sh.topo.byName[n]; ok {
			c.watched[ci] = true
		}
	}
}

// observeEDS checks every assignment received against the file's history.
func (c *client) observeEDS(anys []*anypb.Any, now time.Time, size int) {
	type got struct{ ci, gen int }
	seen := make([]got, 0, len(anys))
	var errs []error
	for _, a := range anys {
		d, err := c.sh.decoder.decode(a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ci, gen := c.sh.topo.lookup(d.name, d.fp)
		if ci < 0 {
			errs = append(errs, fmt.Errorf("EDS for unknown cluster %q", d.name))
			continue
		}
		seen = append(seen, got{ci, gen})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, err := range errs {
		if len(c.errs) < 5 {
			c.errs = append(c.errs, err)
		}
	}
	c.edsBytes += int64(size)
	c.edsPushes++
	c.lastEDSAt = now
	for _, g := range seen {
		if g.gen < 0 {
			c.unknown++
			continue
		}
		last, known := c.last[g.ci]
		switch {
		case known && g.gen < last:
			// Older than what the client already holds: a real client would
			// roll back its endpoints.
			c.stale++
		case known && g.gen == last:
			if c.streamEDS {
				c.redundant++
				if c.redundant <= 3 {
					c.sh.log.Debug("EDS resource re-sent unchanged", zap.String("node", c.node.GetId()),
						zap.String("cluster", c.sh.topo.clusters[g.ci].name), zap.Int("gen", g.gen), zap.Int("stream", c.streams), zap.Int("resources", len(anys)))
				}
			}
		default:
			if known {
				for gen := last + 1; gen <= g.gen; gen++ {
					c.samples = append(c.samples, sample{g.ci, gen, now})
				}
			}
			c.last[g.ci] = g.gen
		}
	}
	c.streamEDS = true
}

// converged reports whether the client holds the target generation of
// every cluster it should watch: all of them for Envoy-like clients, the
// dialed ones for gRPC-like clients.
func (c *client) converged(target []int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.convergedLocked(target)
}

func (c *client) convergedLocked(target []int) bool {
	if c.kind == grpcSotW {
		for _, name := range c.dialed {
			ci := c.sh.topo.byName[name]
			if g, ok := c.last[ci]; !ok || g != target[ci] {
				return false
			}
		}
		return true
	}
	if len(c.watched) != len(target) {
		return false
	}
	for ci, want := range target {
		if g, ok := c.last[ci]; !ok || g != want {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func shortType(typeURL string) string {
	switch typeURL {
	case resource.ClusterType:
		return "cds"
	case resource.EndpointType:
		return "eds"
	case resource.ListenerType:
		return "lds"
	case resource.RouteType:
		return "rds"
	}
	return typeURL
}
