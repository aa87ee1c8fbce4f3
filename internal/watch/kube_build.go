package watch

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/model"
)

// kubeAppProtocolH2C is the Kubernetes standard appProtocol for HTTP/2
// without TLS (KEP-3726).
const kubeAppProtocolH2C = "kubernetes.io/h2c"

// kubeProblem is a Problem before it gets its Since time, plus the kind
// used as a metric label.
type kubeProblem struct {
	kind string // "annotation" or "endpointslice"
	Problem
}

// kubeResolved is a Service's last valid settings with its port resolved.
type kubeResolved struct {
	settings kubeSettings
	portName string
}

// kubeBuilder turns the informer caches into a model.State. It is owned by
// the source's single loop and is not safe for concurrent use.
//
// Apart from two memories it is a pure function of the caches: lastGood (a
// Service whose annotations go bad keeps its previous settings) and the
// fade-in memory (which endpoints joined or left a cluster while this
// process watched it; see docs/kubernetes.md for why that is deterministic
// enough).
type kubeBuilder struct {
	lastGood map[string]kubeResolved
	// joined maps cluster name -> host:port -> the endpoint as the last
	// build emitted it, FirstSeen holding the time it joined (zero:
	// established). A cluster present here has been served before.
	joined map[string]map[string]model.Endpoint
	// departed maps cluster name -> the endpoints that left it while a fade
	// was under way, kept until the cluster's last fade is over.
	departed map[string][]model.Departure
	// draining names the clusters the last build served from terminating
	// endpoints because none other was serving (kubeEndpoints). It is
	// output, for logs and metrics, and is not carried between builds.
	draining map[string]bool
}

func kubeNewBuilder() *kubeBuilder {
	return &kubeBuilder{
		lastGood: make(map[string]kubeResolved),
		joined:   make(map[string]map[string]model.Endpoint),
		departed: make(map[string][]model.Departure),
	}
}

// KubeClusterName is the cluster (and xds:/// target) name of a Service:
// "<name>.<namespace>". Service and namespace names are DNS labels, so the
// dot is unambiguous and the name never contains '/'.
func KubeClusterName(namespace, name string) string { return name + "." + namespace }

// kubeOptedIn reports whether svc carries the opt-in annotation at all. A
// value other than "true" is judged in build, so that typos are reported.
func kubeOptedIn(svc *corev1.Service) bool {
	_, ok := svc.Annotations[AnnotationEnabled]
	return ok
}

