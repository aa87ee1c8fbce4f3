package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/config"
	sotw "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/ringxds/ringxds/internal/authz"
	"github.com/ringxds/ringxds/internal/buildinfo"
	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/server/xdscache"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// Options configure a Server.
type Options struct {
	// Logger receives structured logs; nil means no logs.
	Logger *zap.Logger
	// Registerer receives the server's metrics; nil means none are registered.
	Registerer prometheus.Registerer
	// Now returns the current time; nil means time.Now. Fade-in steps are
	// computed against it.
	Now func() time.Time
	// Limits bound what one client can cost; nil means DefaultLimits.
	// The per-connection ones take effect on a gRPC server built with
	// GRPCServerOptions and a listener wrapped by Listen.
	Limits *Limits
	// Authz, if set, limits what each client reads to the clusters the
	// policy lets its certificate read (authz.go); nil serves every
	// client every cluster.
	Authz *authz.Policy
	// Replica names this server and its build in every ClientStatus and
	// CSDS answer; the zero value means buildinfo.Local().
	Replica buildinfo.Replica
}

// Server publishes snapshots to xDS clients.
type Server struct {
	log      *zap.Logger
	metrics  *metrics
	registry *registry
	limiter  *limiter
	now      func() time.Time
	// authz is nil when every client reads every cluster.
	authz *authorizer

	caches map[string]*xdscache.Cache
	// groups lists, per type URL in resourceTypes order, each cache group of
	// that type with the first kind that reads it. Fixed at New.
	groups map[string][]groupRef
	xds    serverv3.Server

	ctx context.Context

	builder *snapshot.Builder

	applyMu sync.Mutex
	// last is the most recent State applied; fade-in steps rebuild from it.
	last model.State
	// failed is the last build's Snapshot.Failed, so each error is logged
	// once, not at every retry.
	failed    map[string]string
	stepTimer *time.Timer
	// builtAt is the instant the published snapshot was built for, the
	// fade-in step in force; clockBehind is set while a build is held
	// there because the clock went back (buildInstant).
	builtAt     time.Time
	clockBehind bool
	// published holds, per cache group, every resource in that cache with
	// its content version, so Apply touches only what changed and hashes
	// only resources the builder did not reuse.
	published map[string]map[string]publishedResource
	current   atomic.Pointer[snapshot.Snapshot]
	// publishing is the snapshot whose resources are going into the caches:
	// current, or the next one while Apply updates the caches. Clients
	// acknowledge pushes of it before Apply stores it as current, so their
	// verdicts are judged against it.
	publishing atomic.Pointer[snapshot.Snapshot]
	// ready is closed by the first successful Apply.
	ready     chan struct{}
	readyOnce sync.Once
}

// resourceTypes in the order upserts reach the caches, and so the wire
// (docs/xds.md, "Wire order"):
//   - CDS before EDS, so that a cluster whose CDS changed is followed by
//     its ClusterLoadAssignment. Envoy keeps an updated cluster warming
//     until a CLA arrives after it, and does not ask again for one it
//     already holds: only a response the server sends on its own completes
//     the warming. Every CLA carries its Cluster's version in its locality
//     metadata, so a Cluster change always changes the CLA too, and push
//     holds the CLAs back until the Clusters are sent (order.go).
//   - CDS and EDS before RDS and LDS, so a client following a new route or
//     listener finds the cluster published.
var resourceTypes = []string{resource.ClusterType, resource.EndpointType, resource.RouteType, resource.ListenerType}

// deleteTypes is the order of removals: whatever refers to a resource goes
// before it, so no client is left holding a dangling reference.
var deleteTypes = []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType}

// Kinds are the client kinds the server translates for.
var Kinds = snapshot.AllKinds()

// cacheGroup names the cache a kind reads a type from. Kinds share a cache
// where their translations are identical by construction, so each shared
// resource is marshalled once: EDS is the same for every kind, and LDS/RDS
// are the same for every proxyless kind.
func cacheGroup(kind snapshot.Kind, typeURL string) string {
	switch typeURL {
	case resource.EndpointType:
		return "all/eds"
	case resource.ListenerType, resource.RouteType:
		if !kind.Proxyless() {
			return "envoy/" + shortType(typeURL)
		}
		return "proxyless/" + shortType(typeURL)
	}
	return string(kind) + "/" + shortType(typeURL)
}

