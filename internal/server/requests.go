package server

import (
	"slices"
	"time"
	"unique"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ringxds/ringxds/internal/dataplane"
)

// maxNameBytes bounds one resource name: go-control-plane keeps every
// subscribed name, so the names limits bound bytes only with it. Cluster
// names are DNS-like; an xdstp:// name runs to a few hundred bytes.
const maxNameBytes = 1024

// slimNode cuts a request's node down, in place, to what ringxds and
// go-control-plane read: go-control-plane keeps the node of every stream
// (and of every watch's request) for the stream's life, and an Envoy's
// node lists every extension it was built with, tens of KB.
func slimNode(n *core.Node) {
	if n == nil {
		return
	}
	n.Id = truncate(n.GetId(), maxNodeBytes)
	n.Cluster = truncate(n.GetCluster(), maxNodeBytes)
	n.UserAgentName = truncate(n.GetUserAgentName(), maxNodeBytes)
	if v, ok := n.GetUserAgentVersionType().(*core.Node_UserAgentVersion); ok {
		v.UserAgentVersion = truncate(v.UserAgentVersion, maxNodeBytes)
	} else {
		n.UserAgentVersionType = nil
	}
	if md := n.GetMetadata().GetFields(); len(md) > 0 {
		for k, v := range md {
			if k != dataplane.KindMetadataKey && k != dataplane.GRPCBalancerMetadataKey {
				delete(md, k)
			} else if sv, ok := v.GetKind().(*structpb.Value_StringValue); ok {
				sv.StringValue = truncate(sv.StringValue, maxNodeBytes)
			}
		}
	}
	n.Extensions, n.ClientFeatures, n.Locality, n.DynamicParameters = nil, nil, nil, nil
}

// sentResponse is a response sent and not answered yet.
type sentResponse struct {
	nonce, typeURL string
	// resp is what the resources it carried remember of it (held.go),
	// its version among it.
	resp *response
}

// findSent returns where the unanswered response with nonce is in c.sent,
// or -1. A client answers each response, so there are few.
func (c *client) findSent(nonce string) int {
	return slices.IndexFunc(c.sent, func(s sentResponse) bool { return s.nonce == nonce })
}

// forgetSent drops c.sent[i], and the list once it is empty: at rest every
// response is answered, and a stream keeps nothing for them.
func (c *client) forgetSent(i int) {
	c.sent = slices.Delete(c.sent, i, i+1)
	if len(c.sent) == 0 {
		c.sent = nil
	}
}

// xdsRequest is what the registry reads of one SotW or delta request.
type xdsRequest struct {
	node    *core.Node
	typeURL string
	// version is SotW's version_info: the version the client holds.
	version string
	nonce   string
	delta   bool
	nack    bool
	// nackMessage is the client's error_detail message.
	nackMessage string
	// names is the whole subscription (SotW) or the names added (delta);
	// removed the names dropped (delta).
	names, removed []string
	// initial counts a delta request's initial_resource_versions, which
	// go-control-plane keeps as the stream's state like names.
	initial int
}

// versionFix is a correction of a SotW request's version_info before
// the cache sees it. The cache answers at once any
// request with an empty version ("the client has nothing"), and trusts any
// other version to mean the client holds what it was last sent on this
// stream.
type versionFix int

const (
	fixNone versionFix = iota
	// fixRejected: a NACK of the stream's first response carries an empty
	// version_info, as the protocol says, and the cache would resend the
	// same rejected response at once, forever. The version of the rejected
	// response goes in its place, so nothing is resent until the resource
	// changes.
	fixRejected
	// fixReply: a stream's first request naming a version comes from a
	// client that reconnected holding state from an earlier stream. The
	// cache knows nothing of it and would answer only resources that exist,
	// never telling the client of one deleted while it was away; an empty
	// version makes it answer with the full current state.
	fixReply
)

// maxNonces bounds the responses remembered per stream: a client answers
// each, so more are outstanding only from a client that does not.
const maxNonces = 64

// nackLogEvery is how often one stream's NACKs of one type are logged; the
// count in between goes in the next line and every NACK is counted.
const nackLogEvery = 10 * time.Second

