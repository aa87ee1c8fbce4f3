package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"

	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// subscription is what one request says about the CDS names a client
// wants: the whole set (SotW) or a change to it (delta).
type subscription struct {
	delta   bool
	names   []string // SotW: the whole set; delta: added
	removed []string // delta: removed
}

// maxTrackedClusters bounds the names kept per client for its verdicts: a
// client naming more is assessed on the first ones.
const maxTrackedClusters = 10000

// subscribe applies a CDS request to the clusters the client holds and
// reports whether they changed. Only a stream's first request can be a
// legacy wildcard (no names): a later SotW request with no names
// unsubscribes from everything, as go-control-plane reads it.
func (c *client) subscribe(s subscription) bool {
	first := c.clusters == nil
	if !s.delta && !first && (len(s.names) == 0 && c.legacyWildcard || c.sameClusters(s.names)) {
		// A SotW request restates the subscription with every ACK, a
		// legacy wildcard with no names again.
		return false
	}
	if !s.delta || first {
		c.clusters = make(map[string]struct{}, len(s.names))
		c.legacyWildcard = first && len(s.names) == 0
		c.cdsWildcard = c.legacyWildcard
	} else if len(s.names) > 0 || len(s.removed) > 0 {
		c.legacyWildcard = false
	}
	for _, name := range s.names {
		if name == "*" {
			c.cdsWildcard = true
			continue
		}
		if len(c.clusters) < maxTrackedClusters {
			c.clusters[name] = struct{}{}
		}
	}
	for _, name := range s.removed {
		if name == "*" {
			c.cdsWildcard = false
		}
		delete(c.clusters, name)
	}
	c.subsChanged = true
	return true
}

// sameClusters reports whether a SotW request names exactly the clusters
// already tracked.
func (c *client) sameClusters(names []string) bool {
	if slices.Contains(names, "*") != c.cdsWildcard {
		return false
	}
	n := 0
	for _, name := range names {
		if name == "*" {
			continue
		}
		if _, ok := c.clusters[name]; !ok {
			return false
		}
		n++
	}
	return n == len(c.clusters)
}

// clusterNames lists, sorted, the published clusters the client holds
// (those it may read, under az).
func (c *client) clusterNames(snap *snapshot.Snapshot, az *authorizer) []string {
	published := snap.Kinds[c.status.Kind][resource.ClusterType]
	var names []string
	if c.cdsWildcard {
		names = make([]string, 0, len(published))
		for name := range published {
			names = append(names, name)
		}
	} else {
		for name := range c.clusters {
			if _, ok := published[name]; ok {
				names = append(names, name)
			}
		}
	}
	if az != nil {
		// Refused clusters were never sent: there is nothing to judge.
		names = slices.DeleteFunc(names, func(name string) bool { return az.allow(c.identity, name) != "" })
	}
	slices.Sort(names)
	return names
}

// maxJudgedClusters bounds the clusters judged per client: gRPC clients
// hold a few; a wildcard client holding thousands is judged on the first
// ones, and says so.
const maxJudgedClusters = 1000

// maxReasonBytes bounds a client's error text kept and logged: it comes
// from the client.
const maxReasonBytes = 512

// truncate shortens client-supplied text to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "… (truncated)"
}

// queueAssessment asks the judging worker to judge the client again. c.mu
// is held. Judging never runs on a stream's goroutine: decoding the rings
// of a client holding many clusters would delay its responses.
func (r *registry) queueAssessment(c *client) {
	if c.status.Implementation.IsReference() && c.identified {
		return
	}
	r.queue.add(c)
}

// assess judges every cluster the client holds against the snapshot being
// published, and logs and counts what changed. Rings are decoded outside
// the client's lock, so /debug/clients never waits on a decode.
func (r *registry) assess(c *client) {
	c.mu.Lock()
	if r.current == nil || c.status.Implementation.IsReference() || c.closed {
		c.mu.Unlock()
		return
	}
	snap := r.current()
	if snap == nil || snap == c.assessed && !c.subsChanged {
		c.mu.Unlock()
		return
	}
	c.assessed, c.subsChanged = snap, false
	c.assessGen++
	gen, impl, names := c.assessGen, c.status.Implementation, c.clusterNames(snap, r.authz)
	nacks := maps.Clone(c.nacks)
	c.mu.Unlock()

	verdicts := r.judge(snap, impl, names, nacks)

	c.mu.Lock()
	defer c.mu.Unlock()
	if gen == c.assessGen && !c.closed {
		r.setVerdicts(c, verdicts)
	}
}