// New creates a Server with empty caches. It serves nothing until the first
// Apply.
func New(ctx context.Context, opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	m := newMetrics(opts.Registerer)
	limits := DefaultLimits()
	if opts.Limits != nil {
		limits = *opts.Limits
	}
	// Rates are measured on the wall clock, not on Options.Now, which
	// tests stop to hold a fade step.
	lim := newLimiter(limits, log, m, time.Now)
	s := &Server{
		log:       log,
		metrics:   m,
		registry:  newRegistry(log, m),
		limiter:   lim,
		now:       now,
		caches:    make(map[string]*xdscache.Cache),
		published: make(map[string]map[string]publishedResource),
		builder:   snapshot.NewBuilder(),
		ctx:       ctx,
		ready:     make(chan struct{}),
	}
	s.registry.now = now
	s.registry.replica = opts.Replica
	if s.registry.replica == (buildinfo.Replica{}) {
		s.registry.replica = buildinfo.Local()
	}
	s.registry.limiter = lim
	s.registry.current = s.publishing.Load
	if opts.Authz != nil {
		s.authz = newAuthorizer(opts.Authz)
		s.registry.authz = s.authz
	}
	go s.registry.runAssessments(ctx)
	cpLog := cpLogger{log.Named("go-control-plane").Sugar()}
	mux := &cache.MuxCache{Caches: make(map[string]cache.Cache)}
	s.groups = make(map[string][]groupRef, len(resourceTypes))
	for _, k := range Kinds {
		for _, t := range resourceTypes {
			g := cacheGroup(k, t)
			if _, ok := s.caches[g]; !ok {
				s.caches[g] = xdscache.New(t)
				mux.Caches[g] = s.caches[g]
				s.groups[t] = append(s.groups[t], groupRef{g, k})
			}
		}
	}
	mux.Caches[unservedGroup] = unservedCache{}
	mux.Classify = func(r *cache.Request) string { return classify(r.GetNode(), r.GetTypeUrl()) }
	mux.ClassifyDelta = func(r *cache.DeltaRequest) string { return classify(r.GetNode(), r.GetTypeUrl()) }
	// EDS and RDS are never legitimately wildcard; an empty request for them
	// (a gRPC client unsubscribing its last name) must not become one.
	// Ordered ADS sends each SotW stream's responses in the order the
	// caches produced them (delta streams always do), which the wire order
	// above relies on; the default picks among ready types at random.
	s.xds = serverv3.NewServer(ctx, mux, callbacks{s.registry},
		config.DeactivateLegacyWildcardForTypes([]string{resource.EndpointType, resource.RouteType}),
		sotw.WithOrderedADS(),
		sotw.WithLogger(cpLog),
	)
	return s
}

const unservedGroup = "unserved"

// classify routes a request to its cache. Types ringxds does not serve (an
// Envoy asking for secrets or runtime over ADS) go to a cache that never
// answers, as if the server had no such resource, rather than failing the
// whole ADS stream.
func classify(n *core.Node, typeURL string) string {
	switch typeURL {
	case resource.EndpointType, resource.ClusterType, resource.RouteType, resource.ListenerType:
		return cacheGroup(dataplane.Identify(n).Kind, typeURL)
	}
	return unservedGroup
}

// Register adds the ADS service, the per-type CDS, EDS, LDS and RDS
// services (SotW and delta) and CSDS (csds.go) to g.
func (s *Server) Register(g *grpc.Server) {
	statusv3.RegisterClientStatusDiscoveryServiceServer(g, csds{s: s})
	discovery.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
	clusterservice.RegisterClusterDiscoveryServiceServer(g, s.xds)
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, s.xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, s.xds)
	routeservice.RegisterRouteDiscoveryServiceServer(g, s.xds)
}

// Apply translates state and publishes what changed. On a build error the
// previously published snapshot stays in force and the error is returned.
func (s *Server) Apply(state model.State) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	return s.applyLocked(state)
}

