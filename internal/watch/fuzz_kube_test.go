package watch

import (
	"cmp"
	"encoding/json"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// fuzzAnnotationKeys are the annotations FuzzKubeAnnotations sets, in the
// order of its string arguments; bit i of present says whether key i is
// there at all (an empty value is not an absent one).
var fuzzAnnotationKeys = []string{
	AnnotationEnabled, AnnotationLBPolicy, AnnotationHashHeader, AnnotationRingSize,
	AnnotationMinRingSize, AnnotationMaxRingSize, AnnotationTableSize, AnnotationFadeIn,
	AnnotationFadeInCapacity, AnnotationPort, AnnotationHashKey,
}

// fuzzServicePorts reads "name/port,port,..." as a Service's ports.
func fuzzServicePorts(spec string) []corev1.ServicePort {
	var ports []corev1.ServicePort
	for _, p := range strings.Split(spec, ",") {
		if p == "" {
			continue
		}
		name, num, ok := strings.Cut(p, "/")
		if !ok {
			name, num = "", p
		}
		n, _ := strconv.ParseInt(num, 10, 32)
		ports = append(ports, corev1.ServicePort{Name: name, Port: int32(n)})
	}
	return ports
}

// FuzzKubeAnnotations reads fuzzed ringxds.io/ annotations. Every problem
// must name a ringxds.io/ annotation and say something; the admission rule
// (KubeServiceProblems) must let through exactly the opted-in Services
// the Kubernetes source serves; and settings the source accepts must mean
// what the same settings mean in an endpoints file: the file source
// accepts them and builds the same cluster.
func FuzzKubeAnnotations(f *testing.F) {
	f.Add(uint16(0b1), "true", "", "", "", "", "", "", "", "", "", "", "http/80")
	f.Fuzz(func(t *testing.T, present uint16, enabled, policy, header, ring, minRing, maxRing, table, fade, capacity, port, hashKey, ports string) {
		values := []string{enabled, policy, header, ring, minRing, maxRing, table, fade, capacity, port, hashKey}
		a := map[string]string{}
		for i, k := range fuzzAnnotationKeys {
			if present&(1<<i) != 0 {
				a[k] = values[i]
			}
		}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc", Annotations: a},
			Spec:       corev1.ServiceSpec{Ports: fuzzServicePorts(ports)},
		}

		settings, errs := kubeParseSettings(svc)
		for _, e := range errs {
			if !strings.HasPrefix(e.annotation, "ringxds.io/") || e.msg == "" {
				t.Fatalf("problem %+v names no annotation or says nothing", e)
			}
		}
		problems := KubeServiceProblems(svc)
		if len(a) == 0 && problems != nil {
			t.Fatalf("a Service without ringxds.io/ annotations has problems %q", problems)
		}
		for _, p := range problems {
			if !strings.HasPrefix(p, "ringxds.io/") {
				t.Fatalf("admission problem %q names no annotation", p)
			}
		}
		var reported []string
		_, portName, served := kubeServiceSettings(svc, model.MaxRingSize, func(kind, object, field, format string, args ...any) {
			reported = append(reported, field)
		})
		if served != (len(reported) == 0) {
			t.Fatalf("served %v with problems on %q", served, reported)
		}
		if a[AnnotationEnabled] == "true" && served != (len(problems) == 0) {
			t.Fatalf("admission problems %q, but the source serves the Service: %v (problems on %q)", problems, served, reported)
		}
		if len(errs) > 0 {
			return
		}
		if served {
			found := false
			for _, p := range svc.Spec.Ports {
				found = found || p.Name == portName
			}
			if !found {
				t.Fatalf("port %q resolved from %q is not a port of the Service %+v", portName, settings.port, svc.Spec.Ports)
			}
		}
		checkSettingsAsFile(t, settings)
		if served {
			checkRingSizeCaps(t, svc, settings)
		}
	})
}

