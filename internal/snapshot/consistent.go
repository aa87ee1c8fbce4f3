package snapshot

import (
	"errors"
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// Consistent checks that every reference between the resources resolves:
// the RDS name of every LDS api_listener, the cluster of every RDS route and
// the ClusterLoadAssignment of every EDS cluster. go-control-plane's
// Snapshot.Consistent cannot be used: it follows RDS names only from
// listener filter chains, never from api_listener, and it fails on a load
// assignment no cluster names.
//
// Errors name each dangling reference, joined, in a deterministic order.
func (r Resources) Consistent() error {
	var errs []error
	for _, name := range sortedNames(r[resourcev3.ListenerType]) {
		l, ok := r[resourcev3.ListenerType][name].(*listenerv3.Listener)
		if !ok {
			errs = append(errs, fmt.Errorf("listener %q: is a %T", name, r[resourcev3.ListenerType][name]))
			continue
		}
		api := l.GetApiListener().GetApiListener()
		if api == nil {
			continue
		}
		hcm := &hcmv3.HttpConnectionManager{}
		if err := api.UnmarshalTo(hcm); err != nil {
			errs = append(errs, fmt.Errorf("listener %q: api_listener: %w", name, err))
			continue
		}
		rds := hcm.GetRds()
		if rds == nil {
			continue
		}
		if _, ok := r[resourcev3.RouteType][rds.GetRouteConfigName()]; !ok {
			errs = append(errs, fmt.Errorf("listener %q names route %q, which is not published", name, rds.GetRouteConfigName()))
		}
	}
	for _, name := range sortedNames(r[resourcev3.RouteType]) {
		rc, ok := r[resourcev3.RouteType][name].(*routev3.RouteConfiguration)
		if !ok {
			errs = append(errs, fmt.Errorf("route %q: is a %T", name, r[resourcev3.RouteType][name]))
			continue
		}
		for _, vh := range rc.GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				for _, cluster := range routeClusters(rt) {
					if _, ok := r[resourcev3.ClusterType][cluster]; !ok {
						errs = append(errs, fmt.Errorf("route %q names cluster %q, which is not published", name, cluster))
					}
				}
			}
		}
	}
	for _, name := range sortedNames(r[resourcev3.ClusterType]) {
		c, ok := r[resourcev3.ClusterType][name].(*clusterv3.Cluster)
		if !ok {
			errs = append(errs, fmt.Errorf("cluster %q: is a %T", name, r[resourcev3.ClusterType][name]))
			continue
		}
		if c.GetType() != clusterv3.Cluster_EDS {
			continue
		}
		eds := c.GetEdsClusterConfig().GetServiceName()
		if eds == "" {
			eds = c.GetName()
		}
		if _, ok := r[resourcev3.EndpointType][eds]; !ok {
			errs = append(errs, fmt.Errorf("cluster %q needs endpoints %q, which are not published", name, eds))
		}
	}
	return errors.Join(errs...)
}

func routeClusters(rt *routev3.Route) []string {
	a := rt.GetRoute()
	if a == nil {
		return nil
	}
	if c := a.GetCluster(); c != "" {
		return []string{c}
	}
	var out []string
	for _, wc := range a.GetWeightedClusters().GetClusters() {
		out = append(out, wc.GetName())
	}
	return out
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
