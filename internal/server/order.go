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
// CLAs at once. A push therefore holds the CLAs of the changed clusters
// back until every stream holding one has been sent the new Clusters.
//
// The hold is shared by all streams, so it waits only for streams that
// answer CDS quickly: one slow or stuck client must not delay every push
// for everyone. A stream whose last CDS answer took longer than
// clusterAnswerFast, whose current CDS response has been unanswered that
// long, or that was not sent its Clusters within a hold, is not waited for
// until it answers quickly again; its CLAs go out in cache order.
const (
	// clusterWaitLimit bounds how long one push holds its CLAs back.
	clusterWaitLimit = 250 * time.Millisecond
	// clusterAnswerFast is the CDS answer time of the streams waited for:
	// a round trip and an Envoy applying its Clusters, with room.
	clusterAnswerFast = 100 * time.Millisecond
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

// clusterChanges names, per CDS cache group, the clusters a push changes,
// and all of them together.
func clusterChanges(changes []change) (byGroup map[string]map[string]bool, all map[string]bool) {
	byGroup, all = map[string]map[string]bool{}, map[string]bool{}
	for _, ch := range changes {
		if ch.typeURL != resource.ClusterType || len(ch.upserts) == 0 {
			continue
		}
		names := make(map[string]bool, len(ch.upserts))
		for name := range ch.upserts {
			names[name] = true
			all[name] = true
		}
		byGroup[ch.group] = names
	}
	return byGroup, all
}

// clusterSends lists the streams that will be sent a changed cluster and
// are worth waiting for: each stream holding one that answers CDS quickly.
// It must be called before the Clusters reach the caches, so that each
// stream's last CDS nonce is that of the response before them.
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
		if c.identified && ts != nil && len(names) > 0 && c.holdsAny(names) && answersQuickly(ts, now) {
			out = append(out, clusterSend{c, ts.SentNonce})
		}
		c.mu.Unlock()
	}
	return out
}

// answersQuickly reports whether a stream answered its last CDS response
// within clusterAnswerFast and has not left its current one unanswered
// longer.
func answersQuickly(ts *TypeStatus, now time.Time) bool {
	if ts.AnswerLatency > clusterAnswerFast {
		return false
	}
	return !ts.awaitingAnswer || now.Sub(ts.SentAt) <= clusterAnswerFast
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
	if len(sends) == 0 {
		return nil
	}
	r.metrics.clusterWaitTimeouts.Add(float64(len(sends)))
	nodes := make([]string, 0, min(len(sends), 10))
	for i, p := range sends {
		p.c.mu.Lock()
		// Not waited for again until it answers quickly.
		ts := p.c.status.Types[shortType(resource.ClusterType)]
		ts.AnswerLatency = max(ts.AnswerLatency, limit)
		if i < cap(nodes) {
			nodes = append(nodes, p.c.status.NodeID)
		}
		p.c.mu.Unlock()
	}
	r.log.Warn("clients were not sent their changed Clusters in time; their ClusterLoadAssignments go out first, and they are not waited for until they answer CDS quickly again",
		zap.Int("clients", len(sends)), zap.Strings("nodes", nodes), zap.Duration("waited", limit))
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