// judge computes a client's verdicts: a problem of the client as a whole
// (Cluster ""), or one verdict per cluster, with the clusters a rejected
// response named (or all, if it named none) incompatible.
func (r *registry) judge(snap *snapshot.Snapshot, impl dataplane.Client, names []string, nacks map[string]string) []dataplane.Verdict {
	if impl.Implementation != dataplane.Envoy && impl.Implementation != dataplane.Clientlib && !impl.Kind.Proxyless() {
		return []dataplane.Verdict{{State: dataplane.StateIncompatible, Reason: fmt.Sprintf(
			"%s is served the %q translation by its node metadata, which has no listeners: it cannot resolve any xds:/// target", impl.UserAgent(), impl.Kind)}}
	}
	var extra []dataplane.Verdict
	if len(names) > maxJudgedClusters {
		extra = append(extra, dataplane.Verdict{State: dataplane.StateUnverified, Reason: fmt.Sprintf(
			"the client holds %d clusters; the first %d (by name) were judged", len(names), maxJudgedClusters)})
		names = names[:maxJudgedClusters]
	}
	verdicts := append(r.assessor.Assess(snap, impl, names), extra...)
	for short, message := range nacks {
		named := namedIn(message, names)
		for i := range verdicts {
			if verdicts[i].Cluster == "" || len(named) > 0 && !named[verdicts[i].Cluster] {
				continue
			}
			verdicts[i] = dataplane.Verdict{Cluster: verdicts[i].Cluster, State: dataplane.StateIncompatible, Reason: fmt.Sprintf(
				"the client rejected (NACKed) its last %s response and runs its previous config, if any, until it accepts one: %s", short, message)}
		}
	}
	return verdicts
}

// namedIn returns the clusters a NACK's message names, as whole words:
// gRPC clients accept the valid resources of a response and name the ones
// they reject (gRFC A46); Envoy names the cluster too.
func namedIn(message string, names []string) map[string]bool {
	named := map[string]bool{}
	for _, name := range names {
		for rest := message; ; {
			i := strings.Index(rest, name)
			if i < 0 {
				break
			}
			before, after := i == 0 || !nameByte(rest[i-1]), i+len(name) == len(rest) || !nameByte(rest[i+len(name)])
			if before && after {
				named[name] = true
				break
			}
			rest = rest[i+len(name):]
		}
	}
	return named
}

func nameByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_' || b == '.'
}

// maxLoggedClusters is how many clusters one verdict log line names.
const maxLoggedClusters = 5

// setVerdicts records a client's verdicts, logging once per change the
// clusters whose state changed, and moving the client in the compatibility
// metric. c.mu is held.
func (r *registry) setVerdicts(c *client, verdicts []dataplane.Verdict) {
	before := make(map[string]string, len(c.status.Verdicts))
	for _, v := range c.status.Verdicts {
		before[v.Cluster] = v.State
	}
	var worse, better []string
	for _, v := range verdicts {
		was, known := before[v.Cluster]
		switch {
		case v.State != dataplane.StateOK && v.State != was:
			worse = append(worse, fmt.Sprintf("%s: %s: %s", clusterLabel(v.Cluster), v.State, v.Reason))
		case v.State == dataplane.StateOK && known && was != dataplane.StateOK:
			better = append(better, clusterLabel(v.Cluster))
		}
	}
	if len(worse) > 0 {
		r.log.Warn("xDS client does not send some keys where Envoy does",
			zap.String("node", c.status.NodeID), zap.String("implementation", c.status.Implementation.UserAgent()),
			zap.Int("clusters", len(worse)), zap.Strings("verdicts", worse[:min(len(worse), maxLoggedClusters)]))
	}
	if len(better) > 0 {
		r.log.Info("xDS client now agrees with Envoy on these clusters",
			zap.String("node", c.status.NodeID), zap.Int("clusters", len(better)), zap.Strings("names", better[:min(len(better), maxLoggedClusters)]))
	}
	worst := dataplane.Worst(verdicts)
	if worst != c.status.Compatibility {
		impl := c.status.Implementation.Implementation
		r.metrics.compatibility.WithLabelValues(impl, c.status.Compatibility).Dec()
		r.metrics.compatibility.WithLabelValues(impl, worst).Inc()
		c.status.Compatibility = worst
	}
	c.status.Verdicts = verdicts
}

func clusterLabel(name string) string {
	if name == "" {
		return "(client)"
	}
	return name
}

// reassessHolding queues every client holding one of the clusters for
// judging again: Envoy's resources for them changed, and the client, whose
// own resources may not have, gets no push to acknowledge.
func (r *registry) reassessHolding(clusters map[string]bool) {
	if len(clusters) == 0 {
		return
	}
	for _, c := range r.all() {
		c.mu.Lock()
		if c.identified && !c.status.Implementation.IsReference() && c.holdsAny(clusters) {
			c.assessed = nil
			r.queueAssessment(c)
		}
		c.mu.Unlock()
	}
}

func (c *client) holdsAny(clusters map[string]bool) bool {
	if c.cdsWildcard {
		return true
	}
	for name := range clusters {
		if _, ok := c.clusters[name]; ok {
			return true
		}
	}
	return false
}

// assessQueue holds the clients waiting to be judged, each once.
type assessQueue struct {
	mu      sync.Mutex
	pending map[*client]struct{}
	wake    chan struct{}
}

func newAssessQueue() *assessQueue {
	return &assessQueue{pending: make(map[*client]struct{}), wake: make(chan struct{}, 1)}
}

func (q *assessQueue) add(c *client) {
	q.mu.Lock()
	q.pending[c] = struct{}{}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns the clients waiting, emptying the queue.
func (q *assessQueue) take() []*client {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]*client, 0, len(q.pending))
	for c := range q.pending {
		out = append(out, c)
	}
	clear(q.pending)
	return out
}

// runAssessments judges queued clients until ctx ends. One worker bounds
// the CPU judging takes, whatever clients do.
func (r *registry) runAssessments(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.queue.wake:
		}
		for _, c := range r.queue.take() {
			if ctx.Err() != nil {
				return
			}
			r.assess(c)
		}
	}
}
