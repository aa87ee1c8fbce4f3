package watch

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
)

// kubeControllerSlice is a slice as the EndpointSlice controller writes it
// for a Service labelled app=<svc>, team=<team>, with n endpoints spread
// over three zones, after a round trip through JSON so that, as in an
// informer, no string is shared with another object.
func kubeControllerSlice(tb testing.TB, ns, svc, team string, n int) *discoveryv1.EndpointSlice {
	tb.Helper()
	created := metav1.NewTime(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	written := metav1.NewTime(time.Date(2026, 3, 1, 9, 30, 7, 0, time.UTC))
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: svc + "-x7k2p", GenerateName: svc + "-",
			UID:               types.UID("0b6f4f1e-2f0c-4c55-9d0e-6f7a1d8c" + fmt.Sprintf("%04d", n)),
			ResourceVersion:   "123456789",
			Generation:        42,
			CreationTimestamp: created,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
				"app": svc, "team": team, "app.kubernetes.io/part-of": "shop", "helm.sh/chart": "shop-1.2.3",
			},
			Annotations: map[string]string{
				corev1.EndpointsLastChangeTriggerTime: "2026-03-01T09:30:05.123456Z",
				"endpoints.kubernetes.io/managed-by":  "endpointslice-controller.k8s.io",
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc, UID: "5d1f6e0a-9b7c-4f3e-8a2d-1c0b9e8f7a6d",
				Controller: kubePtr(true), BlockOwnerDeletion: kubePtr(true),
			}},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "discovery.k8s.io/v1", Time: &written, FieldsType: "FieldsV1",
				FieldsV1: metav1.NewFieldsV1(`{"f:addressType":{},"f:endpoints":{},"f:metadata":{"f:annotations":{".":{},"f:endpoints.kubernetes.io/last-change-trigger-time":{}},"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:endpointslice.kubernetes.io/managed-by":{},"f:kubernetes.io/service-name":{},"f:team":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"5d1f6e0a-9b7c-4f3e-8a2d-1c0b9e8f7a6d\"}":{}}},"f:ports":{}}`),
			}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{
			Name: kubePtr("http"), Port: kubePtr[int32](8080), Protocol: kubePtr(corev1.ProtocolTCP),
		}},
	}
	for i := range n {
		zone := fmt.Sprintf("europe-west1-%c", 'b'+i%3)
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 40+len(svc)%100, i/250, i%250+1)},
			Conditions: discoveryv1.EndpointConditions{
				Ready: kubePtr(i%7 != 3), Serving: kubePtr(i%7 != 3), Terminating: kubePtr(false),
			},
			NodeName: kubePtr(fmt.Sprintf("gke-prod-pool-1-%08x-%04d", i*7919, i%37)),
			Zone:     &zone,
			TargetRef: &corev1.ObjectReference{
				Kind: "Pod", Namespace: ns, Name: fmt.Sprintf("%s-7d9c8b6f5-%05d", svc, i),
				UID: types.UID(fmt.Sprintf("9c0a7b3e-1d2f-4e5a-8b6c-%012d", i)),
			},
			Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}},
		})
	}
	return kubeJSONCopy(tb, sl)
}

func kubeJSONCopy[T any](tb testing.TB, v *T) *T {
	tb.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		tb.Fatal(err)
	}
	return out
}

