package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"slices"
	"strings"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ringxds/ringxds/internal/authz"
	"github.com/ringxds/ringxds/internal/buildinfo"
	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// Protocol variants of an xDS stream.
const (
	ProtocolSotW  = "sotw"
	ProtocolDelta = "delta"
)

// ClientStatus is what the server knows about one open xDS stream. It is
// the answer to "did my proxy get and accept the config?".
type ClientStatus struct {
	StreamID    int64  `json:"stream_id"`
	Protocol    string `json:"protocol"`
	NodeID      string `json:"node_id"`
	NodeCluster string `json:"node_cluster,omitempty"`
	UserAgent   string `json:"user_agent,omitempty"`
	// Implementation is the data plane recognised from the user agent:
	// its name, version, language (C-core) and the kind it is served.
	Implementation dataplane.Client `json:"implementation"`
	// Kind is the translation the client is served; Encoding says where
	// that translation puts the load-balancing policy.
	Kind     snapshot.Kind `json:"kind"`
	Encoding string        `json:"encoding"`
	// Compatibility is the worst state of Verdicts: "ok" when the client
	// sends every key of every cluster it holds where Envoy does.
	Compatibility string `json:"compatibility"`
	// Verdicts judges each cluster the client holds, as of its last CDS or
	// EDS ACK (dataplane.Assess). Empty for Envoy and the client library,
	// which build the reference rings.
	Verdicts    []dataplane.Verdict    `json:"verdicts,omitempty"`
	Peer        string                 `json:"peer"`
	ConnectedAt time.Time              `json:"connected_at"`
	Types       map[string]*TypeStatus `json:"types"`
	// Connection numbers the gRPC connection the stream is on; streams
	// sharing one are one client to the limits.
	Connection uint64 `json:"connection"`
	// Names is the number of resource names the stream subscribes to,
	// all types together (--max-names-per-stream), and ConnectionNames
	// over every stream of its connection (--max-names-per-connection).
	Names           int `json:"names"`
	ConnectionNames int `json:"connection_names"`
	// LimitHits lists the limits that refused this stream's connection
	// anything (a stream, a request, the connection itself), with counts.
	LimitHits []LimitHit `json:"limit_hits,omitempty"`
	// Identity is what the client's verified certificate says (mTLS);
	// nil without one.
	Identity *authz.Identity `json:"identity,omitempty"`
	// Refused lists (the first 100 of) the resources the client asked for
	// or would have been sent and is not authorized to read; RefusedCount
	// counts them all (docs/xds.md, "Authorization").
	Refused      []RefusedName `json:"refused,omitempty"`
	RefusedCount int           `json:"refused_count,omitempty"`
	// UnknownClusters lists (the first 20 of) the clusters the client
	// subscribes to by name that the server does not publish, with the
	// published names a typo away.
	UnknownClusters []UnknownName `json:"unknown_clusters,omitempty"`
	// Replica is the server the stream is on and its build: one
	// replica's /debug/clients lists its own streams only, and views
	// merged from several replicas (ringxdsctl status) tell them apart.
	Replica buildinfo.Replica `json:"replica"`
}

// TypeStatus is the per-resource-type exchange state of a stream.
type TypeStatus struct {
	// Subscribed is the number of resource names the client asked for; 0
	// with Wildcard set means everything.
	Subscribed   int       `json:"subscribed"`
	Wildcard     bool      `json:"wildcard,omitempty"`
	SentVersion  string    `json:"sent_version,omitempty"`
	SentNonce    string    `json:"sent_nonce,omitempty"`
	SentAt       time.Time `json:"sent_at,omitzero"`
	AckedVersion string    `json:"acked_version,omitempty"`
	AckedNonce   string    `json:"acked_nonce,omitempty"`
	AckedAt      time.Time `json:"acked_at,omitzero"`
	Nacks        int       `json:"nacks"`
	LastNack     *Nack     `json:"last_nack,omitempty"`
	// AnswerLatency is how long the client took to answer (ACK or NACK)
	// its last answered response of the type. A push waits for the CDS
	// of clients that answer it quickly before it sends CLAs (order.go).
	AnswerLatency time.Duration `json:"answer_latency,omitempty"`

	// nackLog rate-limits the NACK log of this type; nil until a NACK,
	// as most streams never send one.
	nackLog *nackLog
	// legacyWildcard: the stream's first request of the type named nothing,
	// and none since named anything.
	legacyWildcard bool
	// awaitingAnswer: a response was sent and no request processed since,
	// the only time go-control-plane ignores a SotW request naming another
	// nonce.
	awaitingAnswer bool
	// names is the subscription: a SotW stream's as its last request
	// listed it, a delta stream's, which its requests change by
	// difference, sorted.
	names nameList
	// initialNames: the resources a delta client said it held when the
	// type's subscription began, counted against the names limits.
	initialNames int
	// held is every resource of the type the client was sent and holds,
	// sorted by name; ackedSeq the last response of the type it accepted
	// (held.go).
	held     heldSet
	ackedSeq uint32
}