// scheduleStep arranges for the last State to be rebuilt when the published
// snapshot says its resources change next (a fade-in step), so fades
// progress without any input change.
//
// A timer measures elapsed time, while steps are instants of the server's
// clock, which can be stepped (NTP, a resumed VM). So the timer looks at the
// clock at least once a fadein.StepInterval, and rebuilds once the clock has
// reached the step or at least a later step than the one published: a
// clock stepped forward is followed within a second, and one stepped back
// holds the fade at the step published, rather than rebuilding at an
// earlier step or sleeping for as long as the step was.
func (s *Server) scheduleStep(at time.Time) {
	if s.stepTimer != nil {
		s.stepTimer.Stop()
		s.stepTimer = nil
	}
	if at.IsZero() || s.ctx.Err() != nil {
		return
	}
	// Set under applyMu, which the callback takes before reading it.
	var timer *time.Timer
	timer = time.AfterFunc(min(max(at.Sub(s.now()), 0), fadein.StepInterval), func() {
		if s.ctx.Err() != nil {
			return
		}
		s.applyMu.Lock()
		defer s.applyMu.Unlock()
		if s.stepTimer != timer {
			return // an Apply since has scheduled its own step
		}
		if now := s.now(); now.Before(at) && !fadein.StepTime(now).After(fadein.StepTime(s.builtAt)) {
			s.scheduleStep(at)
			return
		}
		st := s.last
		st.ChangedAt = time.Time{} // a step is not an input change
		if err := s.applyLocked(st); err != nil {
			s.log.Error("fade-in step failed; retrying in 1 s", zap.Error(err))
			s.scheduleStep(s.now().Add(time.Second))
		}
	})
	s.stepTimer = timer
}

// buildInstant is the instant to build state for: the clock's now, unless
// the clock is behind the instant the published snapshot was built for
// while an endpoint published then is fading at now. Built at the earlier
// instant, that endpoint would hold fewer ring entries than it was
// published with, and the keys it took would go back to old endpoints; the
// published step is held instead until the clock passes it. An endpoint
// added meanwhile is planned at that step too, so it may skip part of its
// fade.
func (s *Server) buildInstant(state model.State, now time.Time) time.Time {
	if !now.Before(s.builtAt) || !fadingAt(state, s.last, now) {
		s.clockBehind = false
		return now
	}
	if !s.clockBehind {
		s.clockBehind = true
		s.log.Warn("the clock went back behind the fade-in step already published; fades hold at that step until the clock passes it",
			zap.Time("clock", now), zap.Time("step", s.builtAt))
	}
	return s.builtAt
}

// fadingAt reports whether an endpoint of state that prev has too is
// fading at now, or has a start still ahead of it: an endpoint whose
// published ring entries a build at now could take back.
func fadingAt(state, prev model.State, now time.Time) bool {
	step := fadein.StepTime(now)
	for i := range state.Clusters {
		c := &state.Clusters[i]
		p, ok := prev.Cluster(c.Name)
		if c.FadeIn == nil || !ok {
			continue
		}
		published := make(map[string]bool, len(p.Endpoints))
		for _, ep := range p.Endpoints {
			published[ep.HostPort()] = true
		}
		curve := fadein.Curve{Duration: c.FadeIn.Duration, Exponent: c.FadeIn.Exponent}
		for _, ep := range c.Endpoints {
			if !ep.FirstSeen.IsZero() && curve.Share(step.Sub(ep.FirstSeen)) < 1 && published[ep.HostPort()] {
				return true
			}
		}
	}
	return false
}

func (s *Server) applyLocked(state model.State) error {
	start := s.now()
	at := s.buildInstant(state, start)
	snap, err := s.builder.Build(state, at)
	if err != nil {
		s.metrics.buildErrors.Inc()
		s.log.Error("snapshot build failed; keeping the published snapshot", zap.Error(err))
		return fmt.Errorf("build snapshot: %w", err)
	}
	built := s.now()
	s.metrics.buildSeconds.Observe(built.Sub(start).Seconds())

	var reauthorized map[string]bool
	if s.authz != nil {
		// Before the push: its responses are filtered with these readers.
		reauthorized = s.authz.update(state, s.log)
	}
	changes, next, err := s.diff(snap, reauthorized)
	if err != nil {
		s.metrics.buildErrors.Inc()
		s.log.Error("snapshot has resources that cannot be serialized; keeping the published snapshot", zap.Error(err))
		return err
	}
	s.publishing.Store(snap)
	if err := s.push(changes); err != nil {
		s.publishing.Store(s.current.Load())
		return err
	}
	s.published = next
	s.last = state
	s.builtAt = at
	s.metrics.fading.Reset()
	for _, c := range state.Clusters {
		s.metrics.fading.WithLabelValues(c.Name).Set(float64(len(snap.Fading[c.Name])))
	}
	s.reportFailed(snap.Failed)
	s.current.Store(snap)
	s.registry.reassessHolding(envoyClusterChanges(changes))
	s.readyOnce.Do(func() { close(s.ready) })
	s.scheduleStep(snap.NextStep)
	done := s.now()
	s.metrics.applySeconds.Observe(done.Sub(start).Seconds())
	if !state.ChangedAt.IsZero() {
		s.metrics.changeToPush.Observe(done.Sub(state.ChangedAt).Seconds())
	}
	s.log.Info("snapshot published", zap.Int("clusters", len(state.Clusters)),
		zap.Duration("build", built.Sub(start)), zap.Duration("apply", done.Sub(start)))
	return nil
}