// checkRingSizeCaps serves svc, whose settings are valid, under ring size
// caps below, at and above the defaults: it must be served under each,
// with sizes within the cap, the sizes it asked for when they fit, and a
// notice on a ring size annotation (or the fade-in capacity) only when
// something was lowered. The capped settings must mean the same as an
// endpoints file.
func checkRingSizeCaps(t *testing.T, svc *corev1.Service, uncapped kubeSettings) {
	t.Helper()
	want := uncapped.cluster("svc.ns", nil)
	for _, maxRing := range []uint64{1, 1000, DefaultKubeMaxRingSize} {
		var notices []string
		capped, _, served := kubeServiceSettings(svc, maxRing, func(kind, object, field, format string, args ...any) {
			notices = append(notices, field)
		})
		if !served {
			t.Fatalf("cap %d: a valid Service is not served (problems on %q)", maxRing, notices)
		}
		got := capped.cluster("svc.ns", nil)
		if want.MaxRingSize <= maxRing {
			if len(notices) > 0 || !reflect.DeepEqual(got, want) {
				t.Fatalf("cap %d: settings that fit became %+v with notices %q", maxRing, got, notices)
			}
			continue
		}
		if got.MaxRingSize != maxRing || got.MinRingSize != min(want.MinRingSize, maxRing) {
			t.Fatalf("cap %d: ring sizes %d..%d capped to %d..%d", maxRing, want.MinRingSize, want.MaxRingSize, got.MinRingSize, got.MaxRingSize)
		}
		// A notice for each value written over the cap; defaults are
		// lowered without one.
		var wantNotices []string
		over := func(key string, v uint64) {
			if _, ok := svc.Annotations[key]; ok && v > maxRing {
				wantNotices = append(wantNotices, key)
			}
		}
		over(AnnotationRingSize, uncapped.maxRingSize)
		if _, ok := svc.Annotations[AnnotationRingSize]; !ok {
			over(AnnotationMinRingSize, uncapped.minRingSize)
			over(AnnotationMaxRingSize, uncapped.maxRingSize)
		}
		if want.FadeIn != nil && want.FadeIn.Capacity > maxRing {
			wantNotices = append(wantNotices, AnnotationFadeInCapacity)
		}
		if !slices.Equal(notices, wantNotices) {
			t.Fatalf("cap %d: notices on %q, want on %q", maxRing, notices, wantNotices)
		}
		checkSettingsAsFile(t, capped)
	}
}

// checkSettingsAsFile writes settings the Kubernetes source accepted as an
// endpoints file and checks that the file source builds the same cluster.
func checkSettingsAsFile(t *testing.T, s kubeSettings) {
	t.Helper()
	eps := []model.Endpoint{{Address: "10.0.0.1", Port: 80}}
	want := s.cluster("svc.ns", eps)
	if err := want.Validate(); err != nil {
		t.Fatalf("accepted settings %+v build an invalid cluster: %v", s, err)
	}
	c := fileClusterJSON{
		Name: "svc.ns", LBPolicy: string(s.policy), HashHeader: s.hashHeader,
		MinRingSize: s.minRingSize, MaxRingSize: s.maxRingSize, TableSize: s.tableSize,
		Endpoints: []fileEndpointJSON{{Address: "10.0.0.1", Port: 80}},
	}
	if s.fadeIn != nil {
		c.FadeIn = &fileFadeInJSON{Exponent: s.fadeIn.Exponent, Capacity: s.fadeIn.Capacity}
		if s.fadeIn.Duration != 0 {
			c.FadeIn.Duration = s.fadeIn.Duration.String()
		}
	}
	data, err := json.Marshal(fileJSON{Clusters: []fileClusterJSON{c}})
	if err != nil {
		t.Fatal(err)
	}
	state, err := ParseFile("endpoints.yaml", data)
	if err != nil {
		t.Fatalf("settings the Kubernetes source accepts (%+v), as the file\n%s\nare refused: %v", s, data, err)
	}
	got := state.Clusters[0]
	// The file source defaults endpoint fields the annotations do not set.
	want.Endpoints[0].Weight, want.Endpoints[0].Scheme = got.Endpoints[0].Weight, got.Endpoints[0].Scheme
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("settings %+v build\n%+v\nfrom annotations and\n%+v\nfrom the file\n%s", s, want, got, data)
	}
}

// fuzzKubeBytes hands out the fuzzer's bytes; past the end it returns
// zeros.
type fuzzKubeBytes []byte

func (b *fuzzKubeBytes) byte() byte {
	if len(*b) == 0 {
		return 0
	}
	v := (*b)[0]
	*b = (*b)[1:]
	return v
}

// pick returns one of choices.
func fuzzPick[T any](b *fuzzKubeBytes, choices ...T) T {
	return choices[int(b.byte())%len(choices)]
}

func (b *fuzzKubeBytes) string() string {
	n := min(int(b.byte()%16), len(*b))
	s := string((*b)[:n])
	*b = (*b)[n:]
	return s
}