// request records one request and returns how to correct its version, and
// the version to put in. A request that changes what the client holds
// queues it for judging. A request over a limit, or for a type URL that is
// no xDS type, returns the status that ends the stream; go-control-plane
// has not seen it yet, so it keeps no state of it.
func (r *registry) request(c *client, req xdsRequest) (versionFix, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lim := r.limiter
	if c.bucket != nil && !c.bucket.take(lim.now()) {
		return fixNone, "", lim.refuse(c.conn, LimitRequestRate, codes.ResourceExhausted, c.status.NodeID,
			"more than %g requests per second on one stream (burst %d)", lim.limits.RequestsPerSecond, lim.limits.RequestBurst)
	}
	slimNode(req.node)
	r.identify(c, req.node)
	if req.typeURL == "" {
		req.typeURL = c.defaultType
	}
	if req.typeURL == "" {
		return fixNone, "", nil // go-control-plane refuses an ADS request without a type
	}
	if !servedType(req.typeURL) {
		if knownTypes[req.typeURL] {
			// Held by the unserved cache; nothing is recorded.
			return fixNone, "", nil
		}
		return fixNone, "", lim.refuse(c.conn, LimitUnknownType, codes.InvalidArgument, c.status.NodeID,
			"type URL %q is not an xDS resource type (ringxds serves clusters, endpoints, listeners and routes)",
			truncate(req.typeURL, 128))
	}
	for _, name := range req.names {
		if len(name) > maxNameBytes {
			return fixNone, "", lim.refuse(c.conn, LimitNameLength, codes.ResourceExhausted, c.status.NodeID,
				"a resource name of %d bytes (limit %d)", len(name), maxNameBytes)
		}
	}
	reassess, fix, version := r.record(c, req)
	if reassess {
		r.queueAssessment(c)
	}
	if req.initial > 0 {
		if ts := c.status.Types[shortType(req.typeURL)]; ts != nil && ts.initialNames == 0 {
			ts.initialNames = req.initial
		}
	}
	if err := r.countNames(c); err != nil {
		return fixNone, "", err
	}
	return fix, version, nil
}

// countNames updates the names the stream and its connection subscribe to
// and refuses a stream over either limit.
func (r *registry) countNames(c *client) error {
	n := 0
	for _, ts := range c.status.Types {
		n += ts.Subscribed + ts.initialNames
	}
	connNames := c.conn.names.Add(int64(n - c.names))
	c.names = n
	lim := r.limiter
	if max := lim.limits.NamesPerStream; max > 0 && n > max {
		return lim.refuse(c.conn, LimitNamesPerStream, codes.ResourceExhausted, c.status.NodeID,
			"this stream subscribes to %d resource names (limit %d)", n, max)
	}
	if max := lim.limits.NamesPerConnection; max > 0 && connNames > int64(max) {
		return lim.refuse(c.conn, LimitNamesPerConnection, codes.ResourceExhausted, c.status.NodeID,
			"the streams of this connection subscribe to %d resource names (limit %d)", connNames, max)
	}
	return nil
}

// record updates the stream's status for one request, with c.mu held. It
// reports whether the client's verdicts need recomputing, and the version
// correction.
//
// An ACK is a response's first acknowledgement: a SotW request repeating the
// nonce already acknowledged only changes the subscription, and one naming
// another nonce than the last sent is stale and ignored, as go-control-plane
// ignores it.
func (r *registry) record(c *client, req xdsRequest) (reassess bool, fix versionFix, version string) {
	ts, first := c.status.Types[shortType(req.typeURL)], false
	if ts == nil {
		ts, first = c.typeStatus(req.typeURL), true
	}
	if !req.delta && ts.awaitingAnswer && req.nonce != ts.SentNonce {
		// While a response is unanswered, go-control-plane ignores a SotW
		// request not naming it, subscription and all (once a request was
		// processed, it takes any nonce until the next response). Only a
		// rejection of a response that was sent is worth counting: the
		// client refused config, even if it is superseded.
		if i := c.findSent(req.nonce); i >= 0 && c.sent[i].typeURL == req.typeURL && req.nack {
			r.recordNACK(c, ts, req, c.sent[i])
			c.forgetSent(i)
		}
		return false, fixNone, ""
	}
	ts.awaitingAnswer = false
	if req.typeURL == resource.ClusterType {
		reassess = c.subscribe(subscription{delta: req.delta, names: req.names, removed: req.removed})
		if reassess && !c.cdsWildcard {
			r.logUnknown(c)
		}
	}
	subscribe(ts, req, first)
	if req.nonce == "" {
		if !req.delta && first && req.version != "" {
			fix = fixReply
		}
		return reassess, fix, ""
	}
	i := c.findSent(req.nonce)
	if i < 0 || c.sent[i].typeURL != req.typeURL {
		// A nonce never sent, already answered, or sent with another
		// type: go-control-plane does not take it as an answer either.
		return reassess, fixNone, ""
	}
	s := c.sent[i]
	sent := s.resp.version.Value()
	c.forgetSent(i)
	if req.nonce == ts.SentNonce {
		ts.AnswerLatency = r.now().Sub(ts.SentAt)
	}
	kind, short := string(c.status.Kind), shortType(req.typeURL)
	ringTypes := req.typeURL == resource.ClusterType || req.typeURL == resource.EndpointType
	if req.nack {
		r.recordNACK(c, ts, req, s)
		if ringTypes {
			if c.nacks == nil {
				c.nacks = make(map[string]string, 2)
			}
			c.nacks[short] = truncate(req.nackMessage, maxReasonBytes)
			c.assessed = nil
			reassess = true
		}
		if !req.delta && req.version == "" {
			return reassess, fixRejected, sent
		}
		return reassess, fixNone, ""
	}
	ts.AckedVersion, ts.AckedNonce, ts.AckedAt = sent, req.nonce, r.now()
	ts.answered(s.resp, false, "", ts.AckedAt)
	r.metrics.acks.WithLabelValues(kind, short).Inc()
	if _, rejected := c.nacks[short]; rejected {
		delete(c.nacks, short)
		c.assessed = nil
	}
	return reassess || ringTypes, fixNone, ""
}

