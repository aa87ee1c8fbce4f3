package server

import (
	"cmp"
	"context"
	"errors"
	"io"
	"slices"

	admin "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// CSDS (envoy.service.status.v3.ClientStatusDiscoveryService) on the xDS
// port: the standard form of /debug/clients, for the tools of the xDS
// world (docs/xds.md, "CSDS"). Each connected client is one ClientConfig
// (its streams on one connection, under one node ID, together), and each
// resource it holds or asked for is one generic_xds_config:
//
//	held, accepted         ACKED      SYNCED
//	held, rejected         NACKED     ERROR    error_state: the client's message
//	sent, not answered yet REQUESTED  STALE
//	asked for, never sent  REQUESTED  NOT_SENT
//
// version_info is the version of the response that carried the resource.
// xds_config is the resource as sent (the rejected one for a NACK, as
// ConfigStatus ERROR has it), unless the request sets
// exclude_resource_contents, and up to maxCSDSContentBytes per answer:
// past that the resources are listed without contents, so that an answer
// listing every client of a large fleet stays readable; a request naming
// one node (node_matchers) gets that client's contents.
//
// The replica answering and its build go in the response headers
// (CSDSReplicaHeader...), since CSDS has no field for the server.

// maxCSDSContentBytes bounds the resource contents one CSDS answer carries:
// gRPC clients refuse messages over 4 MiB by default.
const maxCSDSContentBytes = 2 << 20

// Response headers naming the replica that answered a CSDS request and its
// build.
const (
	CSDSReplicaHeader   = "ringxds-replica"
	CSDSVersionHeader   = "ringxds-version"
	CSDSRevisionHeader  = "ringxds-revision"
	CSDSGoVersionHeader = "ringxds-go-version"
)

// csds serves ClientStatusDiscoveryService from the registry.
type csds struct {
	statusv3.UnimplementedClientStatusDiscoveryServiceServer
	s *Server
}

// FetchClientStatus answers one request.
func (c csds) FetchClientStatus(ctx context.Context, req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	if err := c.authorize(ctx); err != nil {
		return nil, err
	}
	_ = grpc.SetHeader(ctx, c.header())
	return c.answer(req)
}

// StreamClientStatus answers each request of the stream as it comes. The
// per-stream request rate of the xDS streams applies; the other limits
// (streams per connection, message size, connection rate) apply to it as
// to any stream on the port.
func (c csds) StreamClientStatus(stream grpc.BidiStreamingServer[statusv3.ClientStatusRequest, statusv3.ClientStatusResponse]) error {
	ctx := stream.Context()
	if err := c.authorize(ctx); err != nil {
		return err
	}
	if err := stream.SendHeader(c.header()); err != nil {
		return err
	}
	lim := c.s.limiter
	var bucket *tokenBucket
	if lim.limits.RequestsPerSecond > 0 {
		bucket = newTokenBucket(lim.limits.RequestsPerSecond, max(lim.limits.RequestBurst, 1), lim.now())
	}
	cs := connFrom(ctx)
	if cs == nil {
		cs = lim.newConn()
	}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if bucket != nil && !bucket.take(lim.now()) {
			return lim.refuse(cs, LimitRequestRate, codes.ResourceExhausted, req.GetNode().GetId(),
				"more than %g CSDS requests per second on one stream (burst %d)", lim.limits.RequestsPerSecond, lim.limits.RequestBurst)
		}
		resp, err := c.answer(req)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// authorize lets every caller in when authorization is off; under
// --authz=namespace CSDS lists every tenant's clients and resources, so only
// the cluster-wide readers may read it.
func (c csds) authorize(ctx context.Context) error {
	if c.s.authz == nil {
		return nil
	}
	id := identityFrom(ctx)
	if c.s.authz.policy.ClusterReader(id) {
		return nil
	}
	return status.Errorf(codes.PermissionDenied,
		"ringxds: CSDS lists the clients of every namespace; under --authz=namespace only --authz-cluster-readers may read it, and this client is %s", id)
}

func (c csds) header() metadata.MD {
	r := c.s.registry.replica
	return metadata.Pairs(CSDSReplicaHeader, r.Name, CSDSVersionHeader, r.Build.Version,
		CSDSRevisionHeader, r.Build.ShortRevision(), CSDSGoVersionHeader, r.Build.GoVersion)
}

func (c csds) answer(req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	match, err := compileNodeMatchers(req.GetNodeMatchers())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "ringxds: "+err.Error())
	}
	budget := maxCSDSContentBytes
	if req.GetExcludeResourceContents() {
		budget = 0
	}
	return &statusv3.ClientStatusResponse{Config: c.s.registry.clientConfigs(match, budget)}, nil
}