// kubeTransformCases are slices that exercise every field the build reads:
// each fallback of the change time, both families, several addresses,
// every condition, hostnames, and the problems kubeEndpoints reports.
func kubeTransformCases(t *testing.T) map[string]*discoveryv1.EndpointSlice {
	t.Helper()
	cases := map[string]*discoveryv1.EndpointSlice{}
	cases["controller"] = kubeControllerSlice(t, "shop", "cart", "a", 20)

	noMF := kubeControllerSlice(t, "shop", "cart", "a", 3)
	noMF.ManagedFields = nil
	cases["trigger time only"] = noMF

	bare := kubeControllerSlice(t, "shop", "cart", "a", 3)
	bare.ManagedFields, bare.Annotations = nil, nil
	cases["creation time only"] = bare

	older := metav1.NewTime(time.Date(2026, 3, 1, 9, 0, 1, 0, time.UTC))
	newer := metav1.NewTime(time.Date(2026, 3, 1, 10, 0, 1, 0, time.UTC))
	many := kubeControllerSlice(t, "shop", "cart", "a", 4)
	many.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "a", Time: &older, FieldsV1: metav1.NewFieldsV1(`{}`)},
		{Manager: "b"},
		{Manager: "c", Time: &newer},
	}
	cases["several writers"] = many

	untimed := kubeControllerSlice(t, "shop", "cart", "a", 2)
	untimed.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "a"}}
	cases["writes without time"] = untimed

	v6 := kubeSlice("shop", "cart", "cart-v6", discoveryv1.AddressTypeIPv6, "http", 8080, kubeReadyEPs("fd00::2", "fd00::1"))
	v6.Endpoints[0].Addresses = append(v6.Endpoints[0].Addresses, "fd00::99")
	v6.Endpoints[1].Hostname = kubePtr("cart-0")
	cases["IPv6, several addresses, hostname"] = v6

	mixed := kubeSlice("shop", "cart", "cart-m", discoveryv1.AddressTypeIPv4, "http", 8080, kubeReadyEPs("10.0.0.1", "10.0.0.2", "10.0.0.3", "bogus"))
	mixed.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Serving: kubePtr(true), Terminating: kubePtr(true)}
	mixed.Endpoints[1].Conditions = discoveryv1.EndpointConditions{Ready: kubePtr(false)}
	mixed.Endpoints = append(mixed.Endpoints, discoveryv1.Endpoint{})
	cases["conditions and bad addresses"] = mixed

	cases["wrong port"] = kubeSlice("shop", "cart", "cart-p", discoveryv1.AddressTypeIPv4, "grpc", 9090, kubeReadyEPs("10.0.1.1"))
	cases["FQDN"] = kubeSlice("shop", "cart", "cart-f", discoveryv1.AddressTypeFQDN, "http", 8080, kubeReadyEPs("a.example"))
	cases["no endpoints"] = kubeSlice("shop", "cart", "cart-e", discoveryv1.AddressTypeIPv4, "http", 8080, nil)
	return cases
}

