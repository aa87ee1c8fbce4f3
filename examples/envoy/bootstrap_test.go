package envoy_test

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	// The typed configs the bootstraps name, registered so protojson can
	// resolve their "@type".
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"

	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/watch"
)

// bootstraps are the Envoy configurations in this directory, with the ADS
// flavour each must use and the endpoints file its control plane serves.
var bootstraps = []struct {
	file      string
	apiType   corev3.ApiConfigSource_ApiType
	endpoints string
	xdsHost   string
}{
	{"envoy-sotw.yaml", corev3.ApiConfigSource_GRPC, "../endpoints.yaml", "127.0.0.1"},
	{"envoy-delta.yaml", corev3.ApiConfigSource_DELTA_GRPC, "../endpoints.yaml", "127.0.0.1"},
	{"envoy-compose.yaml", corev3.ApiConfigSource_GRPC, "compose-endpoints.yaml", "xds-server"},
}

// loadBootstrap parses a YAML bootstrap the way Envoy does: YAML to JSON,
// then the proto3 JSON mapping, unknown fields rejected.
func loadBootstrap(t *testing.T, file string) *bootstrapv3.Bootstrap {
	t.Helper()
	js := yamlToJSON(t, file)
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		t.Fatalf("%s is not an Envoy v3 bootstrap: %v", file, err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("%s fails Envoy's validation rules: %v", file, err)
	}
	return b
}

func yamlToJSON(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return js
}

// published returns what the control plane publishes to Envoy for an
// endpoints file: the model and the Envoy kind's cluster names.
func published(t *testing.T, file string) (model.State, map[string]bool) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	state, err := watch.ParseFile(file, data)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := snapshot.Build(state, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for name := range snap.Kinds[snapshot.KindEnvoy][resource.ClusterType] {
		names[name] = true
	}
	return state, names
}

func TestBootstraps(t *testing.T) {
	for _, bc := range bootstraps {
		t.Run(bc.file, func(t *testing.T) {
			b := loadBootstrap(t, bc.file)

			// Clusters and endpoints come over one ADS stream of the
			// expected flavour, from a static cluster that speaks HTTP/2.
			ads := b.GetDynamicResources().GetAdsConfig()
			if ads.GetApiType() != bc.apiType || ads.GetTransportApiVersion() != corev3.ApiVersion_V3 {
				t.Errorf("ads_config api_type %v, transport %v; want %v, V3", ads.GetApiType(), ads.GetTransportApiVersion(), bc.apiType)
			}
			if b.GetDynamicResources().GetCdsConfig().GetAds() == nil {
				t.Error("cds_config does not read from ADS")
			}
			if len(ads.GetGrpcServices()) != 1 {
				t.Fatalf("ads_config has %d gRPC services, want 1", len(ads.GetGrpcServices()))
			}
			xdsName := ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()
			xds := staticCluster(b, xdsName)
			if xds == nil {
				t.Fatalf("ADS cluster %q is not a static cluster", xdsName)
			}
			checkXDSCluster(t, xds, bc.xdsHost)
			if b.GetNode().GetId() == "" || b.GetNode().GetCluster() == "" {
				t.Error("node id and cluster must be set: ADS needs a node id")
			}
			if b.GetNode().GetMetadata() != nil {
				t.Error("node metadata set: the example relies on Envoy being the default kind")
			}

			// Every route names a cluster the server publishes and hashes on
			// that cluster's header; every published cluster is routed.
			state, names := published(t, bc.endpoints)
			routed := map[string]bool{}
			for _, rt := range routes(t, b) {
				name := rt.GetRoute().GetCluster()
				if !names[name] {
					t.Errorf("route %s sends to cluster %q, which the server does not publish (it publishes %v)", rt.GetMatch().GetPrefix(), name, keys(names))
					continue
				}
				routed[name] = true
				c, _ := state.Cluster(name)
				hp := rt.GetRoute().GetHashPolicy()
				if len(hp) != 1 || hp[0].GetHeader().GetHeaderName() != c.HashHeader {
					t.Errorf("route to %s hashes on %v, want header %s", name, hp, c.HashHeader)
				}
				if want := "/" + name; rt.GetMatch().GetPrefix() != want {
					t.Errorf("route to %s matches prefix %q, want %q (the README's curl uses it)", name, rt.GetMatch().GetPrefix(), want)
				}
			}
			for name := range names {
				if !routed[name] {
					t.Errorf("published cluster %s has no route", name)
				}
			}
		})
	}
}