// Nack is a response a client rejected.
type Nack struct {
	// Version and Nonce are those of the rejected response.
	Version string `json:"version"`
	Nonce   string `json:"nonce"`
	// KeptVersion is the version the client says it keeps running (SotW
	// version_info: its last accepted, empty before its first ACK).
	KeptVersion string    `json:"kept_version,omitempty"`
	Message     string    `json:"message"`
	At          time.Time `json:"at"`
}

type streamKey struct {
	protocol string
	id       int64
}

// client is the mutable record behind a ClientStatus. Its own lock keeps
// streams from contending with each other on a registry-wide lock.
type client struct {
	mu         sync.Mutex
	status     ClientStatus
	identified bool
	// sent remembers each response not answered yet, in the order sent:
	// delta ACKs carry only the nonce, and a SotW NACK names the version the
	// client keeps, not the one it rejected.
	sent []sentResponse
	// responses counts the responses sent, numbering them (held.go).
	responses uint32
	// clusters are the CDS names the client subscribes to (all published
	// clusters when cdsWildcard), the clusters its verdicts are about.
	clusters    map[string]struct{}
	cdsWildcard bool
	// legacyWildcard: the first CDS request named nothing, and none since
	// named anything; a SotW request naming nothing then restates it.
	legacyWildcard bool
	// nacks holds, per resource type, the error of the last response of
	// that type the client rejected, until it accepts one.
	nacks map[string]string
	// assessed is the snapshot the verdicts were computed against; they are
	// recomputed when it or the subscription changes. assessGen counts
	// assessments, so one that finished late does not overwrite a newer.
	assessed    *snapshot.Snapshot
	subsChanged bool
	assessGen   uint64
	// nodeKey is a hash of what identified the node (user agent and kind
	// metadata); a later request naming another re-identifies the stream.
	nodeKey [sha256.Size]byte
	closed  bool
	// uaName, uaVersion and metadata are the parts of the node CSDS
	// returns besides its ID and cluster (slimNode keeps no more).
	uaName, uaVersion string
	metadata          map[string]string

	// conn is the stream's connection; bucket its request rate; names
	// the resource names it subscribes to, counted in conn.names.
	conn   *connState
	bucket *tokenBucket
	names  int
	// defaultType is the type of a non-ADS stream, which go-control-plane
	// fills into delta requests only after the callbacks.
	defaultType string

	// identity is the client's verified certificate's; refused the names
	// it was refused (logged and counted once each), and claimed, per
	// type, the refused names a delta client said it held (authz.go).
	identity        authz.Identity
	refused         map[RefusedName]struct{}
	refusedOverflow int
	claimed         map[string]map[string]struct{}
	// unknownLogged holds the unknown clusters already logged (logUnknown).
	unknownLogged map[string]struct{}
}

// registry tracks open streams through go-control-plane's callbacks.
type registry struct {
	log     *zap.Logger
	metrics *metrics
	now     func() time.Time
	// current returns the published snapshot clients are assessed against.
	current  func() *snapshot.Snapshot
	assessor dataplane.Assessor
	queue    *assessQueue
	limiter  *limiter
	// authz is nil when every client reads every cluster.
	authz *authorizer
	// replica is this server, named in every status.
	replica buildinfo.Replica

	mu      sync.RWMutex
	streams map[streamKey]*client
}