// build computes the State from services (any order) and the slices of each
// Service. now is used for fade-in only: for expiry, and as the time an
// endpoint that is missing left its cluster. It returns the earliest time at
// which a cluster's last fade-in completes (zero if none), when the State
// must be rebuilt to mark its endpoints established and drop its
// departures.
func (b *kubeBuilder) build(services []*corev1.Service, slicesOf func(namespace, name string) []*discoveryv1.EndpointSlice, now time.Time) (model.State, []kubeProblem, time.Time) {
	services = slices.Clone(services)
	slices.SortFunc(services, func(a, c *corev1.Service) int {
		return cmp.Or(strings.Compare(a.Namespace, c.Namespace), strings.Compare(a.Name, c.Name))
	})
	var (
		state    model.State
		problems []kubeProblem
		next     time.Time
		live     = make(map[string]bool)
	)
	b.draining = make(map[string]bool)
	for _, svc := range services {
		key := svc.Namespace + "/" + svc.Name
		name := KubeClusterName(svc.Namespace, svc.Name)
		report := func(kind, object, field, format string, args ...any) {
			problems = append(problems, kubeProblem{kind: kind, Problem: Problem{
				Source: "kubernetes", Object: object, Field: field, Message: fmt.Sprintf(format, args...),
			}})
		}
		switch v := svc.Annotations[AnnotationEnabled]; v {
		case "true":
		case "false", "":
			continue
		default:
			report("annotation", key, AnnotationEnabled, "%q: want \"true\" or \"false\"", v)
			continue
		}
		live[key] = true

		resolved, ok := b.lastGood[key]
		settings, errs := kubeParseSettings(svc)
		var portName string
		if len(errs) == 0 {
			var err error
			if portName, err = kubeResolvePort(svc, settings.port); err != nil {
				errs = append(errs, kubeAnnotationError{annotation: AnnotationPort, msg: err.Error()})
			}
		}
		if len(errs) == 0 {
			resolved = kubeResolved{settings: settings, portName: portName}
			b.lastGood[key] = resolved
			ok = true
		} else {
			keep := "the Service is not served until this is fixed"
			if ok {
				keep = "the Service keeps its previous settings"
			}
			for _, e := range errs {
				report("annotation", key, e.annotation, "%s; %s", e.msg, keep)
			}
		}
		if !ok {
			continue
		}

		eps, draining, slicesProblems := kubeEndpoints(svc, resolved.portName, slicesOf(svc.Namespace, svc.Name))
		if draining {
			b.draining[name] = true
		}
		for _, p := range slicesProblems {
			report("endpointslice", p.object, p.field, "%s", p.msg)
		}
		c := resolved.settings.cluster(name, nil)
		known, served := b.joined[name]
		if !served {
			known = make(map[string]model.Endpoint, len(eps))
			b.joined[name] = known
		}
		present := make(map[string]bool, len(eps))
		// The cluster's fades end together: an endpoint whose own window
		// has passed keeps its start until the last fade in the cluster is
		// over, because the fade-in schedule of the endpoints still fading
		// is replayed from every start since the first of them
		// (fadein.PlanRamp); dropping one start early would change it. A
		// departed endpoint takes part in that replay too, so its window
		// counts as long as it would have run.
		var fadesEnd time.Time
		extend := func(first time.Time) {
			if !first.IsZero() && c.FadeIn != nil {
				// The step at which the fade is over, as the snapshot
				// sees it, not the instant: until then it still ramps.
				if end := (fadein.Curve{Duration: c.FadeIn.Duration}).EndStep(first); end.After(fadesEnd) {
					fadesEnd = end
				}
			}
		}
		for i := range eps {
			e := &eps[i]
			hp := e.ep.HostPort()
			present[hp] = true
			prev, seen := known[hp]
			first := prev.FirstSeen
			// Endpoints of a cluster seen for the first time are
			// established; later arrivals fade in from the time
			// Kubernetes recorded for their slice change.
			if !seen && served && c.FadeIn != nil {
				first = kubeFadeTime(e.changed, now)
			}
			e.ep.FirstSeen = first
			extend(first)
		}
		var left []model.Departure
		if c.FadeIn != nil {
			gone := kubeDepartureTime(slicesOf(svc.Namespace, svc.Name), now)
			for hp, ep := range known {
				if !present[hp] {
					left = append(left, model.Departure{Endpoint: ep, Gone: gone})
					extend(ep.FirstSeen)
				}
			}
			for _, d := range b.departed[name] {
				extend(d.Endpoint.FirstSeen)
			}
		}
		fading := c.FadeIn != nil && now.Before(fadesEnd)
		if fading && (next.IsZero() || fadesEnd.Before(next)) {
			next = fadesEnd
		}
		// A removal with no fade under way needs no replay: the ring it
		// leaves is the one every later plan starts from.
		if fading {
			departed := append(slices.Clone(b.departed[name]), left...)
			sortDepartures(departed)
			b.departed[name] = departed
			c.Departed = slices.Clone(departed)
		} else {
			delete(b.departed, name)
		}
		for hp := range known {
			if !present[hp] {
				delete(known, hp)
			}
		}
		for _, e := range eps {
			if !fading {
				e.ep.FirstSeen = time.Time{}
			}
			c.Endpoints = append(c.Endpoints, e.ep)
		}
		c.ApplyDefaults()
		for _, ep := range c.Endpoints {
			known[ep.HostPort()] = ep
		}
		if len(c.Endpoints) == 0 {
			// The model has no empty clusters: a Service scaled to zero (or
			// whose endpoints are all terminating) is not served until an
			// endpoint is ready again.
			continue
		}
		state.Clusters = append(state.Clusters, c)
	}
	for key := range b.lastGood {
		if !live[key] {
			delete(b.lastGood, key)
		}
	}
	for name := range b.joined {
		ns, svcName := kubeSplitClusterName(name)
		if !live[ns+"/"+svcName] {
			delete(b.joined, name)
		}
	}
	for name := range b.departed {
		ns, svcName := kubeSplitClusterName(name)
		if !live[ns+"/"+svcName] {
			delete(b.departed, name)
		}
	}
	slices.SortFunc(state.Clusters, func(a, c model.Cluster) int { return strings.Compare(a.Name, c.Name) })
	return state, problems, next
}

