package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/ringxds/ringxds/internal/kubetest"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/testcp"
)

// A Service opted in on a real API server reaches a real grpc-go xDS client
// through the binary's --source=kubernetes wiring, and a scale-up reaches it
// too. EndpointSlices reject loopback addresses, so the client is checked by
// what it ACKs, not by sending RPCs to the 10.x endpoints.
func TestKubeServiceSeenByGRPCClient(t *testing.T) {
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err := env.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{"ringxds.io/enabled": "true", "ringxds.io/hash-header": "x-user"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slice := func(addrs ...string) *discoveryv1.EndpointSlice {
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080))}},
		}
		for _, a := range addrs {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
		}
		return sl
	}
	if _, err := env.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice("10.1.0.1", "10.1.0.2", "10.1.0.3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	lis := &listeners{xds: testcp.Listen(t, "127.0.0.1:0"), debug: testcp.Listen(t, "127.0.0.1:0")}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{"--source=kubernetes", "--kubeconfig", env.Kubeconfig(t), "--namespace", ns, "--debounce=50ms", "--log-level=warn"}, &syncBuffer{}, lis)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	base := "http://" + lis.debug.Addr().String()
	cluster := "web." + ns

	pick := func() (int, string) {
		resp, err := http.Get(base + "/debug/pick?" + url.Values{"cluster": {cluster}, "key": {"user-7"}, "client": {"grpc"}}.Encode())
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		var res struct{ Endpoint string }
		_ = json.NewDecoder(resp.Body).Decode(&res)
		return resp.StatusCode, res.Endpoint
	}
	testcp.WaitFor(t, 30*time.Second, "the Service to be served", func() bool {
		code, ep := pick()
		return code == http.StatusOK && slices.Contains([]string{"10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080"}, ep)
	})

	cc := testcp.DialXDS(t, lis.xds.Addr().String(), cluster)
	cc.Connect()
	edsAcked := func() (sent string, ok bool) {
		resp, err := http.Get(base + "/debug/clients")
		if err != nil {
			return "", false
		}
		defer resp.Body.Close()
		var body struct{ Clients []server.ClientStatus }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		for _, c := range body.Clients {
			if c.Kind != "grpc" {
				continue
			}
			for typ, ts := range c.Types {
				if ts.Nacks > 0 {
					t.Fatalf("grpc-go NACKed %s: %+v", typ, ts.LastNack)
				}
			}
			eds, cds := c.Types["eds"], c.Types["cds"]
			if eds != nil && cds != nil && eds.Subscribed == 1 && eds.SentVersion != "" && eds.AckedVersion == eds.SentVersion && cds.AckedVersion == cds.SentVersion {
				return eds.SentVersion, true
			}
		}
		return "", false
	}
	var first string
	testcp.WaitFor(t, 30*time.Second, "grpc-go to ACK the Service's CDS and EDS", func() bool {
		var ok bool
		first, ok = edsAcked()
		return ok
	})

	if _, err := env.Client.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice("10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testcp.WaitFor(t, 30*time.Second, "grpc-go to ACK the scaled-up EDS", func() bool {
		v, ok := edsAcked()
		return ok && v != first
	})
}

// A delta client reconnecting to a restarted server names the resources it
// holds. Until the server's first snapshot its caches are empty, and
// answering then would tell the client everything was removed. The server
// must hold such clients until it has a snapshot. The Kubernetes source
// publishes only after its informers sync, which opens that window wide.
func TestKubeRestartedServerDoesNotWithdrawBeforeFirstSnapshot(t *testing.T) {
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := env.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{"ringxds.io/enabled": "true"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080))}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.2.0.1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster := "web." + ns

	lis := &listeners{xds: testcp.Listen(t, "127.0.0.1:0"), debug: testcp.Listen(t, "127.0.0.1:0")}
	cc, err := grpc.NewClient(lis.xds.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{"--source=kubernetes", "--kubeconfig", env.Kubeconfig(t), "--namespace", ns, "--log-level=warn"}, &syncBuffer{}, lis)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	// Reconnect at once, as a delta Envoy does, naming what it holds.
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{
		Node: &core.Node{Id: "restarted-envoy", UserAgentName: "envoy"}, TypeUrl: resource.ClusterType,
		InitialResourceVersions: map[string]string{cluster: "held-before-restart"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetRemovedResources()) > 0 {
		t.Fatalf("the restarted server withdrew %v before its first snapshot", resp.GetRemovedResources())
	}
	if len(resp.GetResources()) != 1 || resp.GetResources()[0].GetName() != cluster {
		t.Fatalf("first response carries %d resources, want the cluster %s", len(resp.GetResources()), cluster)
	}
}