func newRegistry(log *zap.Logger, m *metrics) *registry {
	return &registry{log: log, metrics: m, now: time.Now, streams: make(map[streamKey]*client), queue: newAssessQueue(),
		limiter: newLimiter(DefaultLimits(), log, m, time.Now)}
}

func (r *registry) open(ctx context.Context, protocol string, id int64, defaultType string) {
	now := r.now()
	c := &client{defaultType: defaultType, status: ClientStatus{
		StreamID:    id,
		Protocol:    protocol,
		ConnectedAt: now,
		Types:       make(map[string]*TypeStatus, 4),
	}}
	c.conn = connFrom(ctx)
	if c.conn == nil {
		c.conn = r.limiter.newConn()
	}
	c.status.Connection = c.conn.id
	if lim := r.limiter.limits; lim.RequestsPerSecond > 0 {
		c.bucket = newTokenBucket(lim.RequestsPerSecond, max(lim.RequestBurst, 1), r.limiter.now())
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		c.status.Peer = p.Addr.String()
	}
	c.identity = identityFrom(ctx)
	if !c.identity.Anonymous() {
		id := c.identity
		c.status.Identity = &id
	}
	r.mu.Lock()
	r.streams[streamKey{protocol, id}] = c
	r.mu.Unlock()
}

func (r *registry) closed(protocol string, id int64) {
	k := streamKey{protocol, id}
	r.mu.Lock()
	c := r.streams[k]
	delete(r.streams, k)
	r.mu.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.conn.names.Add(-int64(c.names))
	c.names = 0
	if c.identified {
		r.metrics.connected.WithLabelValues(string(c.status.Kind), protocol).Dec()
		r.metrics.compatibility.WithLabelValues(c.status.Implementation.Implementation, c.status.Compatibility).Dec()
		// Once per stream, as its connect is: a proxy that drops off
		// should show in the log, not only as a missing row on the page.
		r.log.Info("xDS client disconnected",
			zap.String("node", c.status.NodeID), zap.String("kind", string(c.status.Kind)),
			zap.String("protocol", protocol), zap.String("peer", c.status.Peer), zap.Int64("stream", id),
			zap.Duration("connected_for", r.now().Sub(c.status.ConnectedAt).Round(time.Millisecond)))
	}
}

func (r *registry) get(protocol string, id int64) *client {
	r.mu.RLock()
	c := r.streams[streamKey{protocol, id}]
	r.mu.RUnlock()
	return c
}

// identify records the node the first time a stream names one, and again
// when a later request names a node that reads differently (go-control-plane
// serves each request by the node it carries).
func (r *registry) identify(c *client, n *core.Node) {
	if n == nil || n.GetId() == "" && n.GetUserAgentName() == "" {
		return
	}
	key := nodeKey(n)
	if c.identified && key == c.nodeKey {
		return
	}
	if c.identified {
		r.metrics.connected.WithLabelValues(string(c.status.Kind), c.status.Protocol).Dec()
		r.metrics.compatibility.WithLabelValues(c.status.Implementation.Implementation, c.status.Compatibility).Dec()
	}
	defer r.queueAssessment(c)
	c.assessed = nil
	c.identified, c.nodeKey = true, key
	c.status.NodeID = truncate(n.GetId(), maxNodeBytes)
	c.status.NodeCluster = truncate(n.GetCluster(), maxNodeBytes)
	c.status.UserAgent = truncate(strings.TrimSpace(n.GetUserAgentName()+" "+n.GetUserAgentVersion()), maxNodeBytes)
	c.uaName, c.uaVersion, c.metadata = n.GetUserAgentName(), n.GetUserAgentVersion(), nil
	for k, v := range n.GetMetadata().GetFields() {
		if sv, ok := v.GetKind().(*structpb.Value_StringValue); ok {
			if c.metadata == nil {
				c.metadata = make(map[string]string, 2)
			}
			c.metadata[k] = sv.StringValue
		}
	}
	c.status.Implementation = dataplane.Identify(n)
	c.status.Kind = c.status.Implementation.Kind
	c.status.Encoding = c.status.Kind.Encoding()
	if c.status.Compatibility == "" || c.status.Implementation.IsReference() {
		c.status.Compatibility, c.status.Verdicts = dataplane.StateOK, nil
	}
	r.metrics.connected.WithLabelValues(string(c.status.Kind), c.status.Protocol).Inc()
	r.metrics.compatibility.WithLabelValues(c.status.Implementation.Implementation, c.status.Compatibility).Inc()
	r.log.Info("xDS client connected",
		zap.String("node", c.status.NodeID), zap.String("kind", string(c.status.Kind)),
		zap.String("implementation", truncate(c.status.Implementation.UserAgent(), maxNodeBytes)),
		zap.String("protocol", c.status.Protocol), zap.String("peer", c.status.Peer),
		zap.String("user_agent", c.status.UserAgent))
}