// reportFailed logs the clusters the build could not translate, once per
// distinct error rather than at every retry, and sets their gauge.
func (s *Server) reportFailed(failed map[string]string) {
	s.metrics.failedClusters.Reset()
	for name, why := range failed {
		s.metrics.failedClusters.WithLabelValues(name).Set(1)
		if s.failed[name] != why {
			s.log.Error("cluster cannot be translated; it keeps its last good resources, or stays unpublished if it has none",
				zap.String("cluster", name), zap.String("error", why))
		}
	}
	for name := range s.failed {
		if _, still := failed[name]; !still {
			s.log.Info("cluster translated again", zap.String("cluster", name))
		}
	}
	s.failed = failed
}

// change is what one cache group must add, update and remove. encoded
// holds the encodings diff made of upserted resources, which the cache
// then need not make again.
type change struct {
	typeURL string
	group   string
	upserts map[string]types.Resource
	encoded map[string][]byte
	deletes []string
}

// diff compares snap with what the caches hold, by content version, and
// returns the changes per cache group (in resourceTypes order) and the
// caches' contents once they are applied. Resources the builder reused are
// not hashed again. The resources of the clusters in reauthorized are
// upserted even if unchanged: who may read them changed, and an upsert is
// what makes the caches answer the streams holding or refused them.
func (s *Server) diff(snap *snapshot.Snapshot, reauthorized map[string]bool) ([]change, map[string]map[string]publishedResource, error) {
	var changes []change
	next := make(map[string]map[string]publishedResource, len(s.published))
	var errs []error
	for _, t := range resourceTypes {
		for _, g := range s.groups[t] {
			res := snap.Kinds[g.kind][t]
			prev := s.published[g.name]
			versions := make(map[string]publishedResource, len(res))
			ch := change{typeURL: t, group: g.name, upserts: make(map[string]types.Resource), encoded: make(map[string][]byte)}
			for name, r := range res {
				p, had := prev[name]
				if had && p.res == r {
					versions[name] = p // reused by the builder: unchanged
					if reauthorized[name] {
						ch.upserts[name] = r
					}
					continue
				}
				b, err := snapshot.Encode(r)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s %q: %w", shortType(t), name, err))
					continue
				}
				v := snapshot.VersionOf(b)
				versions[name] = publishedResource{res: r, version: v}
				if !had || p.version != v || reauthorized[name] {
					ch.upserts[name] = r
					ch.encoded[name] = b
				}
			}
			for name := range prev {
				if _, ok := res[name]; !ok {
					ch.deletes = append(ch.deletes, name)
				}
			}
			sort.Strings(ch.deletes)
			next[g.name] = versions
			changes = append(changes, ch)
			s.metrics.resources.WithLabelValues(string(g.kind), shortType(t)).Set(float64(len(res)))
		}
	}
	return changes, next, errors.Join(errs...)
}

// envoyClusterChanges names the clusters whose Envoy CDS changed: every
// client's verdict on them compares with what Envoy runs.
func envoyClusterChanges(changes []change) map[string]bool {
	names := map[string]bool{}
	for _, ch := range changes {
		if ch.group != cacheGroup(snapshot.KindEnvoy, resource.ClusterType) {
			continue
		}
		for name := range ch.upserts {
			names[name] = true
		}
		for _, name := range ch.deletes {
			names[name] = true
		}
	}
	return names
}

