package watch_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ringxds/ringxds/internal/kubetest"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/watch"
)

// TestKubeSourceFeedsServer wires the Kubernetes source into the xDS server
// as cmd/xds-server does, and checks the endpoints published to gRPC
// clients, fade-in included. No RPC is sent: EndpointSlices reject loopback
// addresses, and nothing may be sent to the 10.x addresses they hold.
func TestKubeSourceFeedsServer(t *testing.T) {
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := env.Client
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()

	if _, err := c.CoreV1().Services(ns).Create(wctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "products", Annotations: map[string]string{
			watch.AnnotationEnabled: "true", watch.AnnotationFadeIn: "10m",
		}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 80, TargetPort: intstr.FromInt32(50051)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port, name := int32(50051), "grpc"
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "products-a", Labels: map[string]string{discoveryv1.LabelServiceName: "products"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.20.0.1"}}, {Addresses: []string{"10.20.0.2"}}},
	}
	sl, err := c.DiscoveryV1().EndpointSlices(ns).Create(wctx, sl, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	srv := server.New(ctx, server.Options{Logger: zaptest.NewLogger(t)})
	src, err := watch.NewKubeSource(c, watch.KubeOptions{Namespace: ns, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	applied := make(chan error, 16)
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, func(s model.State) { applied <- srv.Apply(s) })
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("source did not stop")
		}
	}()

	cluster := watch.KubeClusterName(ns, "products")
	waitEDS := func(want ...string) *snapshot.Snapshot {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			snap := srv.Current()
			if snap != nil && slices.Equal(grpcEndpoints(snap, cluster), want) {
				return snap
			}
			select {
			case err := <-applied:
				if err != nil {
					t.Fatalf("server rejected the source's state: %v", err)
				}
			case <-deadline:
				var got []string
				if snap != nil {
					got = grpcEndpoints(snap, cluster)
				}
				t.Fatalf("gRPC EDS for %s = %v, want %v", cluster, got, want)
			}
		}
	}

	snap := waitEDS("10.20.0.1:50051", "10.20.0.2:50051")
	if len(snap.Fading[cluster]) != 0 {
		t.Fatalf("endpoints present at start-up fade in: %+v", snap.Fading[cluster])
	}

	sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.20.0.3"}})
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Update(wctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	snap = waitEDS("10.20.0.1:50051", "10.20.0.2:50051", "10.20.0.3:50051")
	if f := snap.Fading[cluster]; len(f) != 1 || f[0].Endpoint != "10.20.0.3:50051" || f[0].Duration != 10*time.Minute {
		t.Fatalf("fading = %+v, want only the new endpoint, over 10m", f)
	}
}

// grpcEndpoints lists host:port of the gRPC kind's EDS resource for cluster.
func grpcEndpoints(snap *snapshot.Snapshot, cluster string) []string {
	var out []string
	for _, r := range snap.Kinds[snapshot.KindGRPC][resourcev3.EndpointType] {
		cla, ok := r.(*endpointv3.ClusterLoadAssignment)
		if !ok || cla.GetClusterName() != cluster {
			continue
		}
		for _, loc := range cla.GetEndpoints() {
			for _, lb := range loc.GetLbEndpoints() {
				a := lb.GetEndpoint().GetAddress().GetSocketAddress()
				out = append(out, net.JoinHostPort(a.GetAddress(), strconv.Itoa(int(a.GetPortValue()))))
			}
		}
	}
	slices.Sort(out)
	return out
}
