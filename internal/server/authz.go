package server

import (
	"cmp"
	"context"
	"slices"
	"sync/atomic"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ringxds/ringxds/internal/authz"
	"github.com/ringxds/ringxds/internal/model"
)

// Authorization of readers (docs/xds.md, "Authorization"). Every resource
// ringxds publishes is named after its cluster, so one decision per
// cluster name covers CDS, EDS, LDS and RDS.
//
// Refused resources are taken out of each response just before it is
// sent (the callbacks' OnStreamResponse and OnStreamDeltaResponse, which
// go-control-plane calls on the response it owns). That is the one place
// every path goes through, SotW and delta, ADS and per type, named and
// wildcard: the cache answers a wildcard watch with the whole cache and
// knows nothing of who reads it. The cache still counts a withheld resource
// as returned, so it does not answer again until that resource changes;
// taking the name out of the request instead would turn a SotW CDS or LDS
// request naming only refused clusters into a legacy wildcard.

// authorizer holds the policy and, per cluster, its readers as of the
// state being published.
type authorizer struct {
	policy  *authz.Policy
	readers atomic.Pointer[map[string][]authz.Reader]
	// raw is the readers lists last applied, to see which changed
	// (Server.applyMu held).
	raw map[string][]string
}

func newAuthorizer(p *authz.Policy) *authorizer {
	a := &authorizer{policy: p}
	empty := map[string][]authz.Reader{}
	a.readers.Store(&empty)
	return a
}

// update takes the readers of state and returns the clusters whose readers
// changed: their resources are pushed again so that streams holding or
// refused them are answered under the new decision. An entry that does not
// parse grants nothing (the sources report it).
func (a *authorizer) update(state model.State, log *zap.Logger) map[string]bool {
	next := make(map[string][]authz.Reader, len(state.Clusters))
	raw := make(map[string][]string, len(state.Clusters))
	changed := map[string]bool{}
	for _, c := range state.Clusters {
		if len(c.Readers) > 0 {
			rs, err := authz.ParseReaders(c.Readers)
			if err != nil {
				log.Warn("cluster readers partly ignored", zap.String("cluster", c.Name), zap.Error(err))
			}
			next[c.Name], raw[c.Name] = rs, c.Readers
		}
		if !slices.Equal(a.raw[c.Name], c.Readers) {
			changed[c.Name] = true
		}
	}
	a.raw = raw
	a.readers.Store(&next)
	return changed
}

// allow returns "" if id may read the cluster, else why not.
func (a *authorizer) allow(id authz.Identity, cluster string) string {
	return a.policy.Allow(id, cluster, (*a.readers.Load())[cluster])
}

// identityFrom reads the client's verified certificate, if any.
func identityFrom(ctx context.Context) authz.Identity {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return authz.Identity{}
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return authz.Identity{}
	}
	return authz.FromCertificate(info.State.VerifiedChains[0][0])
}