// push writes the changes to the caches, which notify the watches: upserts
// in resourceTypes order, then removals in deleteTypes order. The CLAs of
// changed clusters wait for their Clusters to be sent (order.go); the
// others go out at once.
func (s *Server) push(changes []change) error {
	byGroup, changedClusters := clusterChanges(changes)
	clusterSends := s.registry.clusterSends(byGroup)
	for _, ch := range changes {
		if len(ch.upserts) == 0 {
			continue
		}
		if ch.typeURL == resource.EndpointType && len(clusterSends) > 0 {
			rest, held := splitUpserts(ch.upserts, changedClusters)
			if err := s.upsert(ch.group, rest, ch.encoded); err != nil {
				return err
			}
			s.registry.awaitClusterSends(s.ctx, clusterSends, clusterWaitLimit)
			clusterSends = nil
			if err := s.upsert(ch.group, held, ch.encoded); err != nil {
				return err
			}
			continue
		}
		if err := s.upsert(ch.group, ch.upserts, ch.encoded); err != nil {
			return err
		}
	}
	for _, t := range deleteTypes {
		for _, ch := range changes {
			if ch.typeURL != t || len(ch.deletes) == 0 {
				continue
			}
			if err := s.caches[ch.group].UpdateResources(nil, ch.deletes); err != nil {
				return fmt.Errorf("update %s: %w", ch.group, err)
			}
			s.metrics.snapshotChanges.WithLabelValues(ch.group, "delete").Add(float64(len(ch.deletes)))
		}
	}
	return nil
}

// upsert writes resources to one cache group, if there are any, with the
// encodings diff made of them.
func (s *Server) upsert(group string, upserts map[string]types.Resource, encoded map[string][]byte) error {
	if len(upserts) == 0 {
		return nil
	}
	if err := s.caches[group].UpdateEncoded(upserts, encoded, nil); err != nil {
		return fmt.Errorf("update %s: %w", group, err)
	}
	s.countChanges(group, upserts, s.published[group])
	return nil
}

// splitUpserts separates the resources named in held from the rest.
func splitUpserts(upserts map[string]types.Resource, held map[string]bool) (rest, heldBack map[string]types.Resource) {
	rest, heldBack = make(map[string]types.Resource, len(upserts)), make(map[string]types.Resource)
	for name, r := range upserts {
		if held[name] {
			heldBack[name] = r
		} else {
			rest[name] = r
		}
	}
	return rest, heldBack
}

// publishedResource is a resource in a cache and its content version.
type publishedResource struct {
	res     types.Resource
	version string
}

func (s *Server) countChanges(group string, upserts map[string]types.Resource, prev map[string]publishedResource) {
	var added, updated int
	for name := range upserts {
		if _, ok := prev[name]; ok {
			updated++
		} else {
			added++
		}
	}
	if added > 0 {
		s.metrics.snapshotChanges.WithLabelValues(group, "add").Add(float64(added))
	}
	if updated > 0 {
		s.metrics.snapshotChanges.WithLabelValues(group, "update").Add(float64(updated))
	}
}

// groupRef is a cache group and the first kind that reads it.
type groupRef struct {
	name string
	kind snapshot.Kind
}

// Current returns the published snapshot, or nil before the first Apply.
func (s *Server) Current() *snapshot.Snapshot { return s.current.Load() }

// Ready reports whether a snapshot has been published.
func (s *Server) Ready() bool { return s.current.Load() != nil }

// WaitReady blocks until the first snapshot is published or ctx ends.
//
// Streams must not be served before then: the caches are empty, so a
// reconnecting delta client would be told every resource it holds was
// removed, and a SotW client could receive an empty cluster list, which
// makes an Envoy drop every cluster. Callers bind the socket early and
// start serving after WaitReady; clients wait in the listen backlog.
func (s *Server) WaitReady(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Clients returns the status of every open xDS stream.
func (s *Server) Clients() []ClientStatus { return s.registry.snapshot() }

// RefusedConnections lists the last connections (at most 64) the server
// refused anything on, over a limit, the most recent first.
func (s *Server) RefusedConnections() []RefusedConnection { return s.limiter.refusedConnections() }

// NumWatches reports open watches across all caches, for tests and metrics.
func (s *Server) NumWatches() int {
	n := 0
	for _, c := range s.caches {
		n += c.NumWatches()
	}
	return n
}