func kubeTransformed(t *testing.T, obj any) *discoveryv1.EndpointSlice {
	t.Helper()
	out, err := kubeTransformSlice(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out.(*discoveryv1.EndpointSlice)
}

// TestKubeTransformSliceKeepsWhatIsRead: the build cannot tell a
// transformed slice from the original.
func TestKubeTransformSliceKeepsWhatIsRead(t *testing.T) {
	svc := kubeFixtureService(nil)
	svc.Namespace, svc.Name = "shop", "cart"
	for name, sl := range kubeTransformCases(t) {
		t.Run(name, func(t *testing.T) {
			before := sl.DeepCopy()
			got := kubeTransformed(t, sl)
			if !reflect.DeepEqual(sl, before) {
				t.Fatal("the transform wrote to its input")
			}
			if a, b := kubeSliceChangeTime(sl), kubeSliceChangeTime(got); !a.Equal(b) || a.Location() != b.Location() {
				t.Fatalf("change time %v, want %v", b, a)
			}
			for _, hashKey := range []string{"", KubeHashKeyHostname, KubeHashKeyPodName} {
				wantEps, wantDrain, wantProb := kubeEndpoints(svc, "http", hashKey, []*discoveryv1.EndpointSlice{sl})
				gotEps, gotDrain, gotProb := kubeEndpoints(svc, "http", hashKey, []*discoveryv1.EndpointSlice{got})
				if !reflect.DeepEqual(gotEps, wantEps) || gotDrain != wantDrain || !reflect.DeepEqual(gotProb, wantProb) {
					t.Fatalf("hash key %q: kubeEndpoints differ:\n got %+v %v %+v\nwant %+v %v %+v", hashKey, gotEps, gotDrain, gotProb, wantEps, wantDrain, wantProb)
				}
			}
			wantKey, _ := kubeSliceServiceKey(sl)
			if gotKey, _ := kubeSliceServiceKey(got); !reflect.DeepEqual(gotKey, wantKey) {
				t.Fatalf("index key %v, want %v", gotKey, wantKey)
			}
			for i, e := range got.Endpoints {
				o := sl.Endpoints[i]
				if !reflect.DeepEqual(e.Hostname, o.Hostname) || !reflect.DeepEqual(e.Zone, o.Zone) || !reflect.DeepEqual(e.Conditions, o.Conditions) {
					t.Fatalf("endpoint %d: %+v, want hostname, zone and conditions of %+v", i, e, o)
				}
				if o.TargetRef != nil && (e.TargetRef == nil || e.TargetRef.Name != o.TargetRef.Name || e.TargetRef.Kind != o.TargetRef.Kind) {
					t.Fatalf("endpoint %d: targetRef %+v, want the kind and name of %+v", i, e.TargetRef, o.TargetRef)
				}
			}
			if again := kubeTransformed(t, got); !reflect.DeepEqual(again, got) {
				t.Fatalf("not idempotent:\n%+v\n%+v", again, got)
			}
		})
	}
}

// TestKubeTransformSliceDrops: what the build never reads is gone.
func TestKubeTransformSliceDrops(t *testing.T) {
	got := kubeTransformed(t, kubeControllerSlice(t, "shop", "cart", "a", 5))
	if want := map[string]string{discoveryv1.LabelServiceName: "cart"}; !reflect.DeepEqual(got.Labels, want) {
		t.Errorf("labels %v, want %v", got.Labels, want)
	}
	if got.Annotations != nil {
		t.Errorf("annotations %v kept, though the managed fields give the change time", got.Annotations)
	}
	noMF := kubeControllerSlice(t, "shop", "cart", "a", 1)
	noMF.ManagedFields = nil
	if a := kubeTransformed(t, noMF).Annotations; len(a) != 1 || a[corev1.EndpointsLastChangeTriggerTime] == "" {
		t.Errorf("without managed fields: annotations %v, want the trigger time only", a)
	}
	if len(got.OwnerReferences) != 0 || got.GenerateName != "" || got.Generation != 0 {
		t.Errorf("owner references, generateName or generation kept: %+v", got.ObjectMeta)
	}
	if mf := got.ManagedFields; len(mf) != 1 || mf[0].FieldsV1 != nil || mf[0].Manager != "" || mf[0].Time == nil {
		t.Errorf("managed fields %+v, want one entry with a time only", mf)
	}
	for i, e := range got.Endpoints {
		if e.NodeName != nil || e.Hints != nil || e.DeprecatedTopology != nil {
			t.Errorf("endpoint %d keeps nodeName, hints or topology: %+v", i, e)
		}
		if r := e.TargetRef; r == nil || r.Namespace != "" || r.UID != "" || r.ResourceVersion != "" {
			t.Errorf("endpoint %d: targetRef %+v, want kind and name only", i, r)
		}
	}
}

func TestKubeTransformTombstonesAndOthers(t *testing.T) {
	sl := kubeControllerSlice(t, "shop", "cart", "a", 2)
	out, err := kubeTransformSlice(cache.DeletedFinalStateUnknown{Key: "shop/cart-x7k2p", Obj: sl})
	if err != nil {
		t.Fatal(err)
	}
	d, ok := out.(cache.DeletedFinalStateUnknown)
	if !ok || d.Key != "shop/cart-x7k2p" || !reflect.DeepEqual(d.Obj, kubeTransformed(t, sl)) {
		t.Fatalf("tombstone: %+v", out)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "x", Annotations: map[string]string{AnnotationEnabled: "true", "other": "1"}}}
	out, _ = kubeTransformService(cache.DeletedFinalStateUnknown{Key: "x", Obj: svc})
	if d := out.(cache.DeletedFinalStateUnknown); len(d.Obj.(*corev1.Service).Annotations) != 1 {
		t.Fatalf("service tombstone not transformed: %+v", d.Obj)
	}
	for _, obj := range []any{"not an object", &corev1.Pod{}} {
		if a, _ := kubeTransformSlice(obj); !reflect.DeepEqual(a, obj) {
			t.Errorf("slice transform changed %T", obj)
		}
		if a, _ := kubeTransformService(obj); !reflect.DeepEqual(a, obj) {
			t.Errorf("service transform changed %T", obj)
		}
	}
}