// subscribe updates the subscription size and wildcard shown for a type.
// Only CDS and LDS know the legacy wildcard (a first request naming
// nothing); EDS and RDS are never wildcard without "*".
func subscribe(ts *TypeStatus, req xdsRequest, first bool) {
	legacy := req.typeURL == resource.ClusterType || req.typeURL == resource.ListenerType
	explicit := slices.Contains(req.names, "*")
	if !req.delta {
		// A legacy wildcard lasts while requests keep naming nothing.
		if first {
			ts.legacyWildcard = legacy && len(req.names) == 0
		} else if len(req.names) > 0 {
			ts.legacyWildcard = false
		}
		ts.Subscribed = len(req.names)
		ts.Wildcard = explicit || ts.legacyWildcard
		ts.keepSubscribed(req.names)
		return
	}
	ts.names = ts.names.update(req.names, req.removed)
	ts.Subscribed = ts.names.len()
	switch {
	case first:
		ts.Wildcard = explicit || legacy && len(req.names) == 0
	case explicit:
		ts.Wildcard = true
	case slices.Contains(req.removed, "*"):
		ts.Wildcard = false
		kept := ts.names.set()
		ts.held.keep(func(name string) bool {
			_, ok := kept[name]
			return ok
		})
	}
	if !ts.Wildcard {
		// The client forgets what it unsubscribes from (a wildcard
		// stream keeps receiving it).
		ts.drop(req.removed)
	}
}

// recordNACK counts a NACK and logs it, at most once per type every
// nackLogEvery, with the count of those not logged since.
func (r *registry) recordNACK(c *client, ts *TypeStatus, req xdsRequest, s sentResponse) {
	kind, short := string(c.status.Kind), shortType(req.typeURL)
	now, rejected := r.now(), s.resp.version.Value()
	ts.Nacks++
	message := truncate(req.nackMessage, maxReasonBytes)
	ts.answered(s.resp, true, message, now)
	ts.LastNack = &Nack{Version: rejected, Nonce: req.nonce, KeptVersion: req.version, Message: message, At: now}
	r.metrics.nacks.WithLabelValues(kind, short).Inc()
	if ts.nackLog == nil {
		ts.nackLog = &nackLog{}
	}
	nl := ts.nackLog
	if !nl.at.IsZero() && now.Sub(nl.at) < nackLogEvery {
		nl.unlogged++
		return
	}
	r.log.Warn("xDS client rejected a response (NACK); it keeps its previous config",
		zap.String("node", c.status.NodeID), zap.String("kind", kind), zap.String("type", short),
		zap.String("version", rejected), zap.String("kept_version", req.version), zap.String("nonce", req.nonce),
		zap.String("error", message), zap.Int("nacks_since_last_log", nl.unlogged))
	nl.at, nl.unlogged = now, 0
}

// nackLog rate-limits the NACK log of one type of a stream: when a NACK
// was last logged, and how many came since.
type nackLog struct {
	at       time.Time
	unlogged int
}

// sent records a response about to be sent; hold records the resources it
// carries (holdSotW or holdDelta).
func (r *registry) sent(c *client, typeURL, version, nonce string, size int, hold func(*TypeStatus, *response)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.typeStatus(typeURL)
	// A superseded SotW response stays remembered: go-control-plane
	// ignores its answer, but a rejection of it is still counted with the
	// version it rejected.
	v := unique.Make(version)
	ts.SentVersion, ts.SentNonce, ts.SentAt = v.Value(), nonce, r.now()
	c.responses++
	resp := &response{seq: c.responses, version: v, at: ts.SentAt.UnixNano()}
	hold(ts, resp)
	ts.awaitingAnswer = true
	if len(c.sent) >= maxNonces {
		// Forget all but each type's latest response, which the client
		// has yet to answer.
		c.sent = slices.DeleteFunc(c.sent, func(s sentResponse) bool {
			other := c.status.Types[shortType(s.typeURL)]
			return other == nil || other.SentNonce != s.nonce
		})
	}
	c.sent = append(c.sent, sentResponse{nonce: nonce, typeURL: typeURL, resp: resp})
	kind, short := string(c.status.Kind), shortType(typeURL)
	r.metrics.pushes.WithLabelValues(kind, short, c.status.Protocol).Inc()
	r.metrics.bytesSent.WithLabelValues(kind, short, c.status.Protocol).Add(float64(size))
}
