package server

import (
	"context"
	"slices"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
)

// A cluster's ClusterLoadAssignment must not reach a client before the
// Cluster it was built with. Envoy completes the warming of a changed
// Cluster with the first CLA that arrives after it, and a CLA that came
// first completes the warming of the previous Cluster instead: the new one
// then waits for a CLA the server has already sent (docs/xds.md, "Wire
// order"). Upserting CDS before EDS is not enough on its own: a stream that
// has not yet answered its last CDS response has no CDS watch open, so the
// Clusters wait in the cache for its answer while its EDS watch takes the
// CLAs at once. A push therefore holds its CLAs back until every stream
// holding a changed cluster has been sent the new Clusters.
const (
	// clusterWaitLimit bounds how long one push holds its CLAs back.
	clusterWaitLimit = time.Second
	// clusterAnswerStale: a stream that has not answered a CDS response for
	// this long is not waited for. It is not reading, and holding every
	// push back for it would delay all other clients.
	clusterAnswerStale = 2 * time.Second
)

// clusterSend is a stream that must be sent a CDS response after the one
// it was last sent.
type clusterSend struct {
	c     *client
	nonce string
}

// sentSince reports whether the stream was sent another CDS response after
// the one awaited, or closed.
func (p clusterSend) sentSince() bool {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	ts := p.c.status.Types[shortType(resource.ClusterType)]
	return p.c.closed || ts.SentNonce != p.nonce
}

// clusterChanges names, per CDS cache group, the clusters a push changes.
func clusterChanges(changes []change) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, ch := range changes {
		if ch.typeURL != resource.ClusterType || len(ch.upserts) == 0 {
			continue
		}
		names := make(map[string]bool, len(ch.upserts))
		for name := range ch.upserts {
			names[name] = true
		}
		out[ch.group] = names
	}
	return out
}

// clusterSends lists the streams that will be sent a changed cluster: each
// stream holding one that has a CDS exchange under way and has not stopped
// answering. It must be called before the Clusters reach the caches, so
// that each stream's last CDS nonce is that of the response before them.
func (r *registry) clusterSends(changed map[string]map[string]bool) []clusterSend {
	if len(changed) == 0 {
		return nil
	}
	now := r.now()
	var out []clusterSend
	for _, c := range r.all() {
		c.mu.Lock()
		names := changed[cacheGroup(c.status.Kind, resource.ClusterType)]
		ts := c.status.Types[shortType(resource.ClusterType)]
		if c.identified && ts != nil && len(names) > 0 && c.holdsAny(names) {
			_, unanswered := c.sentByNonce[ts.SentNonce]
			if !unanswered || now.Sub(ts.SentAt) < clusterAnswerStale {
				out = append(out, clusterSend{c, ts.SentNonce})
			}
		}
		c.mu.Unlock()
	}
	return out
}

// awaitClusterSends waits until every stream listed has been sent a CDS
// response after the one it was last sent, or closed, for at most limit. It
// returns the streams still waiting.
func (r *registry) awaitClusterSends(ctx context.Context, sends []clusterSend, limit time.Duration) []clusterSend {
	if len(sends) == 0 {
		return nil
	}
	start := time.Now()
	pause := 50 * time.Microsecond
	for {
		sends = slices.DeleteFunc(sends, clusterSend.sentSince)
		if len(sends) == 0 || time.Since(start) >= limit || ctx.Err() != nil {
			break
		}
		// Polling, not a signal: the wait is rare (a change within one
		// client's round trip) and short, and a signal would cost every
		// response a wake-up.
		time.Sleep(pause)
		pause = min(2*pause, 5*time.Millisecond)
	}
	r.metrics.clusterWait.Observe(time.Since(start).Seconds())
	if len(sends) > 0 {
		r.metrics.clusterWaitTimeouts.Add(float64(len(sends)))
		nodes := make([]string, 0, min(len(sends), 10))
		for _, p := range sends[:min(len(sends), 10)] {
			p.c.mu.Lock()
			nodes = append(nodes, p.c.status.NodeID)
			p.c.mu.Unlock()
		}
		r.log.Warn("clients were not sent their changed Clusters in time; their ClusterLoadAssignments go out first and may complete the warming of an older Cluster",
			zap.Int("clients", len(sends)), zap.Strings("nodes", nodes), zap.Duration("waited", limit))
	}
	return sends
}

// all returns every open stream.
func (r *registry) all() []*client {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*client, 0, len(r.streams))
	for _, c := range r.streams {
		out = append(out, c)
	}
	return out
}
