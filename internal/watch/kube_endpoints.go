package watch

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ringxds/ringxds/internal/model"
)

type kubeEndpoint struct {
	ep model.Endpoint
	// object and field locate the endpoint in its slice, for problems
	// found after the slices are merged.
	object, field string
}

type kubeSliceProblem struct {
	object, field, msg string
}

// kubeEndpoints is the deduplicated union of the serving endpoints of all
// slices of svc, on the slice port named portName, sorted by address and
// port. Slices are read in name order so duplicates resolve the same way in
// every replica. hashKey is the Service's ringxds.io/hash-key setting.
//
// An endpoint joins when it is serving and not terminating (kubeAdmit).
// When no endpoint of the Service qualifies, the serving endpoints that are
// terminating join instead, as kube-proxy does (KEP-1669): draining is then
// true. The fallback is per Service, as a rollout is.
func kubeEndpoints(svc *corev1.Service, portName, hashKey string, all []*discoveryv1.EndpointSlice) (eps []kubeEndpoint, draining bool, problems []kubeSliceProblem) {
	all = slices.Clone(all)
	slices.SortFunc(all, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	family := kubeFamily(svc, all)
	var (
		ready, terminating []kubeEndpoint
		seen               = make(map[string]bool)
		seenTerminating    = make(map[string]bool)
	)
	report := func(object, field, format string, args ...any) {
		problems = append(problems, kubeSliceProblem{object, field, fmt.Sprintf(format, args...)})
	}
	for _, sl := range all {
		tmpl, ok := kubeSliceTemplate(sl, family, portName, report)
		if !ok {
			continue
		}
		for i, e := range sl.Endpoints {
			admit, fallback := kubeAdmit(e.Conditions)
			if !admit && !fallback {
				continue
			}
			ep, ok := kubeReadEndpoint(tmpl, i, e, family, hashKey, report)
			if !ok {
				continue
			}
			hp := ep.ep.HostPort()
			switch {
			case admit && !seen[hp]:
				seen[hp] = true
				ready = append(ready, ep)
			case fallback && !seenTerminating[hp]:
				seenTerminating[hp] = true
				terminating = append(terminating, ep)
			}
		}
	}
	eps = ready
	if len(eps) == 0 && len(terminating) > 0 {
		eps, draining = terminating, true
	}
	slices.SortFunc(eps, func(a, b kubeEndpoint) int {
		x, _ := netip.ParseAddr(a.ep.Address)
		y, _ := netip.ParseAddr(b.ep.Address)
		return cmp.Or(x.Compare(y), cmp.Compare(a.ep.Port, b.ep.Port))
	})
	return kubeUniqueRingKeys(eps, hashKey, report), draining, problems
}

// kubeSliceTemplate checks a slice's family and port and returns what its
// endpoints share: the port and scheme. ok is false when the
// slice has nothing for the ring.
func kubeSliceTemplate(sl *discoveryv1.EndpointSlice, family discoveryv1.AddressType, portName string, report func(object, field, format string, args ...any)) (tmpl kubeEndpoint, ok bool) {
	obj := sl.Namespace + "/" + sl.Name
	if sl.AddressType == discoveryv1.AddressTypeFQDN {
		report(obj, "addressType", "FQDN slices are not supported; the slice is ignored")
		return tmpl, false
	}
	if sl.AddressType != family || len(sl.Endpoints) == 0 {
		return tmpl, false
	}
	var port *discoveryv1.EndpointPort
	for i := range sl.Ports {
		if p := &sl.Ports[i]; kubePtrOr(p.Name, "") == portName {
			port = p
			break
		}
	}
	switch {
	case port == nil:
		report(obj, "ports", "no port named %q; its endpoints are skipped", portName)
		return tmpl, false
	case port.Port == nil || *port.Port < 1 || *port.Port > 65535:
		report(obj, "ports", "port %q has no usable number; its endpoints are skipped", portName)
		return tmpl, false
	}
	scheme := "http"
	switch kubePtrOr(port.AppProtocol, "") {
	case kubeAppProtocolH2C:
		scheme = "h2c"
	case "https":
		scheme = "https"
	}
	return kubeEndpoint{
		ep:     model.Endpoint{Port: uint32(*port.Port), Scheme: scheme},
		object: obj,
	}, true
}

// kubeReadEndpoint fills the template with endpoint i of its slice.
func kubeReadEndpoint(tmpl kubeEndpoint, i int, e discoveryv1.Endpoint, family discoveryv1.AddressType, hashKey string, report func(object, field, format string, args ...any)) (kubeEndpoint, bool) {
	ep := tmpl
	ep.field = fmt.Sprintf("endpoints[%d]", i)
	if len(e.Addresses) == 0 {
		report(ep.object, ep.field+".addresses", "no address; the endpoint is skipped")
		return ep, false
	}
	// The API allows several fungible addresses and says consumers may use
	// the first only; a ring needs one identity per endpoint.
	addr, err := netip.ParseAddr(e.Addresses[0])
	if err != nil || addr.Zone() != "" || (family == discoveryv1.AddressTypeIPv4) != addr.Is4() {
		report(ep.object, ep.field+".addresses", "%q is not an %s address; the endpoint is skipped", e.Addresses[0], family)
		return ep, false
	}
	if addr.Is4In6() {
		// The API server refuses these in IPv6 slices; a slice that
		// bypassed it would put the pod on the ring under a second key,
		// which the file source refuses too.
		report(ep.object, ep.field+".addresses", "%q is an IPv4-mapped IPv6 address; the endpoint is skipped", e.Addresses[0])
		return ep, false
	}
	ep.ep.Address = addr.String()
	ep.ep.Zone = kubePtrOr(e.Zone, "")
	ep.ep.HashKey = kubeHashKey(e, hashKey)
	return ep, true
}

// kubeHashKey is the ring key the Service's hash-key setting gives e, or
// "" for its address. The hostname is what the EndpointSlice controller
// copies from a Pod whose subdomain names the Service (a StatefulSet's
// Pods behind their headless Service); the Pod name comes from the
// endpoint's targetRef. Both survive a Pod's restart, its IP does not.
func kubeHashKey(e discoveryv1.Endpoint, hashKey string) string {
	switch hashKey {
	case KubeHashKeyHostname:
		return kubePtrOr(e.Hostname, "")
	case KubeHashKeyPodName:
		if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
			return e.TargetRef.Name
		}
	}
	return ""
}