// TestKubeTransformService: the settings, the port and the family read
// from a transformed Service are those of the original; the rest is gone.
func TestKubeTransformService(t *testing.T) {
	now := metav1.Now()
	svc := kubeJSONCopy(t, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: "cart", UID: "u1", ResourceVersion: "7",
			Labels: map[string]string{"team": "a"},
			Annotations: map[string]string{
				AnnotationEnabled: "true", AnnotationPort: "grpc", AnnotationFadeIn: "30s",
				corev1.LastAppliedConfigAnnotation: `{"a very":"long JSON document"}`,
			},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Time: &now, FieldsV1: metav1.NewFieldsV1(`{}`)}},
		},
		Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
				{Name: "grpc", Port: 9090, TargetPort: intstr.FromString("grpc")},
			},
			IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol},
			Selector:   map[string]string{"app": "cart"},
			ClusterIP:  "10.96.0.10",
		},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "1.2.3.4"}}}},
	})
	before := svc.DeepCopy()
	out, err := kubeTransformService(svc)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Service)
	if !reflect.DeepEqual(svc, before) {
		t.Fatal("the transform wrote to its input")
	}
	ws, werr := kubeParseSettings(svc)
	gs, gerr := kubeParseSettings(got)
	if !reflect.DeepEqual(gs, ws) || !reflect.DeepEqual(gerr, werr) {
		t.Fatalf("settings %+v %v, want %+v %v", gs, gerr, ws, werr)
	}
	wp, _ := kubeResolvePort(svc, ws.port)
	if gp, _ := kubeResolvePort(got, gs.port); gp != wp {
		t.Fatalf("port %q, want %q", gp, wp)
	}
	v4v6 := []*discoveryv1.EndpointSlice{
		kubeSlice("shop", "cart", "a", discoveryv1.AddressTypeIPv4, "grpc", 9090, kubeReadyEPs("10.0.0.1")),
		kubeSlice("shop", "cart", "b", discoveryv1.AddressTypeIPv6, "grpc", 9090, kubeReadyEPs("fd00::1")),
	}
	if kubeFamily(got, v4v6) != kubeFamily(svc, v4v6) {
		t.Fatal("family differs")
	}
	if a, b := kubeNewestWriteTime(svc.ObjectMeta), kubeNewestWriteTime(got.ObjectMeta); !a.Equal(b) || a.IsZero() {
		t.Fatalf("newest write %v, want %v", b, a)
	}
	if len(got.Annotations) != 3 || len(got.ManagedFields) != 1 || got.ManagedFields[0].FieldsV1 != nil || got.Spec.Selector != nil || got.Spec.ClusterIP != "" ||
		!reflect.DeepEqual(got.Status, corev1.ServiceStatus{}) {
		t.Fatalf("kept more than ringxds reads: %+v", got)
	}
	if !reflect.DeepEqual(got.Labels, svc.Labels) || got.UID != svc.UID || got.ResourceVersion != svc.ResourceVersion {
		t.Fatalf("lost identity or labels: %+v", got.ObjectMeta)
	}
	if again, _ := kubeTransformService(got); !reflect.DeepEqual(again, got) {
		t.Fatal("not idempotent")
	}
}

// TestKubeSliceSelector: the Service selector's requirements reach the
// slice watch, except those on keys the EndpointSlice controller reserves.
func TestKubeSliceSelector(t *testing.T) {
	for _, tc := range []struct{ svc, want string }{
		{"", "kubernetes.io/service-name"},
		{"team=a", "kubernetes.io/service-name,team=a"},
		{"team in (a,b),!legacy,tier!=db", "kubernetes.io/service-name,!legacy,team in (a,b),tier!=db"},
		{"kubernetes.io/service-name=x,team=a", "kubernetes.io/service-name,team=a"},
		{"service.kubernetes.io/headless,endpointslice.kubernetes.io/managed-by=me", "kubernetes.io/service-name"},
	} {
		sel, err := labels.Parse(tc.svc)
		if err != nil {
			t.Fatal(err)
		}
		if got := kubeSliceSelector(sel).String(); got != tc.want {
			t.Errorf("%q: slice selector %q, want %q", tc.svc, got, tc.want)
		}
	}
	sel, _ := labels.Parse("team=a")
	if sl := kubeControllerSlice(t, "shop", "cart", "a", 1); !kubeSliceSelector(sel).Matches(labels.Set(sl.Labels)) {
		t.Error("a controller-written slice of a selected Service does not match")
	}
	if sl := kubeControllerSlice(t, "shop", "cart", "b", 1); kubeSliceSelector(sel).Matches(labels.Set(sl.Labels)) {
		t.Error("a slice of an unselected Service matches")
	}
}