func staticCluster(b *bootstrapv3.Bootstrap, name string) *clusterv3.Cluster {
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			return c
		}
	}
	return nil
}

func checkXDSCluster(t *testing.T, c *clusterv3.Cluster, host string) {
	t.Helper()
	opts := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	po := &httpv3.HttpProtocolOptions{}
	if opts == nil || opts.UnmarshalTo(po) != nil || po.ValidateAll() != nil || po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %s does not speak HTTP/2, which gRPC needs", c.GetName())
	}
	eps := c.GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
		t.Fatalf("cluster %s should list the one control plane address", c.GetName())
	}
	sa := eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if sa.GetAddress() != host || sa.GetPortValue() != 18000 {
		t.Errorf("control plane at %s:%d, want %s:18000 (xds-server's --xds-addr)", sa.GetAddress(), sa.GetPortValue(), host)
	}
	if net.ParseIP(host) == nil && c.GetType() != clusterv3.Cluster_STRICT_DNS && c.GetType() != clusterv3.Cluster_LOGICAL_DNS {
		t.Errorf("cluster %s names host %q but is %v, which does not resolve names", c.GetName(), host, c.GetType())
	}
}

// routes returns the routes of every HTTP connection manager in the static
// listeners, decoding and validating each manager's typed config.
func routes(t *testing.T, b *bootstrapv3.Bootstrap) []*routev3.Route {
	t.Helper()
	var out []*routev3.Route
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
					t.Fatalf("listener %s filter %s: %v", l.GetName(), f.GetName(), err)
				}
				if err := hcm.ValidateAll(); err != nil {
					t.Fatalf("listener %s: %v", l.GetName(), err)
				}
				if n := len(hcm.GetHttpFilters()); n == 0 || hcm.GetHttpFilters()[n-1].GetName() != "envoy.filters.http.router" {
					t.Errorf("listener %s: the last HTTP filter must be the router", l.GetName())
				}
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					out = append(out, vh.GetRoutes()...)
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no routes in the static listeners")
	}
	return out
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestCompose checks what docker-compose.yaml and the files it mounts must
// agree on, since the file cannot be run here: the mounted files exist, the
// endpoints file lists exactly the backends' fixed addresses on their echo
// port, and Envoy reaches the server by its service name.
func TestCompose(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Image   string
			Build   map[string]string
			Command []string
			Volumes []string
			Ports   []string
			Network map[string]struct {
				IPv4 string `json:"ipv4_address"`
			} `json:"networks"`
		}
	}
	if err := json.Unmarshal(yamlToJSON(t, "docker-compose.yaml"), &compose); err != nil {
		t.Fatal(err)
	}
	for name, svc := range compose.Services {
		for _, v := range svc.Volumes {
			src := strings.SplitN(v, ":", 2)[0]
			if _, err := os.Stat(src); err != nil {
				t.Errorf("service %s mounts %s: %v", name, src, err)
			}
		}
	}
	srv, ok := compose.Services["xds-server"]
	if !ok {
		t.Fatal("no xds-server service (envoy-compose.yaml dials it by that name)")
	}
	if _, err := os.Stat(filepath.Join(srv.Build["context"], srv.Build["dockerfile"])); err != nil {
		t.Errorf("xds-server build: %v", err)
	}
	if !slices.Contains(srv.Command, "--xds-addr=0.0.0.0:18000") || !slices.Contains(srv.Command, "--file=/etc/ringxds/endpoints.yaml") {
		t.Errorf("xds-server command %q must serve the mounted file on all interfaces", srv.Command)
	}

	var backends []string
	for name, svc := range compose.Services {
		if strings.HasPrefix(name, "backend-") {
			ip := svc.Network["ringxds"].IPv4
			if !slices.Contains(svc.Command, "-listen=:8080") || ip == "" {
				t.Errorf("%s: needs a fixed address and -listen=:8080, has %q %q", name, ip, svc.Command)
			}
			backends = append(backends, net.JoinHostPort(ip, "8080"))
		}
	}
	slices.Sort(backends)
	state, _ := published(t, "compose-endpoints.yaml")
	for _, c := range state.Clusters {
		var eps []string
		for _, ep := range c.Endpoints {
			eps = append(eps, net.JoinHostPort(ep.Address, strconv.FormatUint(uint64(ep.Port), 10)))
		}
		slices.Sort(eps)
		if !slices.Equal(eps, backends) {
			t.Errorf("cluster %s lists %v, the compose backends are %v", c.Name, eps, backends)
		}
	}
}