func kubeHashKeySource(hashKey string) string {
	if hashKey == KubeHashKeyPodName {
		return "Pod targetRef"
	}
	return "hostname"
}

// kubeUniqueRingKeys checks the ring keys of the endpoints that join the
// ring. One without the hash key the Service asks for is hashed by its
// address and reported, so that a wrong choice of key shows. Of endpoints
// sharing a ring key (hash key, else address) the first in address order
// is kept and the others are skipped and reported: one ring identity
// cannot be two endpoints, and the model refuses it.
func kubeUniqueRingKeys(eps []kubeEndpoint, hashKey string, report func(object, field, format string, args ...any)) []kubeEndpoint {
	owner := make(map[string]string, len(eps))
	for _, e := range eps {
		if e.ep.HashKey == "" {
			owner[e.ep.HostPort()] = e.ep.HostPort()
		}
	}
	return slices.DeleteFunc(eps, func(e kubeEndpoint) bool {
		k := e.ep.HashKey
		if k == "" {
			if hashKey != "" {
				report(e.object, e.field, "has no %s for %s %q; the endpoint is hashed by its address", kubeHashKeySource(hashKey), AnnotationHashKey, hashKey)
			}
			return false
		}
		if first, dup := owner[k]; dup {
			report(e.object, e.field, "hash key %q is also %s's ring key; the endpoint is skipped", k, first)
			return true
		}
		owner[k] = e.ep.HostPort()
		return false
	})
}

// kubeAdmit reads an endpoint's conditions: admit when it joins the ring,
// draining when it may join only as a fallback (kubeEndpoints).
//
// Serving, not ready, decides: a Service with publishNotReadyAddresses has
// the EndpointSlice controller write ready=true for every Pod, ready or
// not, while serving keeps the Pod's real readiness. A publisher that
// leaves serving unset (older controllers, hand-written slices) is read by
// ready, and an unset ready means "unknown", which counts as ready, as
// kube-proxy counts it. Terminating endpoints leave the ring while any
// other endpoint serves: the Pod is going away, and its keys should move
// while it still answers in-flight requests, not after. A terminating
// endpoint with serving unset is a fallback, as kube-proxy reads an unset
// serving as serving (its ready says nothing there: the controller writes
// ready=false for every terminating Pod).
func kubeAdmit(c discoveryv1.EndpointConditions) (admit, draining bool) {
	if kubePtrOr(c.Terminating, false) {
		return false, kubePtrOr(c.Serving, true)
	}
	if c.Serving != nil {
		return *c.Serving, false
	}
	return kubePtrOr(c.Ready, true), false
}

// kubeFamily picks the one address family whose endpoints join the ring. A
// dual-stack Service has each Pod in an IPv4 and an IPv6 slice; taking both
// would give every Pod two ring identities and double weight. The Service's
// primary family wins; without one, IPv4.
func kubeFamily(svc *corev1.Service, all []*discoveryv1.EndpointSlice) discoveryv1.AddressType {
	has := map[discoveryv1.AddressType]bool{}
	for _, sl := range all {
		if len(sl.Endpoints) > 0 {
			has[sl.AddressType] = true
		}
	}
	if has[discoveryv1.AddressTypeIPv4] && has[discoveryv1.AddressTypeIPv6] {
		if len(svc.Spec.IPFamilies) > 0 && svc.Spec.IPFamilies[0] == corev1.IPv6Protocol {
			return discoveryv1.AddressTypeIPv6
		}
		return discoveryv1.AddressTypeIPv4
	}
	if has[discoveryv1.AddressTypeIPv6] {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}
