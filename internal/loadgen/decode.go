package loadgen

import (
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/cespare/xxhash/v2"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// decoded is what a client needs from one resource: its name and, per type,
// what it refers to (LDS: route names; RDS: clusters; CDS: the EDS name) or,
// for EDS, the fingerprint of its endpoint set.
type decoded struct {
	name string
	refs []string
	fp   uint64
}

// decoder decodes each distinct serialized resource once. Thousands of
// simulated clients receive byte-identical resources; decoding each copy
// would make the tool, not the server, the bottleneck on a shared machine.
// The cache is keyed by a hash of the bytes, so what a client checks is
// still exactly what it received. A sync.Map, because after the first
// response every lookup is a hit, and a lock's shared counter would bounce
// between the cores on each of them.
type decoder struct {
	cache sync.Map // decodeKey -> decoded
}

type decodeKey struct {
	typeURL string
	sum     uint64
	size    int
}

func newDecoder() *decoder { return &decoder{} }

func (d *decoder) decode(a *anypb.Any) (decoded, error) {
	k := decodeKey{a.GetTypeUrl(), xxhash.Sum64(a.GetValue()), len(a.GetValue())}
	if v, ok := d.cache.Load(k); ok {
		return v.(decoded), nil
	}
	v, err := decodeAny(a)
	if err != nil {
		return decoded{}, err
	}
	d.cache.Store(k, v)
	return v, nil
}

func decodeAny(a *anypb.Any) (decoded, error) {
	m, err := a.UnmarshalNew()
	if err != nil {
		return decoded{}, fmt.Errorf("decode %s: %w", a.GetTypeUrl(), err)
	}
	switch r := m.(type) {
	case *endpointv3.ClusterLoadAssignment:
		var eps []string
		for _, loc := range r.GetEndpoints() {
			for _, lbe := range loc.GetLbEndpoints() {
				sa := lbe.GetEndpoint().GetAddress().GetSocketAddress()
				eps = append(eps, net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))))
			}
		}
		return decoded{name: r.GetClusterName(), fp: fingerprint(eps)}, nil
	case *clusterv3.Cluster:
		eds := r.GetEdsClusterConfig().GetServiceName()
		if eds == "" {
			eds = r.GetName()
		}
		return decoded{name: r.GetName(), refs: []string{eds}}, nil
	case *listenerv3.Listener:
		hcm := &hcmv3.HttpConnectionManager{}
		if err := r.GetApiListener().GetApiListener().UnmarshalTo(hcm); err != nil {
			return decoded{}, fmt.Errorf("listener %q: api_listener: %w", r.GetName(), err)
		}
		rds := hcm.GetRds().GetRouteConfigName()
		if rds == "" {
			return decoded{}, fmt.Errorf("listener %q names no RDS route configuration", r.GetName())
		}
		return decoded{name: r.GetName(), refs: []string{rds}}, nil
	case *routev3.RouteConfiguration:
		var clusters []string
		for _, vh := range r.GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				if c := rt.GetRoute().GetCluster(); c != "" {
					clusters = append(clusters, c)
				}
			}
		}
		return decoded{name: r.GetName(), refs: clusters}, nil
	}
	return decoded{}, fmt.Errorf("unexpected resource type %s", proto.MessageName(m))
}