// sortDepartures puts departures in the order every replica and version
// agrees on, whichever source recorded them: by when they left, then by
// host:port.
func sortDepartures(ds []model.Departure) {
	slices.SortFunc(ds, func(a, b model.Departure) int {
		return cmp.Or(a.Gone.Compare(b.Gone), strings.Compare(a.Endpoint.HostPort(), b.Endpoint.HostPort()))
	})
}

// kubeSplitClusterName inverts KubeClusterName.
func kubeSplitClusterName(name string) (namespace, svc string) {
	svc, namespace, _ = strings.Cut(name, ".")
	return namespace, svc
}

type kubeEndpoint struct {
	ep model.Endpoint
	// changed is when Kubernetes says the endpoint's slice last changed.
	changed time.Time
}

type kubeSliceProblem struct {
	object, field, msg string
}

// kubeEndpoints is the deduplicated union of the serving endpoints of all
// slices of svc, on the slice port named portName, sorted by address and
// port. Slices are read in name order so duplicates resolve the same way in
// every replica.
//
// An endpoint joins when it is serving and not terminating (kubeAdmit).
// When no endpoint of the Service qualifies, the serving endpoints that are
// terminating join instead, as kube-proxy does (KEP-1669): draining is then
// true. The fallback is per Service, as a rollout is.
func kubeEndpoints(svc *corev1.Service, portName string, all []*discoveryv1.EndpointSlice) (eps []kubeEndpoint, draining bool, problems []kubeSliceProblem) {
	all = slices.Clone(all)
	slices.SortFunc(all, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	family := kubeFamily(svc, all)
	var (
		ready, terminating []kubeEndpoint
		seen               = make(map[string]bool)
		seenTerminating    = make(map[string]bool)
	)
	for _, sl := range all {
		obj := sl.Namespace + "/" + sl.Name
		if sl.AddressType == discoveryv1.AddressTypeFQDN {
			problems = append(problems, kubeSliceProblem{obj, "addressType", "FQDN slices are not supported; the slice is ignored"})
			continue
		}
		if sl.AddressType != family || len(sl.Endpoints) == 0 {
			continue
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
			problems = append(problems, kubeSliceProblem{obj, "ports", fmt.Sprintf("no port named %q; its endpoints are skipped", portName)})
			continue
		case port.Port == nil || *port.Port < 1 || *port.Port > 65535:
			problems = append(problems, kubeSliceProblem{obj, "ports", fmt.Sprintf("port %q has no usable number; its endpoints are skipped", portName)})
			continue
		}
		scheme := "http"
		switch kubePtrOr(port.AppProtocol, "") {
		case kubeAppProtocolH2C:
			scheme = "h2c"
		case "https":
			scheme = "https"
		}
		changed := kubeSliceChangeTime(sl)
		for i, e := range sl.Endpoints {
			admit, fallback := kubeAdmit(e.Conditions)
			if !admit && !fallback {
				continue
			}
			field := fmt.Sprintf("endpoints[%d].addresses", i)
			if len(e.Addresses) == 0 {
				problems = append(problems, kubeSliceProblem{obj, field, "no address; the endpoint is skipped"})
				continue
			}
			// The API allows several fungible addresses and says consumers
			// may use the first only; a ring needs one identity per endpoint.
			addr, err := netip.ParseAddr(e.Addresses[0])
			if err != nil || addr.Zone() != "" || (family == discoveryv1.AddressTypeIPv4) != addr.Is4() {
				problems = append(problems, kubeSliceProblem{obj, field, fmt.Sprintf("%q is not an %s address; the endpoint is skipped", e.Addresses[0], family)})
				continue
			}
			ep := kubeEndpoint{ep: model.Endpoint{
				Address: addr.String(),
				Port:    uint32(*port.Port),
				Scheme:  scheme,
				Zone:    kubePtrOr(e.Zone, ""),
			}, changed: changed}
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
	return eps, draining, problems
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
// while it still answers in-flight requests, not after.
func kubeAdmit(c discoveryv1.EndpointConditions) (admit, draining bool) {
	serving := kubePtrOr(c.Ready, true)
	if c.Serving != nil {
		serving = *c.Serving
	}
	if !serving {
		return false, false
	}
	if kubePtrOr(c.Terminating, false) {
		return false, true
	}
	return true, false
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

// kubeDepartureTime is when endpoints missing from a Service's slices at
// now left: the latest change Kubernetes recorded on its slices (the
// removal updated one of them), put on the fade step grid by kubeFadeTime
// as a start is. A removal that deleted its slice leaves no trace; then it
// counts from the earliest step the grid allows at now.
func kubeDepartureTime(slices []*discoveryv1.EndpointSlice, now time.Time) time.Time {
	var latest time.Time
	for _, sl := range slices {
		if t := kubeSliceChangeTime(sl); t.After(latest) {
			latest = t
		}
	}
	return kubeFadeTime(latest, now)
}

// kubeFadeTime is the fade start (or departure) for a change Kubernetes
// recorded at recorded and this replica builds at now: the whole second
// (fade step, fadein.StepTime) of the recorded time.
//
// Every replica reads the same recorded time from the same object version,
// and the fade steps fall on whole wall-clock seconds anyway, so replicas
// that learn of the change on time publish the same start, to the
// nanosecond, however far apart they build. "On time" is what the fade-in
// plan needs: it keeps what it may have published before it learned of an
// endpoint only for fadein.FreezeLag after the start's step (docs/fade-in.md,
// "Starts at different times"). A replica whose step at now is later than
// that (a slow informer, a reconnect, a write recorded more than about 2 s
// before the replica sees it) starts the fade FreezeLag before its own
// step instead, and a time stamped ahead of its clock counts from its own
// step; both still on the grid, so such replicas agree with each other
// when they build within one second.
func kubeFadeTime(recorded, now time.Time) time.Time {
	t, step := fadein.StepTime(recorded), fadein.StepTime(now)
	if earliest := step.Add(-fadein.FreezeLag); t.Before(earliest) {
		return earliest
	}
	if t.After(step) {
		return step
	}
	return t
}

// kubeSliceChangeTime is the time Kubernetes recorded for the slice's
// latest change, the same in every replica: the newest managedFields time,
// which the API server stamps on each write that changes a field (whole
// seconds: the API does not carry more); else the EndpointSlice
// controller's last-change-trigger-time; else the creation time.
//
// The write time comes first although the trigger time (when the Pod
// changed) is earlier and finer: a replica cannot learn of a change before
// it is written, and in a rollout the controller often writes more than
// 2 s after the trigger, so a trigger-based start would fall before the
// window kubeFadeTime allows and be moved by each replica's own clock.
// The write time stays inside it whenever the replica learns on time.
func kubeSliceChangeTime(sl *discoveryv1.EndpointSlice) time.Time {
	var t time.Time
	for _, m := range sl.ManagedFields {
		if m.Time != nil && m.Time.After(t) {
			t = m.Time.Time
		}
	}
	if !t.IsZero() {
		return t.UTC()
	}
	if v, ok := sl.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t.UTC()
		}
	}
	return sl.CreationTimestamp.UTC()
}

func kubePtrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
