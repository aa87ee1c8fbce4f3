package server

import (
	"fmt"
	"slices"

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
	if !s.delta && !first && (len(s.names) == 0 && c.cdsWildcard && len(c.clusters) == 0 || c.sameClusters(s.names)) {
		// A SotW request restates the subscription with every ACK, a
		// legacy wildcard with no names again.
		return false
	}
	if !s.delta || first {
		c.clusters = make(map[string]struct{}, len(s.names))
		c.cdsWildcard = first && len(s.names) == 0
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

// clusterNames lists, sorted, the published clusters the client holds.
func (c *client) clusterNames(snap *snapshot.Snapshot) []string {
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
	slices.Sort(names)
	return names
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
	gen, impl, names := c.assessGen, c.status.Implementation, c.clusterNames(snap)
	c.mu.Unlock()

	verdicts := r.assessor.Assess(snap, impl, names)

	c.mu.Lock()
	defer c.mu.Unlock()
	if gen == c.assessGen && !c.closed {
		r.setVerdicts(c, verdicts)
	}
}

// nacked marks every cluster the client holds incompatible after it
// rejected a CDS or EDS response: it keeps running whatever it held before,
// which may not be what Envoy runs now. Its next ACK assesses it again.
func (r *registry) nacked(c *client, short, message string) {
	if r.current == nil || c.status.Implementation.IsReference() {
		return
	}
	snap := r.current()
	if snap == nil {
		return
	}
	names := c.clusterNames(snap)
	verdicts := make([]dataplane.Verdict, len(names))
	for i, name := range names {
		verdicts[i] = dataplane.Verdict{Cluster: name, State: dataplane.StateIncompatible,
			Reason: fmt.Sprintf("the client rejected (NACKed) its last %s response and runs its previous config, if any: %s", short, message)}
	}
	c.assessed = nil
	c.assessGen++
	r.setVerdicts(c, verdicts)
}

// setVerdicts records a client's verdicts, logging each cluster whose state
// changed and moving the client in the compatibility metric. c.mu is held.
func (r *registry) setVerdicts(c *client, verdicts []dataplane.Verdict) {
	before := make(map[string]string, len(c.status.Verdicts))
	for _, v := range c.status.Verdicts {
		before[v.Cluster] = v.State
	}
	for _, v := range verdicts {
		was, known := before[v.Cluster]
		switch {
		case v.State != dataplane.StateOK && v.State != was:
			r.log.Warn("xDS client does not send this cluster's keys where Envoy does",
				zap.String("node", c.status.NodeID), zap.String("implementation", c.status.Implementation.UserAgent()),
				zap.String("cluster", v.Cluster), zap.String("verdict", v.State), zap.String("reason", v.Reason))
		case v.State == dataplane.StateOK && known && was != dataplane.StateOK:
			r.log.Info("xDS client now agrees with Envoy on this cluster",
				zap.String("node", c.status.NodeID), zap.String("cluster", v.Cluster))
		}
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