func fuzzBoolPtr(b *fuzzKubeBytes) *bool {
	return fuzzPick(b, (*bool)(nil), new(true), new(false))
}

// fuzzAddresses are addresses an EndpointSlice may carry, well formed or
// not; a raw string from the input is the last choice.
var fuzzAddresses = []string{
	"10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::1", "FD00:0:0::0001", "fd00::2", "::ffff:10.0.0.1",
	"fe80::1%eth0", "010.0.0.1", "web-0.svc", "", "10.0.0.1:80",
}

func fuzzSlice(b *fuzzKubeBytes, now time.Time) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: fuzzPick(b, "svc-a", "svc-b", "svc-c", "svc-a"),
			Labels:            map[string]string{discoveryv1.LabelServiceName: "svc"},
			CreationTimestamp: metav1.NewTime(now.Add(-time.Duration(b.byte()) * time.Second)),
		},
		AddressType: fuzzPick(b, discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN, discoveryv1.AddressTypeIPv4),
	}
	if b.byte()%2 == 1 {
		sl.ManagedFields = []metav1.ManagedFieldsEntry{{Time: new(metav1.NewTime(now.Add(-time.Duration(b.byte()) * time.Second)))}}
	}
	for range b.byte() % 3 {
		sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{
			Name:        fuzzPick(b, new("http"), new(""), nil, new("grpc")),
			Port:        fuzzPick(b, new(int32(8080)), new(int32(0)), nil, new(int32(70000)), new(int32(9090))),
			AppProtocol: fuzzPick(b, nil, new(kubeAppProtocolH2C), new("https")),
		})
	}
	for range b.byte() % 6 {
		e := discoveryv1.Endpoint{
			Conditions: discoveryv1.EndpointConditions{Ready: fuzzBoolPtr(b), Serving: fuzzBoolPtr(b), Terminating: fuzzBoolPtr(b)},
			Hostname:   fuzzPick(b, nil, new("web-0"), new("web-1"), new("")),
			Zone:       fuzzPick(b, nil, new("eu-central-1a")),
		}
		for range b.byte() % 3 {
			a := fuzzPick(b, append(fuzzAddresses, "raw")...)
			if a == "raw" {
				a = b.string()
			}
			e.Addresses = append(e.Addresses, a)
		}
		switch b.byte() % 4 {
		case 1:
			e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: fuzzPick(b, "web-0", "web-1", "web-2")}
		case 2:
			e.TargetRef = &corev1.ObjectReference{Kind: "Node", Name: "n"}
		}
		sl.Endpoints = append(sl.Endpoints, e)
	}
	return sl
}

func fuzzKubeService(b *fuzzKubeBytes) *corev1.Service {
	a := map[string]string{
		AnnotationEnabled:  "true",
		AnnotationLBPolicy: fuzzPick(b, "ring_hash", "maglev", "skipper"),
	}
	if hk := fuzzPick(b, "", KubeHashKeyHostname, KubeHashKeyPodName); hk != "" {
		a[AnnotationHashKey] = hk
	}
	if b.byte()%2 == 1 {
		a[AnnotationFadeIn] = "on"
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc", Annotations: a},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if b.byte()%2 == 1 {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "grpc", Port: 90})
		a[AnnotationPort] = fuzzPick(b, "http", "grpc", "90")
	}
	svc.Spec.IPFamilies = fuzzPick(b, []corev1.IPFamily(nil), []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol})
	return svc
}