// clientConfigs lists the identified clients match accepts, one per
// connection and node ID, ordered by node ID, with up to budget bytes of
// resource contents.
func (r *registry) clientConfigs(match func(nodeID string) bool, budget int) []*statusv3.ClientConfig {
	r.mu.RLock()
	all := make([]*client, 0, len(r.streams))
	for _, c := range r.streams {
		all = append(all, c)
	}
	r.mu.RUnlock()
	type key struct {
		conn uint64
		node string
	}
	byKey := map[key]*statusv3.ClientConfig{}
	var keys []key
	slices.SortFunc(all, func(a, b *client) int { return cmp.Compare(a.status.StreamID, b.status.StreamID) })
	for _, c := range all {
		c.mu.Lock()
		if !c.identified || c.closed || !match(c.status.NodeID) {
			c.mu.Unlock()
			continue
		}
		k := key{c.status.Connection, c.status.NodeID}
		cc := byKey[k]
		if cc == nil {
			cc = &statusv3.ClientConfig{Node: c.csdsNode()}
			byKey[k] = cc
			keys = append(keys, k)
		}
		cc.GenericXdsConfigs = c.appendXdsConfigs(cc.GenericXdsConfigs, &budget)
		c.mu.Unlock()
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.conn, b.conn)) })
	out := make([]*statusv3.ClientConfig, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

// csdsNode is the node as the registry keeps it (slimNode): ID, cluster,
// user agent and the metadata that decides its kind. c.mu is held.
func (c *client) csdsNode() *core.Node {
	n := &core.Node{Id: c.status.NodeID, Cluster: c.status.NodeCluster, UserAgentName: c.uaName}
	if c.uaVersion != "" {
		n.UserAgentVersionType = &core.Node_UserAgentVersion{UserAgentVersion: c.uaVersion}
	}
	if len(c.metadata) > 0 {
		n.Metadata = &structpb.Struct{Fields: make(map[string]*structpb.Value, len(c.metadata))}
		for k, v := range c.metadata {
			n.Metadata.Fields[k] = structpb.NewStringValue(v)
		}
	}
	return n
}

// typeURLs maps the registry's short type names back.
var typeURLs = map[string]string{
	"lds": resource.ListenerType, "rds": resource.RouteType, "cds": resource.ClusterType, "eds": resource.EndpointType,
}

// appendXdsConfigs lists the resources the client holds or asked for, type
// by type in dependency order, with contents while budget lasts. c.mu is
// held.
func (c *client) appendXdsConfigs(out []*statusv3.ClientConfig_GenericXdsConfig, budget *int) []*statusv3.ClientConfig_GenericXdsConfig {
	shorts := make([]string, 0, len(c.status.Types))
	for short := range c.status.Types {
		if typeURLs[short] != "" {
			shorts = append(shorts, short)
		}
	}
	slices.SortFunc(shorts, func(a, b string) int { return cmp.Compare(typeOrder(a), typeOrder(b)) })
	for _, short := range shorts {
		ts, typeURL := c.status.Types[short], typeURLs[short]
		for i := range ts.held.len() {
			out = append(out, heldConfig(typeURL, ts.held.at(i), ts.ackedSeq, budget))
		}
		for _, name := range ts.requestedNames() {
			if _, held := ts.held.find(name); !held {
				out = append(out, &statusv3.ClientConfig_GenericXdsConfig{TypeUrl: typeURL, Name: name,
					ConfigStatus: statusv3.ConfigStatus_NOT_SENT, ClientStatus: admin.ClientResourceStatus_REQUESTED})
			}
		}
	}
	return out
}

// typeOrder lists types as they depend on each other: listeners name
// routes, routes name clusters, clusters name endpoints.
func typeOrder(short string) int {
	return slices.Index([]string{"lds", "rds", "cds", "eds"}, short)
}

// requestedNames is the type's named subscription; nil for a wildcard one,
// which asks for whatever exists.
func (ts *TypeStatus) requestedNames() []string {
	if ts.Wildcard {
		return nil
	}
	return ts.names.slice()
}

func heldConfig(typeURL string, h heldResource, ackedSeq uint32, budget *int) *statusv3.ClientConfig_GenericXdsConfig {
	version := h.resp.version.Value()
	g := &statusv3.ClientConfig_GenericXdsConfig{TypeUrl: typeURL, Name: h.name(), VersionInfo: version,
		LastUpdated: timestamppb.New(h.resp.sentAt())}
	switch h.state(ackedSeq) {
	case answerACK:
		g.ConfigStatus, g.ClientStatus = statusv3.ConfigStatus_SYNCED, admin.ClientResourceStatus_ACKED
	case answerNACK:
		g.ConfigStatus, g.ClientStatus = statusv3.ConfigStatus_ERROR, admin.ClientResourceStatus_NACKED
		g.ErrorState = &admin.UpdateFailureState{LastUpdateAttempt: timestamppb.New(h.resp.nack.at),
			Details: h.resp.nack.message, VersionInfo: version}
	default:
		g.ConfigStatus, g.ClientStatus = statusv3.ConfigStatus_STALE, admin.ClientResourceStatus_REQUESTED
	}
	if n := len(h.v.value); !h.v.claimed && n <= *budget {
		*budget -= n
		g.XdsConfig = &anypb.Any{TypeUrl: typeURL, Value: h.v.value}
	}
	return g
}
