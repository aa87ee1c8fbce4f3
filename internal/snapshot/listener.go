package snapshot

import (
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/ringxds/ringxds/internal/model"
)

// RouterFilterName is the HTTP router filter every gRPC listener ends with.
const RouterFilterName = "envoy.filters.http.router"

// RouteName is the RDS resource name of a cluster's route configuration.
// It is the cluster name (see the package documentation).
func RouteName(cluster string) string { return cluster }

// buildListener builds the api_listener a gRPC client resolving
// xds:///<cluster> receives from LDS.
func buildListener(c *model.Cluster) (*listenerv3.Listener, error) {
	router, err := marshalAny(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	hcm, err := marshalAny(&hcmv3.HttpConnectionManager{
		StatPrefix: c.Name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsConfigSource(),
			RouteConfigName: RouteName(c.Name),
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       RouterFilterName,
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
		}},
	})
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Name:        c.Name,
		ApiListener: &listenerv3.ApiListener{ApiListener: hcm},
	}, nil
}

// buildRoute sends every request to the cluster, hashed on its header.
func buildRoute(c *model.Cluster) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{
		Name: RouteName(c.Name),
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    c.Name,
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: ""}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: c.Name},
					HashPolicy: []*routev3.RouteAction_HashPolicy{{
						PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
							Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: c.HashHeader},
						},
					}},
				}},
			}},
		}},
	}
}
