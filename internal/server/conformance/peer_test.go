package conformance_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// message is one response a peer received, SotW or delta, reduced to what
// the tests look at.
type message struct {
	typeURL string
	version string
	nonce   string
	// resources maps names to resources; removed lists delta removals and
	// versions the delta per-resource versions.
	resources map[string]*anypb.Any
	removed   []string
	versions  map[string]string
	at        time.Time
}

// peer is a raw ADS stream. The tests drive it the way Envoy and grpc-go
// behave on the wire; it only sends what it is told and records every
// response, in arrival order.
type peer struct {
	t     *testing.T
	node  *core.Node
	delta bool
	sotw  discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	dstr  discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient

	mu       sync.Mutex
	received []message
	arrived  chan struct{} // signalled on every response
	done     chan struct{}
}

// node builds a node with a user agent and, if kind is set, the kind
// metadata, as each client kind sends it.
func node(id, userAgent, version, kind string) *core.Node {
	n := &core.Node{Id: id, UserAgentName: userAgent, UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: version}}
	if kind != "" {
		n.Metadata, _ = structpb.NewStruct(map[string]any{"ringxds.io/client": kind})
	}
	return n
}

// The nodes of the data planes, as they announce themselves.
func envoyNode(id string) *core.Node { return node(id, "envoy", "1.37.0", "") }
func grpcGoNode(id string) *core.Node {
	return node(id, "gRPC Go", "1.85.0", "")
}

// dial opens one ADS stream to addr, SotW or delta, closed at cleanup.
func dial(t *testing.T, addr string, n *core.Node, delta bool) *peer {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &peer{t: t, node: n, delta: delta, arrived: make(chan struct{}, 1), done: make(chan struct{})}
	client := discovery.NewAggregatedDiscoveryServiceClient(cc)
	if delta {
		p.dstr, err = client.DeltaAggregatedResources(ctx)
	} else {
		p.sotw, err = client.StreamAggregatedResources(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	go p.read()
	t.Cleanup(func() {
		cancel()
		_ = cc.Close()
		<-p.done
	})
	return p
}

func (p *peer) read() {
	defer close(p.done)
	for {
		var m message
		if p.delta {
			resp, err := p.dstr.Recv()
			if err != nil {
				return
			}
			m = message{typeURL: resp.GetTypeUrl(), version: resp.GetSystemVersionInfo(), nonce: resp.GetNonce(),
				resources: map[string]*anypb.Any{}, removed: resp.GetRemovedResources(), versions: map[string]string{}}
			for _, r := range resp.GetResources() {
				m.resources[r.GetName()] = r.GetResource()
				m.versions[r.GetName()] = r.GetVersion()
			}
		} else {
			resp, err := p.sotw.Recv()
			if err != nil {
				return
			}
			m = message{typeURL: resp.GetTypeUrl(), version: resp.GetVersionInfo(), nonce: resp.GetNonce(), resources: map[string]*anypb.Any{}}
			for _, a := range resp.GetResources() {
				m.resources[resourceName(p.t, a)] = a
			}
		}
		m.at = time.Now()
		p.mu.Lock()
		p.received = append(p.received, m)
		p.mu.Unlock()
		select {
		case p.arrived <- struct{}{}:
		default:
		}
	}
}

// request sends a SotW request; the node goes on every request, as Envoy
// sends it.
func (p *peer) request(typeURL string, names []string, version, nonce string, nack string) {
	p.t.Helper()
	req := &discovery.DiscoveryRequest{Node: p.node, TypeUrl: typeURL, ResourceNames: names, VersionInfo: version, ResponseNonce: nonce}
	if nack != "" {
		req.ErrorDetail = &status.Status{Code: 3, Message: nack}
	}
	if err := p.sotw.Send(req); err != nil {
		p.t.Fatalf("send %s: %v", typeURL, err)
	}
}

// deltaRequest sends a delta request.
func (p *peer) deltaRequest(req *discovery.DeltaDiscoveryRequest) {
	p.t.Helper()
	req.Node = p.node
	if err := p.dstr.Send(req); err != nil {
		p.t.Fatalf("send delta %s: %v", req.GetTypeUrl(), err)
	}
}

// ack acknowledges a response as its kind of stream does.
func (p *peer) ack(m message, names []string) {
	p.t.Helper()
	if p.delta {
		p.deltaRequest(&discovery.DeltaDiscoveryRequest{TypeUrl: m.typeURL, ResponseNonce: m.nonce})
		return
	}
	p.request(m.typeURL, names, m.version, m.nonce, "")
}

// count returns how many responses have arrived so far.
func (p *peer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.received)
}

// next waits for the response after the first `after` ones that satisfies
// match, up to within, and returns it with its index.
func (p *peer) next(after int, within time.Duration, what string, match func(message) bool) (message, int) {
	p.t.Helper()
	m, i, ok := p.await(after, within, match)
	if !ok {
		p.t.Fatalf("no %s within %v (%d responses so far: %s)", what, within, p.count(), p.summary())
	}
	return m, i
}

// await is next without failing.
func (p *peer) await(after int, within time.Duration, match func(message) bool) (message, int, bool) {
	deadline := time.After(within)
	for {
		p.mu.Lock()
		for i := after; i < len(p.received); i++ {
			if match(p.received[i]) {
				m := p.received[i]
				p.mu.Unlock()
				return m, i, true
			}
		}
		p.mu.Unlock()
		select {
		case <-p.arrived:
		case <-deadline:
			return message{}, 0, false
		}
	}
}

func (p *peer) summary() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := ""
	for _, m := range p.received {
		out += fmt.Sprintf("[%s %d res %d removed] ", short(m.typeURL), len(m.resources), len(m.removed))
	}
	return out
}

func ofType(typeURL string) func(message) bool {
	return func(m message) bool { return m.typeURL == typeURL }
}

func short(typeURL string) string {
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
	return typeURL
}

func resourceName(t *testing.T, a *anypb.Any) string {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	switch r := m.(type) {
	case *clusterv3.Cluster:
		return r.GetName()
	case *endpointv3.ClusterLoadAssignment:
		return r.GetClusterName()
	case interface{ GetName() string }:
		return r.GetName()
	}
	t.Fatalf("no name for %T", m)
	return ""
}

func cluster(t *testing.T, a *anypb.Any) *clusterv3.Cluster {
	t.Helper()
	c := &clusterv3.Cluster{}
	if err := a.UnmarshalTo(c); err != nil {
		t.Fatal(err)
	}
	return c
}

func assignment(t *testing.T, a *anypb.Any) *endpointv3.ClusterLoadAssignment {
	t.Helper()
	c := &endpointv3.ClusterLoadAssignment{}
	if err := a.UnmarshalTo(c); err != nil {
		t.Fatal(err)
	}
	return c
}