// RefusedName is a resource a stream asked for, or would have been sent
// in a wildcard response, and was refused.
type RefusedName struct {
	Type   string `json:"type"`
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// maxRefusedTracked bounds the refused names remembered per stream (each
// is logged and counted once); past it, refusals are withheld all the same
// but only counted in RefusedOverflow.
const maxRefusedTracked = 10000

// maxRefusedShown bounds the refused names listed on /debug/clients.
const maxRefusedShown = 100

// maxRefusedLogged bounds the names one log line lists.
const maxRefusedLogged = 10

// refusals collects the refusals first seen in one request or response,
// for one log line.
type refusals struct {
	typeURL string
	how     string
	names   []string
	count   int
}

// refuse records that c was refused name, with c.mu held. It counts and
// remembers each stream's refusal of a name once.
func (r *registry) refuse(c *client, rs *refusals, name, reason string) {
	short := shortType(rs.typeURL)
	key := RefusedName{Type: short, Name: name, Reason: reason}
	if _, seen := c.refused[key]; seen {
		return
	}
	if len(c.refused) >= maxRefusedTracked {
		c.refusedOverflow++
		return
	}
	if c.refused == nil {
		c.refused = make(map[RefusedName]struct{}, 4)
	}
	c.refused[key] = struct{}{}
	r.metrics.authzRefused.WithLabelValues(short, reason).Inc()
	rs.count++
	if len(rs.names) < maxRefusedLogged {
		rs.names = append(rs.names, name)
	}
}

// logRefusals logs one line for the refusals first seen in a request or
// response, with c.mu held.
func (r *registry) logRefusals(c *client, rs *refusals) {
	if rs.count == 0 {
		return
	}
	r.log.Warn("xDS client refused resources it is not authorized to read; they are not sent",
		zap.String("node", c.status.NodeID), zap.String("identity", c.identity.String()),
		zap.String("peer", c.status.Peer), zap.String("type", shortType(rs.typeURL)),
		zap.String("subscription", rs.how), zap.Int("refused", rs.count), zap.Strings("names", rs.names))
}

// checkNames records the refusal of every name a request subscribes to
// that the client may not read. Nothing is taken out: the responses are
// filtered. c.mu is held.
func (r *registry) checkNames(c *client, typeURL string, names []string) {
	if r.authz == nil || !servedType(typeURL) {
		return
	}
	rs := refusals{typeURL: typeURL, how: "named"}
	for _, name := range names {
		if name == "*" {
			continue
		}
		if reason := r.authz.allow(c.identity, name); reason != "" {
			r.refuse(c, &rs, name, reason)
		}
	}
	r.logRefusals(c, &rs)
}

// claimRefused takes the refused names out of a delta request's
// initial_resource_versions: the client holds them from an earlier stream,
// perhaps from before it lost the right to read them. The cache then sees
// them as unknown, answers them, and the response filter turns each into a
// removal. c.mu is held.
func (r *registry) claimRefused(c *client, typeURL string, req *discovery.DeltaDiscoveryRequest) {
	if r.authz == nil || !servedType(typeURL) {
		return
	}
	short := shortType(typeURL)
	for name := range req.GetInitialResourceVersions() {
		if r.authz.allow(c.identity, name) == "" {
			continue
		}
		delete(req.InitialResourceVersions, name)
		if c.claimed == nil {
			c.claimed = make(map[string]map[string]struct{}, 1)
		}
		if c.claimed[short] == nil {
			c.claimed[short] = make(map[string]struct{})
		}
		if len(c.claimed[short]) < maxRefusedTracked {
			c.claimed[short][name] = struct{}{}
		}
	}
}

// filterSotW takes the resources the client may not read out of a SotW
// response.
func (r *registry) filterSotW(c *client, resp *discovery.DiscoveryResponse) {
	if r.authz == nil || !servedType(resp.GetTypeUrl()) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := refusals{typeURL: resp.GetTypeUrl(), how: "wildcard"}
	if ts := c.status.Types[shortType(rs.typeURL)]; ts != nil && !ts.Wildcard {
		rs.how = "named"
	}
	kept := resp.Resources[:0:0]
	for _, res := range resp.GetResources() {
		name := resourceName(res)
		if reason := r.authz.allow(c.identity, name); reason != "" {
			r.refuse(c, &rs, name, reason)
			continue
		}
		kept = append(kept, res)
	}
	if len(kept) != len(resp.GetResources()) {
		resp.Resources = kept
	}
	r.logRefusals(c, &rs)
}

// filterDelta takes the resources the client may not read out of a delta
// response, and their removals, except that a refused resource the client
// said it held is removed.
func (r *registry) filterDelta(c *client, resp *discovery.DeltaDiscoveryResponse) {
	if r.authz == nil || !servedType(resp.GetTypeUrl()) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	short := shortType(resp.GetTypeUrl())
	rs := refusals{typeURL: resp.GetTypeUrl(), how: "wildcard"}
	if ts := c.status.Types[short]; ts != nil && !ts.Wildcard {
		rs.how = "named"
	}
	claimed := c.claimed[short]
	var kept []*discovery.Resource
	var removed []string
	for _, res := range resp.GetResources() {
		if reason := r.authz.allow(c.identity, res.GetName()); reason != "" {
			r.refuse(c, &rs, res.GetName(), reason)
			if _, held := claimed[res.GetName()]; held {
				removed = append(removed, res.GetName())
				delete(claimed, res.GetName())
			}
			continue
		}
		kept = append(kept, res)
	}
	for _, name := range resp.GetRemovedResources() {
		_, held := claimed[name]
		if held || r.authz.allow(c.identity, name) == "" {
			delete(claimed, name)
			removed = append(removed, name)
		}
	}
	resp.Resources, resp.RemovedResources = kept, removed
	r.logRefusals(c, &rs)
}

// refusedStatus lists a stream's refusals for /debug/clients, with c.mu
// held.
func (c *client) refusedStatus() ([]RefusedName, int) {
	n := len(c.refused) + c.refusedOverflow
	if len(c.refused) == 0 {
		return nil, n
	}
	out := make([]RefusedName, 0, len(c.refused))
	for k := range c.refused {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b RefusedName) int {
		return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Name, b.Name))
	})
	if len(out) > maxRefusedShown {
		out = out[:maxRefusedShown]
	}
	return out, n
}

// resourceName reads a published resource's name without decoding it.
func resourceName(a *anypb.Any) string { return string(resourceNameBytes(a.GetValue())) }