// maxNodeBytes bounds each node string kept and logged: they come from
// the client.
const maxNodeBytes = 256

// nodeKey hashes the part of a node that decides its identity and kind,
// so a stream keeps 32 bytes of it whatever the client sends.
func nodeKey(n *core.Node) [sha256.Size]byte {
	h := sha256.New()
	for _, s := range []string{n.GetId(), n.GetUserAgentName(), n.GetUserAgentVersion(),
		n.GetMetadata().GetFields()[dataplane.KindMetadataKey].GetStringValue()} {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

func (c *client) typeStatus(typeURL string) *TypeStatus {
	short := shortType(typeURL)
	ts := c.status.Types[short]
	if ts == nil {
		ts = &TypeStatus{}
		c.status.Types[short] = ts
	}
	return ts
}

// Snapshot returns a copy of every open stream's status, ordered by node ID
// then stream.
func (r *registry) snapshot() []ClientStatus {
	r.mu.RLock()
	all := make([]*client, 0, len(r.streams))
	for _, c := range r.streams {
		all = append(all, c)
	}
	r.mu.RUnlock()
	var current *snapshot.Snapshot
	if r.current != nil {
		current = r.current()
	}
	out := make([]ClientStatus, 0, len(all))
	for _, c := range all {
		c.mu.Lock()
		st := c.status
		st.Verdicts = slices.Clone(c.status.Verdicts)
		st.Types = make(map[string]*TypeStatus, len(c.status.Types))
		for k, v := range c.status.Types {
			cp := *v
			if v.LastNack != nil {
				n := *v.LastNack
				cp.LastNack = &n
			}
			st.Types[k] = &cp
		}
		st.Names = c.names
		st.Refused, st.RefusedCount = c.refusedStatus()
		if !c.cdsWildcard {
			st.UnknownClusters = unknownClusters(c, current)
		}
		c.mu.Unlock()
		st.ConnectionNames = int(c.conn.names.Load())
		st.LimitHits = c.conn.limitHits()
		st.Replica = r.replica
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ClientStatus) int {
		return cmp.Or(cmp.Compare(a.NodeID, b.NodeID), cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.StreamID, b.StreamID))
	})
	return out
}

// shortType turns a type URL into the name people use: cds, eds, lds, rds.
func shortType(typeURL string) string {
	switch typeURL {
	case resource.ClusterType:
		return "cds"
	case resource.EndpointType:
		return "eds"
	case resource.ListenerType:
		return "lds"
	case resource.RouteType:
		return "rds"
	}
	// Any other type is not served and never recorded; its label is fixed
	// so a client cannot mint metric series.
	return "other"
}

// callbacks adapts the registry to go-control-plane's server.Callbacks.
type callbacks struct{ r *registry }

func (cb callbacks) OnStreamOpen(ctx context.Context, id int64, typeURL string) error {
	cb.r.open(ctx, ProtocolSotW, id, typeURL)
	return nil
}

func (cb callbacks) OnStreamClosed(id int64, _ *core.Node) { cb.r.closed(ProtocolSotW, id) }

