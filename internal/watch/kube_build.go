package watch

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// kubeBuilder turns the informer caches into a model.State. It is owned by
// the source's single loop and is not safe for concurrent use.
//
// Apart from the fade-in memory (which endpoints joined or left a cluster
// while this process watched it; see docs/kubernetes.md for why that is
// deterministic enough) it is a pure function of the caches. In particular
// a Service whose annotations are bad is not served, in every replica
// alike: a memory of its last valid settings would not survive a restart,
// and a replica started during the mistake would serve something else.
type kubeBuilder struct {
	// maxRingSize is KubeOptions.MaxRingSize: the ring sizes of every
	// Service are lowered to it (kubeCapRingSizes).
	maxRingSize uint64
	// joined maps cluster name -> endpoint identity (its ring key: with a
	// hash key, a Pod restarted under a new IP keeps it) -> the
	// endpoint as the last build emitted it, FirstSeen holding the time it
	// joined (zero: established). A cluster present here has been served
	// before.
	joined map[string]map[string]model.Endpoint
	// hashKeyOf is the hash-key setting each served cluster's identities
	// were taken under; when it changes, every identity does, and the
	// cluster starts over as if seen for the first time.
	hashKeyOf map[string]string
	// departed maps cluster name -> the endpoints that left it while a fade
	// was under way, kept until the cluster's last fade is over.
	departed map[string][]model.Departure
	// draining names the clusters the last build served from terminating
	// endpoints because none other was serving (kubeEndpoints). It is
	// output, for logs and metrics, and is not carried between builds.
	draining map[string]bool
}

func kubeNewBuilder(maxRingSize uint64) *kubeBuilder {
	return &kubeBuilder{
		maxRingSize: maxRingSize,
		joined:      make(map[string]map[string]model.Endpoint),
		hashKeyOf:   make(map[string]string),
		departed:    make(map[string][]model.Departure),
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
		settings, portName, ok := kubeServiceSettings(svc, b.maxRingSize, report)
		if !ok {
			// Forgotten, as a Service never opted in: a replica started
			// now knows nothing of it either.
			continue
		}
		live[key] = true
		c, fadesEnd := b.cluster(svc, settings, portName, slicesOf(svc.Namespace, svc.Name), now, report)
		if now.Before(fadesEnd) && (next.IsZero() || fadesEnd.Before(next)) {
			next = fadesEnd
		}
		if len(c.Endpoints) == 0 {
			// The model has no empty clusters: a Service scaled to zero (or
			// whose endpoints are all terminating) is not served until an
			// endpoint is ready again.
			continue
		}
		state.Clusters = append(state.Clusters, c)
	}
	b.forget(live)
	slices.SortFunc(state.Clusters, func(a, c model.Cluster) int { return strings.Compare(a.Name, c.Name) })
	return state, problems, next
}

// cluster builds the cluster of one valid Service, with fade-in starts and
// departures from the builder's memory, and returns when its last fade
// ends (zero or past: none under way).
func (b *kubeBuilder) cluster(svc *corev1.Service, settings kubeSettings, portName string, svcSlices []*discoveryv1.EndpointSlice, now time.Time,
	report func(kind, object, field, format string, args ...any)) (model.Cluster, time.Time) {
	name := KubeClusterName(svc.Namespace, svc.Name)
	eps, draining, slicesProblems := kubeEndpoints(svc, portName, settings.hashKey, svcSlices)
	if draining {
		b.draining[name] = true
	}
	for _, p := range slicesProblems {
		report("endpointslice", p.object, p.field, "%s", p.msg)
	}
	c := settings.cluster(name, nil)
	// Whatever made an endpoint join or leave (its own slice, another
	// slice, the Service) is the newest write among them.
	changed := kubeFadeTime(kubeServiceChangeTime(svc, svcSlices), now)
	fadesEnd := b.fadeIn(&c, settings.hashKey, eps, changed, now)
	c.ApplyDefaults()
	known := b.joined[name]
	for _, ep := range c.Endpoints {
		known[ep.RingKey()] = ep
	}
	return c, fadesEnd
}