// FuzzKubeEndpoints decodes the fuzzer's bytes into an opted-in Service
// and a few EndpointSlices, with arbitrary conditions, addresses,
// hostnames, target references and ports, twice (the slices before and
// after a change), and turns them into endpoints and a State as the
// Kubernetes source does. The endpoints must be usable ring members,
// unique by address and by ring key, sorted, each from a slice endpoint
// that is serving (or a terminating fallback when none serves); every
// State built must pass the model's checks and snapshot.Build.
func FuzzKubeEndpoints(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		b := fuzzKubeBytes(data)
		svc := fuzzKubeService(&b)
		t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
		builder := kubeNewBuilder(DefaultKubeMaxRingSize)
		for round, now := range []time.Time{t0, t0.Add(time.Duration(b.byte()) * time.Second / 4)} {
			var slices []*discoveryv1.EndpointSlice
			for range b.byte() % 4 {
				slices = append(slices, fuzzSlice(&b, now))
			}
			settings, portName, ok := kubeServiceSettings(svc, DefaultKubeMaxRingSize, func(kind, object, field, format string, args ...any) {
				t.Fatalf("the fuzzed Service's annotations are refused: %s %s", field, format)
			})
			if !ok {
				t.Fatal("the fuzzed Service is not served")
			}
			eps, draining, _ := kubeEndpoints(svc, portName, settings.hashKey, slices)
			checkKubeEndpoints(t, slices, eps, draining, settings.hashKey)

			state, problems, _ := builder.build([]*corev1.Service{svc}, func(string, string) []*discoveryv1.EndpointSlice { return slices }, now)
			for _, p := range problems {
				if p.Source != "kubernetes" || p.Message == "" || p.Object == "" {
					t.Fatalf("round %d: problem %+v", round, p)
				}
			}
			if len(state.Clusters) > 1 || len(state.Clusters) == 1 && len(state.Clusters[0].Endpoints) != len(eps) {
				t.Fatalf("round %d: %d endpoints, state %+v", round, len(eps), state)
			}
			for _, c := range state.Clusters {
				if err := c.Validate(); err != nil {
					t.Fatalf("round %d: cluster %q fails the model's checks: %v", round, c.Name, err)
				}
			}
			if _, err := snapshot.Build(state, now); err != nil {
				t.Fatalf("round %d: the state cannot be published: %v\n%+v", round, err, state)
			}
		}
	})
}

func checkKubeEndpoints(t *testing.T, slices []*discoveryv1.EndpointSlice, eps []kubeEndpoint, draining bool, hashKey string) {
	t.Helper()
	// What the slices hold, by object and field, with the endpoint's
	// conditions read again here.
	// Slices may share a name; the endpoint is one of theirs.
	sources := map[string][]discoveryv1.Endpoint{}
	for _, sl := range slices {
		for i, e := range sl.Endpoints {
			key := sl.Namespace + "/" + sl.Name + " endpoints[" + strconv.Itoa(i) + "]"
			sources[key] = append(sources[key], e)
		}
	}
	hostPorts, ringKeys := map[string]bool{}, map[string]bool{}
	var family string
	for i, e := range eps {
		addr, err := netip.ParseAddr(e.ep.Address)
		switch {
		case err != nil || addr.String() != e.ep.Address || addr.Zone() != "" || addr.Is4In6():
			t.Fatalf("endpoint %d has address %q", i, e.ep.Address)
		case e.ep.Port < 1 || e.ep.Port > 65535:
			t.Fatalf("endpoint %d has port %d", i, e.ep.Port)
		case e.ep.Scheme != "http" && e.ep.Scheme != "https" && e.ep.Scheme != "h2c":
			t.Fatalf("endpoint %d has scheme %q", i, e.ep.Scheme)
		}
		f := "IPv4"
		if !addr.Is4() {
			f = "IPv6"
		}
		if family != "" && f != family {
			t.Fatalf("endpoints of two families: %+v", eps)
		}
		family = f
		if hostPorts[e.ep.HostPort()] {
			t.Fatalf("endpoint %s twice", e.ep.HostPort())
		}
		hostPorts[e.ep.HostPort()] = true
		key := e.ep.RingKey()
		if ringKeys[key] {
			t.Fatalf("ring key %q twice", key)
		}
		ringKeys[key] = true
		if e.ep.HashKey != "" && hashKey == "" {
			t.Fatalf("endpoint %d has hash key %q without %s", i, e.ep.HashKey, AnnotationHashKey)
		}
		if i > 0 {
			prev, _ := netip.ParseAddr(eps[i-1].ep.Address)
			if cmp.Or(prev.Compare(addr), cmp.Compare(eps[i-1].ep.Port, e.ep.Port)) > 0 {
				t.Fatalf("endpoints out of order: %s before %s", eps[i-1].ep.HostPort(), e.ep.HostPort())
			}
		}
		matched := false
		for _, src := range sources[e.object+" "+e.field] {
			if len(src.Addresses) == 0 {
				continue
			}
			a, err := netip.ParseAddr(src.Addresses[0])
			admit, fallback := kubeAdmit(src.Conditions)
			matched = matched || err == nil && a.String() == e.ep.Address && (draining && fallback || !draining && admit)
		}
		if !matched {
			t.Fatalf("endpoint %d (%s, draining %v) is no admitted endpoint of %s %s: %+v", i, e.ep.HostPort(), draining, e.object, e.field, sources[e.object+" "+e.field])
		}
	}
}