func (cb callbacks) OnDeltaStreamOpen(ctx context.Context, id int64, typeURL string) error {
	cb.r.open(ctx, ProtocolDelta, id, typeURL)
	return nil
}

func (cb callbacks) OnDeltaStreamClosed(id int64, _ *core.Node) { cb.r.closed(ProtocolDelta, id) }

// OnStreamRequest records the request and, before go-control-plane hands it
// to the cache, corrects the one field that would make the cache answer
// wrongly (see versionFix).
func (cb callbacks) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	c := cb.r.get(ProtocolSotW, id)
	if c == nil {
		return nil
	}
	fix, version, err := cb.r.request(c, xdsRequest{
		node: req.GetNode(), typeURL: req.GetTypeUrl(), version: req.GetVersionInfo(), nonce: req.GetResponseNonce(),
		nack: req.GetErrorDetail() != nil, nackMessage: req.GetErrorDetail().GetMessage(), names: req.GetResourceNames(),
	})
	if err != nil {
		return err
	}
	if cb.r.authz != nil {
		c.mu.Lock()
		cb.r.checkNames(c, req.GetTypeUrl(), req.GetResourceNames())
		c.mu.Unlock()
	}
	switch fix {
	case fixRejected:
		req.VersionInfo = version
	case fixReply:
		req.VersionInfo = ""
	}
	return nil
}

// OnStreamResponse replaces the cache's counter version with the content
// version before the response is sent (go-control-plane calls this right
// before Send, on the response it owns).
func (cb callbacks) OnStreamResponse(_ context.Context, id int64, req *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	c := cb.r.get(ProtocolSotW, id)
	if c != nil {
		cb.r.filterSotW(c, resp)
	}
	resp.VersionInfo = contentVersion(resp.GetResources())
	if c != nil {
		short := shortType(resp.GetTypeUrl())
		cb.r.sent(c, resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce(), proto.Size(resp), func(ts *TypeStatus, sent *response) {
			ts.holdSotW(short, resp.GetResources(), sent)
		})
	}
}

func (cb callbacks) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	c := cb.r.get(ProtocolDelta, id)
	if c == nil {
		return nil
	}
	_, _, err := cb.r.request(c, xdsRequest{
		node: req.GetNode(), typeURL: req.GetTypeUrl(), nonce: req.GetResponseNonce(), delta: true,
		nack: req.GetErrorDetail() != nil, nackMessage: req.GetErrorDetail().GetMessage(),
		names: req.GetResourceNamesSubscribe(), removed: req.GetResourceNamesUnsubscribe(),
		initial: len(req.GetInitialResourceVersions()),
	})
	if err == nil && cb.r.authz != nil {
		c.mu.Lock()
		typeURL := cmp.Or(req.GetTypeUrl(), c.defaultType)
		cb.r.checkNames(c, typeURL, req.GetResourceNamesSubscribe())
		cb.r.claimRefused(c, typeURL, req)
		c.mu.Unlock()
	}
	if err == nil && len(req.GetInitialResourceVersions()) > 0 {
		c.mu.Lock()
		if ts := c.status.Types[shortType(cmp.Or(req.GetTypeUrl(), c.defaultType))]; ts != nil {
			ts.holdClaimed(req.GetInitialResourceVersions(), cb.r.now())
		}
		c.mu.Unlock()
	}
	return err
}

func (cb callbacks) OnStreamDeltaResponse(id int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	c := cb.r.get(ProtocolDelta, id)
	if c != nil {
		cb.r.filterDelta(c, resp)
	}
	resp.SystemVersionInfo = deltaContentVersion(resp)
	if c != nil {
		cb.r.sent(c, resp.GetTypeUrl(), resp.GetSystemVersionInfo(), resp.GetNonce(), proto.Size(resp), func(ts *TypeStatus, sent *response) {
			ts.holdDelta(resp.GetResources(), resp.GetRemovedResources(), sent)
		})
	}
}

func (cb callbacks) OnFetchRequest(context.Context, *discovery.DiscoveryRequest) error         { return nil }
func (cb callbacks) OnFetchResponse(*discovery.DiscoveryRequest, *discovery.DiscoveryResponse) {}
