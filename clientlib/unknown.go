package clientlib

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"

	"github.com/ringxds/ringxds/internal/suggest"
)

// suggestTimeout bounds the one request that looks for a cluster name
// close to one the server does not publish.
const suggestTimeout = 5 * time.Second

// unknownCause is the error of a cluster the server does not publish:
// ErrUnknownCluster naming the cluster, how the client can tell (detail,
// if any), and, once known, the published names a typo away.
func unknownCause(cluster, detail string, didYouMean []string) error {
	msg := strconv.Quote(cluster)
	if detail != "" {
		msg += ": " + detail
	}
	if len(didYouMean) > 0 {
		msg += " (did you mean " + suggest.Quote(didYouMean) + "?)"
	}
	return fmt.Errorf("%w: %s", ErrUnknownCluster, msg)
}

// suggestFor asks the server, once per balancer, which clusters it
// publishes, puts the names a typo away from b's into b's error, and logs
// that the cluster is not published: when answered, the server has said so
// by answering without it; otherwise when the list lacks it. The question
// goes on a short stream of its own: the client's stream subscribes by
// name, and a server answers a name it lacks with nothing to compare it
// with. A server that authorizes readers lists the clusters this client
// may read.
func (c *Client) suggestFor(b *balancer, answered bool) {
	ctx, cancel := context.WithTimeout(c.ctx, suggestTimeout)
	defer cancel()
	names, err := c.publishedClustersCached(ctx)
	if err != nil {
		c.log.Debug("could not list the published clusters for a suggestion", zap.String("cluster", b.cluster), zap.Error(err))
	}
	if !answered && (err != nil || slices.Contains(names, b.cluster)) {
		return // no sign the cluster is missing; the wait goes on as it was
	}
	did := suggest.Likely(b.cluster, names, 3)
	b.life.mu.Lock()
	b.life.didYouMean = did
	if errors.Is(b.life.cause, ErrUnknownCluster) {
		b.life.cause = unknownCause(b.cluster, "", did)
	}
	b.life.mu.Unlock()
	c.unknownMu.Lock()
	if c.unknown == nil {
		c.unknown = make(map[string]unknownNote)
	}
	if len(c.unknown) >= maxUnknownNotes {
		clear(c.unknown) // a bound, not a cache policy: names are few
	}
	c.unknown[b.cluster] = unknownNote{didYouMean: did, at: time.Now()}
	c.unknownMu.Unlock()
	c.log.Warn("the management server does not publish this cluster; waiting for it",
		zap.String("cluster", b.cluster), zap.Strings("did_you_mean", did))
}

// unknownNote is what the client learnt of a cluster the server does not
// publish. A failed Balancer releases its balancer, and the server does
// not answer a name it lacks again when it is subscribed again, so a
// caller retrying a misspelled name would otherwise get the diagnosis once
// and then a bare deadline, and make the client list every cluster anew on
// each call.
type unknownNote struct {
	didYouMean []string
	at         time.Time
}

// unknownMemory is how long a note stands: long enough for a caller's
// retry loop, short enough that a cluster published meanwhile is not
// reported missing for long (its resources clear the note as they arrive
// anyway).
const unknownMemory = 30 * time.Second

// maxUnknownNotes bounds the notes a client keeps.
const maxUnknownNotes = 256

// recentUnknown returns the note on cluster, if it is recent.
func (c *Client) recentUnknown(cluster string) (unknownNote, bool) {
	c.unknownMu.Lock()
	defer c.unknownMu.Unlock()
	n, ok := c.unknown[cluster]
	if !ok || time.Since(n.at) > unknownMemory {
		return unknownNote{}, false
	}
	return n, true
}

// forgetUnknown drops the note on cluster: the server published it.
func (c *Client) forgetUnknown(cluster string) {
	c.unknownMu.Lock()
	delete(c.unknown, cluster)
	c.unknownMu.Unlock()
}

// publishedClustersCached is publishedClusters, reusing a list fetched
// within unknownMemory: each list is every cluster the server has, which
// on a large server is megabytes.
func (c *Client) publishedClustersCached(ctx context.Context) ([]string, error) {
	c.unknownMu.Lock()
	names, at := c.published, c.publishedAt
	c.unknownMu.Unlock()
	if names != nil && time.Since(at) <= unknownMemory {
		return names, nil
	}
	names, err := c.publishedClusters(ctx)
	if err != nil {
		return nil, err
	}
	c.unknownMu.Lock()
	c.published, c.publishedAt = names, time.Now()
	c.unknownMu.Unlock()
	return names, nil
}

// publishedClusters lists the clusters the server publishes to this
// client: one wildcard CDS request on a stream of its own, which ends with
// the first answer.
func (c *Client) publishedClusters(ctx context.Context) ([]string, error) {
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	// No names on a stream's first CDS request is the wildcard: every
	// cluster the server has for this node.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: resourcev3.ClusterType}); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(resp.GetResources()))
	for _, a := range resp.GetResources() {
		var cl clusterv3.Cluster
		if a.UnmarshalTo(&cl) == nil {
			names = append(names, cl.GetName())
		}
	}
	return names, nil
}
