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
	names, err := c.publishedClusters(ctx)
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
	c.log.Warn("the management server does not publish this cluster; waiting for it",
		zap.String("cluster", b.cluster), zap.Strings("did_you_mean", did))
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