// fadeIn sets the endpoints of c from eps with their fade-in starts, and
// its departures, from the builder's memory of the cluster, which it
// updates: endpoints that joined at changed fade in, those that left at
// changed are replayed while a fade is under way. It returns when the
// cluster's last fade ends.
func (b *kubeBuilder) fadeIn(c *model.Cluster, hashKey string, eps []kubeEndpoint, changed, now time.Time) time.Time {
	name := c.Name
	// A cluster starts over, its endpoints established, when it is first
	// served with endpoints (a replica started later sees it so too: an
	// opt-in or relabel whose slices come a moment after the Service, a
	// scale up from zero) or when every identity changes.
	known, served := b.joined[name]
	if len(known) == 0 || b.hashKeyOf[name] != hashKey {
		known, served = make(map[string]model.Endpoint, len(eps)), false
		b.joined[name] = known
		delete(b.departed, name)
	}
	b.hashKeyOf[name] = hashKey
	present := make(map[string]bool, len(eps))
	// The cluster's fades end together: an endpoint whose own window has
	// passed keeps its start until the last fade in the cluster is over,
	// because the fade-in schedule of the endpoints still fading is
	// replayed from every start since the first of them (fadein.PlanRamp);
	// dropping one start early would change it. A departed endpoint takes
	// part in that replay too, so its window counts as long as it would
	// have run.
	var fadesEnd time.Time
	extend := func(first time.Time) {
		if !first.IsZero() && c.FadeIn != nil {
			// The step at which the fade is over, as the snapshot sees it,
			// not the instant: until then it still ramps.
			if end := (fadein.Curve{Duration: c.FadeIn.Duration}).EndStep(first); end.After(fadesEnd) {
				fadesEnd = end
			}
		}
	}
	for i := range eps {
		e := &eps[i]
		id := e.ep.RingKey()
		present[id] = true
		prev, seen := known[id]
		first := prev.FirstSeen
		// Endpoints of a cluster seen for the first time are established;
		// later arrivals fade in from the time Kubernetes recorded for the
		// change.
		if !seen && served && c.FadeIn != nil {
			first = changed
		}
		e.ep.FirstSeen = first
		extend(first)
	}
	var left []model.Departure
	if c.FadeIn != nil {
		for id, ep := range known {
			if !present[id] {
				left = append(left, model.Departure{Endpoint: ep, Gone: changed})
				extend(ep.FirstSeen)
			}
		}
		for _, d := range b.departed[name] {
			extend(d.Endpoint.FirstSeen)
		}
	}
	fading := c.FadeIn != nil && now.Before(fadesEnd)
	// A removal with no fade under way needs no replay: the ring it leaves
	// is the one every later plan starts from.
	if fading {
		departed := append(slices.Clone(b.departed[name]), left...)
		sortDepartures(departed)
		b.departed[name] = departed
		c.Departed = slices.Clone(departed)
	} else {
		delete(b.departed, name)
	}
	for id := range known {
		if !present[id] {
			delete(known, id)
		}
	}
	for _, e := range eps {
		if !fading {
			e.ep.FirstSeen = time.Time{}
		}
		c.Endpoints = append(c.Endpoints, e.ep)
	}
	return fadesEnd
}

// forget drops the memory of clusters whose Services are no longer served.
func (b *kubeBuilder) forget(live map[string]bool) {
	for name := range b.joined {
		ns, svcName := kubeSplitClusterName(name)
		if !live[ns+"/"+svcName] {
			delete(b.joined, name)
			delete(b.hashKeyOf, name)
		}
	}
	for name := range b.departed {
		ns, svcName := kubeSplitClusterName(name)
		if !live[ns+"/"+svcName] {
			delete(b.departed, name)
		}
	}
}

// kubeServiceSettings reads svc's annotations, resolves its port and
// lowers its ring sizes to maxRingSize, reporting every problem. ok is
// false when anything is wrong: the Service is then not served (see
// kubeBuilder). A ring size over the cap is not wrong, only more than
// this server gives: the Service is served, capped, and the cap reported.
func kubeServiceSettings(svc *corev1.Service, maxRingSize uint64, report func(kind, object, field, format string, args ...any)) (settings kubeSettings, portName string, ok bool) {
	key := svc.Namespace + "/" + svc.Name
	settings, errs := kubeParseSettings(svc)
	if len(errs) == 0 {
		var err error
		if portName, err = kubeResolvePort(svc, settings.port); err != nil {
			errs = append(errs, kubeAnnotationError{annotation: AnnotationPort, msg: err.Error()})
		}
	}
	for _, e := range errs {
		report("annotation", key, e.annotation, "%s; the Service is not served until this is fixed", e.msg)
	}
	if len(errs) > 0 {
		return settings, portName, false
	}
	for _, e := range kubeCapRingSizes(&settings, svc.Annotations, maxRingSize) {
		report("annotation", key, e.annotation, "%s", e.msg)
	}
	return settings, portName, true
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

// kubeServiceChangeTime is the latest change Kubernetes recorded on a
// Service or its slices: the one that made endpoints join or leave, be it
// a slice write (an endpoint added, removed, or turned serving or not,
// which may admit another slice's endpoint as a fallback) or a Service
// write (ringxds.io/port or hash-key, which change every identity). Every
// replica reads the same objects, so they agree on it.
//
// A removal that deleted its slice leaves no time behind (deletion is not
// recorded on any remaining object): then the latest is older than the
// change, and each replica's kubeFadeTime moves it to its own grid step;
// see docs/kubernetes.md.
func kubeServiceChangeTime(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) time.Time {
	latest := kubeNewestWriteTime(svc.ObjectMeta)
	for _, sl := range slices {
		if t := kubeSliceChangeTime(sl); t.After(latest) {
			latest = t
		}
	}
	return latest
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
	if t := kubeNewestWriteTime(sl.ObjectMeta); !t.IsZero() {
		return t
	}
	if v, ok := sl.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t.UTC()
		}
	}
	return sl.CreationTimestamp.UTC()
}

// kubeNewestWriteTime is the newest managedFields time of an object (UTC),
// or zero when none is recorded.
func kubeNewestWriteTime(m metav1.ObjectMeta) time.Time {
	var t time.Time
	for _, f := range m.ManagedFields {
		if f.Time != nil && f.Time.After(t) {
			t = f.Time.Time
		}
	}
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

func kubePtrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
