package server

import (
	"slices"

	"go.uber.org/zap"

	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/suggest"
)

// UnknownName is a resource a client subscribes to that the server does
// not publish: most often a misspelled cluster name, which otherwise looks
// exactly like a server that never answers.
type UnknownName struct {
	Name string `json:"name"`
	// DidYouMean lists published clusters whose names are a typo away.
	DidYouMean []string `json:"did_you_mean,omitempty"`
}

// Bounds on what is kept and shown of a client's unknown names: a client
// can name any number of them.
const (
	maxUnknownShown  = 20
	maxUnknownLogged = 100
)

// unknownClusters lists the clusters c subscribes to by name that snap
// does not publish, sorted, at most maxUnknownShown; c.mu is held.
func unknownClusters(c *client, snap *snapshot.Snapshot) []UnknownName {
	if snap == nil || len(c.clusters) == 0 {
		return nil
	}
	var names []string
	for name := range c.clusters {
		if _, ok := snap.State.Cluster(name); !ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	names = names[:min(len(names), maxUnknownShown)]
	known := publishedNames(snap)
	out := make([]UnknownName, len(names))
	for i, name := range names {
		out[i] = UnknownName{Name: name, DidYouMean: suggest.Likely(name, known, 3)}
	}
	return out
}

func publishedNames(snap *snapshot.Snapshot) []string {
	names := make([]string, len(snap.State.Clusters))
	for i := range snap.State.Clusters {
		names[i] = snap.State.Clusters[i].Name
	}
	return names
}

// logUnknown logs, once per stream and name, each cluster c has just
// subscribed to that the server does not publish; c.mu is held.
func (r *registry) logUnknown(c *client) {
	var snap *snapshot.Snapshot
	if r.current != nil {
		snap = r.current()
	}
	for _, u := range unknownClusters(c, snap) {
		if _, done := c.unknownLogged[u.Name]; done || len(c.unknownLogged) >= maxUnknownLogged {
			continue
		}
		if c.unknownLogged == nil {
			c.unknownLogged = make(map[string]struct{})
		}
		c.unknownLogged[u.Name] = struct{}{}
		r.log.Warn("xDS client subscribed to a cluster the server does not publish; it gets nothing for it until one of that name is published",
			zap.String("node", c.status.NodeID), zap.String("kind", string(c.status.Kind)),
			zap.String("cluster", truncate(u.Name, maxNodeBytes)), zap.Strings("did_you_mean", u.DidYouMean))
	}
}
