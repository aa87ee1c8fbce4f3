package watch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ringxds/ringxds/internal/model"
)

// Defaults for KubeOptions. A burst of EndpointSlice writes (a rollout, a
// scale-up) is coalesced into one State: publish once the burst has been
// quiet for DefaultKubeDebounce, but never later than DefaultKubeMaxDelay
// after its first event, so a steady trickle cannot starve the rings. See
// docs/kubernetes.md for the reasoning behind the numbers.
const (
	DefaultKubeDebounce = 100 * time.Millisecond
	DefaultKubeMaxDelay = time.Second
)

// DefaultKubeMaxRingSize is the default KubeOptions.MaxRingSize, 65,536
// entries: the largest ring whose fades fadein orders exactly (larger ones
// follow each endpoint's own curve, docs/fade-in.md), 16 times the 4096
// every gRPC client caps its ring at anyway, and about 1.5 MiB per cluster
// in each Envoy (24 bytes an entry) where Envoy's own limit, 8,388,608,
// costs 192 MiB and a rebuild of that ring on every EDS update of a fade.
// docs/kubernetes.md, "Ring size cap", has the reasoning.
const DefaultKubeMaxRingSize = 1 << 16

// KubeMaxRingSizeFlag is the xds-server flag that sets
// KubeOptions.MaxRingSize. It is declared here so that the problems the
// cap causes name the flag a tenant must ask the operator about, and the
// flag cannot be renamed without them.
const KubeMaxRingSizeFlag = "kube-max-ring-size"

// kubeIndexByService indexes EndpointSlices by "namespace/service".
const kubeIndexByService = "ringxds-service"

// KubeOptions configure a KubeSource. The zero value watches every namespace.
type KubeOptions struct {
	// Namespace restricts the watch to one namespace; empty means all.
	Namespace string
	// ServiceSelector is a label selector (kubectl syntax) a Service must
	// match, in addition to its opt-in annotation, to be served. It also
	// filters the EndpointSlice watch, so a Service's slices must carry
	// the labels too; the EndpointSlice controller copies them from the
	// Service (kubeSliceSelector).
	ServiceSelector string
	// Debounce is the quiet period that ends a burst of changes.
	// Zero means DefaultKubeDebounce.
	Debounce time.Duration
	// MaxDelay bounds how long a change waits while events keep arriving.
	// Zero means DefaultKubeMaxDelay (or Debounce, if that is longer).
	MaxDelay time.Duration
	// MaxRingSize caps the ring sizes a Service may ask for, in entries.
	// Annotations are tenant input, and a ring of Envoy's largest size
	// costs every Envoy and clientlib that reads the cluster, and the
	// server's fade-in planning, far more than the cluster needs. A
	// Service asking for more is still served, with its ring sizes (and
	// its fade-in capacity) lowered to the cap, and a Problem names the
	// annotation. The cap applies to the defaults too, when it is below
	// them. Zero means DefaultKubeMaxRingSize; model.MaxRingSize, Envoy's
	// limit, caps nothing. The file source is operator input and has no
	// cap.
	MaxRingSize uint64
	// Logger receives the source's logs; nil discards them.
	Logger *zap.Logger
	// Registerer receives the source's metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
}

// KubeSource serves opted-in Kubernetes Services: it watches Services and
// discovery.k8s.io/v1 EndpointSlices with shared informers and publishes a
// State built from the informer caches. It implements Source.
type KubeSource struct {
	client   kubernetes.Interface
	opts     KubeOptions
	selector labels.Selector
	// sliceSelector is selector applied to EndpointSlices
	// (kubeSliceSelector).
	sliceSelector labels.Selector
	log           *zap.Logger
	metrics       *kubeMetrics
	// keepWhole turns the cache transforms off, so that tests can measure
	// what they save.
	keepWhole bool

	// dirty is signalled (without blocking) by event handlers; the loop in
	// Run does all the work.
	dirty chan struct{}

	mu sync.Mutex
	// pendingSince is when the earliest event not yet reflected in a
	// published State arrived; zero when nothing is pending.
	pendingSince time.Time
	problems     []Problem
	running      bool

	// problemSince is when each current problem was first seen. Only the
	// loop in Run reads or writes it.
	problemSince map[kubeProblemKey]time.Time
}

var _ Source = (*KubeSource)(nil)

// NewKubeSource checks opts and returns a source reading from client. It
// contacts nothing until Run.
func NewKubeSource(client kubernetes.Interface, opts KubeOptions) (*KubeSource, error) {
	if client == nil {
		return nil, errors.New("kubernetes source: nil client")
	}
	if opts.Debounce < 0 {
		return nil, fmt.Errorf("kubernetes source: debounce %v must not be negative", opts.Debounce)
	}
	if opts.MaxDelay < 0 {
		return nil, fmt.Errorf("kubernetes source: max delay %v must not be negative", opts.MaxDelay)
	}
	if opts.Debounce == 0 {
		opts.Debounce = DefaultKubeDebounce
	}
	if opts.MaxDelay == 0 {
		opts.MaxDelay = max(DefaultKubeMaxDelay, opts.Debounce)
	}
	if opts.MaxRingSize > model.MaxRingSize {
		return nil, fmt.Errorf("kubernetes source: max ring size %d is above Envoy's limit %d", opts.MaxRingSize, model.MaxRingSize)
	}
	if opts.MaxRingSize == 0 {
		opts.MaxRingSize = DefaultKubeMaxRingSize
	}
	if opts.MaxDelay < opts.Debounce {
		return nil, fmt.Errorf("kubernetes source: max delay %v is shorter than debounce %v", opts.MaxDelay, opts.Debounce)
	}
	sel, err := labels.Parse(opts.ServiceSelector)
	if err != nil {
		return nil, fmt.Errorf("kubernetes source: service selector %q: %w", opts.ServiceSelector, err)
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	m, err := kubeNewMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("kubernetes source: %w", err)
	}
	return &KubeSource{
		client:        client,
		opts:          opts,
		selector:      sel,
		sliceSelector: kubeSliceSelector(sel),
		log:           log.With(zap.String("source", "kubernetes")),
		metrics:       m,
		dirty:         make(chan struct{}, 1),
	}, nil
}

// Problems returns the annotation and EndpointSlice errors currently in
// force, oldest first.
func (s *KubeSource) Problems() []Problem {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.problems)
}

// Run starts the informers, waits for their first full listing, publishes
// the initial State (possibly empty) and then a new State after each burst
// of relevant changes. Informers reconnect by themselves when the API
// server goes away; meanwhile the last State stays in force. Run returns
// nil when ctx is done, and an error only if it is called twice.
func (s *KubeSource) Run(ctx context.Context, publish func(model.State)) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return errors.New("kubernetes source: Run called twice")
	}
	s.running = true
	s.mu.Unlock()

	client := kubeWatchReporter{s.client, s.kubeWatchFailed}
	svcFactory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(s.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = s.selector.String() }))
	sliceFactory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(s.opts.Namespace),
		// Only slices that belong to a selected Service can matter.
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = s.sliceSelector.String() }))

	svcInformer := svcFactory.Core().V1().Services()
	sliceInformer := sliceFactory.Discovery().V1().EndpointSlices()
	svcLister := svcInformer.Lister()
	sliceIndexer := sliceInformer.Informer().GetIndexer()
	svcReg, sliceReg, err := s.kubeConfigure(svcInformer.Informer(), sliceInformer.Informer(), svcLister)
	if err != nil {
		return err
	}

	svcFactory.Start(ctx.Done())
	sliceFactory.Start(ctx.Done())
	// Deferred first, so it runs after the informers (and their handlers)
	// have stopped: the caches are gone then.
	defer func() {
		s.metrics.cached.WithLabelValues("service").Set(0)
		s.metrics.cached.WithLabelValues("endpointslice").Set(0)
	}()
	defer svcFactory.Shutdown()
	defer sliceFactory.Shutdown()

	s.log.Info("waiting for informer caches", zap.String("namespace", s.opts.Namespace),
		zap.String("selector", s.selector.String()), zap.String("endpointslice_selector", s.sliceSelector.String()),
		zap.Uint64("max_ring_size", s.opts.MaxRingSize))
	// The handlers' registrations sync once the initial listing has also
	// reached the handlers, so the cached-objects gauge is right from the
	// first State on.
	if !cache.WaitForCacheSync(ctx.Done(), svcReg.HasSynced, sliceReg.HasSynced) {
		return nil
	}
	s.log.Info("informer caches synced")

	r := &kubeRebuilder{s: s, b: kubeNewBuilder(s.opts.MaxRingSize), services: svcLister, slices: sliceIndexer, publish: publish}
	return s.kubeLoop(ctx, r.rebuild)
}

// kubeRebuilder builds and publishes States from the informer caches. Only
// the loop in Run uses it.
type kubeRebuilder struct {
	s           *KubeSource
	b           *kubeBuilder
	services    listersv1.ServiceLister
	slices      cache.Indexer
	publish     func(model.State)
	last        *model.State
	wasDraining map[string]bool
}

// rebuild builds the State from the caches and publishes it if it
// changed. It returns when a fade ends and the State must be rebuilt.
func (r *kubeRebuilder) rebuild(reason string) time.Time {
	s := r.s
	s.mu.Lock()
	changedAt := s.pendingSince
	s.pendingSince = time.Time{}
	s.mu.Unlock()
	if changedAt.IsZero() {
		changedAt = time.Now()
	}

	// The source's CPU is the reading and building; publishing runs the
	// server's build and push, which are counted apart.
	stopCPU := sync.OnceFunc(measureCPU(s.metrics.cpu))
	defer stopCPU()
	start := time.Now()
	svcs, err := r.services.List(labels.Everything())
	if err != nil {
		// A cache lister cannot fail with labels.Everything; keep serving.
		s.log.Error("listing services from cache", zap.Error(err))
		return time.Time{}
	}
	svcs = slices.DeleteFunc(svcs, func(svc *corev1.Service) bool { return !kubeOptedIn(svc) })
	state, problems, next := r.b.build(svcs, func(ns, name string) []*discoveryv1.EndpointSlice {
		return kubeSlicesFor(r.slices, ns, name)
	}, start)
	s.metrics.rebuilds.Inc()
	s.metrics.rebuildSeconds.Observe(time.Since(start).Seconds())
	s.kubeSetProblems(problems, start)
	s.kubeLogDraining(r.wasDraining, r.b.draining)
	r.wasDraining = r.b.draining

	if err := state.Normalize(); err != nil {
		// build validates everything it emits; reaching this is a bug, and
		// the last good State stays in force.
		s.log.Error("built an invalid state; keeping the previous one", zap.Error(err))
		return next
	}
	if r.last != nil && reflect.DeepEqual(r.last.Clusters, state.Clusters) {
		s.log.Debug("rebuild changed nothing", zap.String("reason", reason))
		return next
	}
	state.ChangedAt = changedAt
	stopCPU()
	r.publish(state)
	s.metrics.publishes.Inc()
	s.metrics.clusters.Set(float64(len(state.Clusters)))
	s.log.Info("published state", zap.String("reason", reason), zap.Int("clusters", len(state.Clusters)),
		zap.Duration("since_change", time.Since(changedAt)))
	r.last = &state
	return next
}

// kubeLoop rebuilds at once, then after each burst of changes (debounced)
// and when a fade ends, until ctx is done.
func (s *KubeSource) kubeLoop(ctx context.Context, rebuild func(reason string) time.Time) error {
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	fade := time.NewTimer(time.Hour)
	fade.Stop()
	defer quiet.Stop()
	defer fade.Stop()
	armFade := func(next time.Time) {
		fade.Stop()
		if !next.IsZero() {
			fade.Reset(max(time.Until(next), 0))
		}
	}

	armFade(rebuild("initial sync"))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.dirty:
			s.mu.Lock()
			first := s.pendingSince
			s.mu.Unlock()
			if first.IsZero() {
				continue
			}
			quiet.Reset(max(min(s.opts.Debounce, time.Until(first.Add(s.opts.MaxDelay))), 0))
		case <-quiet.C:
			armFade(rebuild("changes"))
		case <-fade.C:
			armFade(rebuild("fade-in complete"))
		}
	}
}

// kubeConfigure sets up the informers before they start: the slice index,
// watch error logging, the transforms and the event handlers, whose
// registrations it returns.
func (s *KubeSource) kubeConfigure(svcInf, sliceInf cache.SharedIndexInformer, svcLister listersv1.ServiceLister) (svcReg, sliceReg cache.ResourceEventHandlerRegistration, err error) {
	if err := sliceInf.AddIndexers(cache.Indexers{kubeIndexByService: kubeSliceServiceKey}); err != nil {
		return nil, nil, fmt.Errorf("kubernetes source: index slices: %w", err)
	}
	for _, inf := range []cache.SharedIndexInformer{svcInf, sliceInf} {
		if err := inf.SetWatchErrorHandlerWithContext(s.kubeWatchError); err != nil {
			return nil, nil, fmt.Errorf("kubernetes source: watch error handler: %w", err)
		}
	}
	if !s.keepWhole {
		if err := svcInf.SetTransform(kubeTransformService); err != nil {
			return nil, nil, fmt.Errorf("kubernetes source: service transform: %w", err)
		}
		if err := sliceInf.SetTransform(kubeTransformSlice); err != nil {
			return nil, nil, fmt.Errorf("kubernetes source: endpointslice transform: %w", err)
		}
	}
	if svcReg, err = svcInf.AddEventHandler(s.kubeServiceHandler()); err != nil {
		return nil, nil, fmt.Errorf("kubernetes source: service handler: %w", err)
	}
	if sliceReg, err = sliceInf.AddEventHandler(s.kubeSliceHandler(svcLister)); err != nil {
		return nil, nil, fmt.Errorf("kubernetes source: endpointslice handler: %w", err)
	}
	return svcReg, sliceReg, nil
}

// kubeMarkDirty records that the caches changed. It is all an event handler
// does, so handlers never block the informers.
func (s *KubeSource) kubeMarkDirty() {
	s.mu.Lock()
	if s.pendingSince.IsZero() {
		s.pendingSince = time.Now()
	}
	s.mu.Unlock()
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

func (s *KubeSource) kubeServiceHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			s.metrics.events.WithLabelValues("service", "add").Inc()
			s.metrics.cached.WithLabelValues("service").Inc()
			if svc, ok := obj.(*corev1.Service); ok && kubeOptedIn(svc) {
				s.kubeMarkDirty()
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			s.metrics.events.WithLabelValues("service", "update").Inc()
			o, ok1 := oldObj.(*corev1.Service)
			n, ok2 := newObj.(*corev1.Service)
			if !ok1 || !ok2 || (!kubeOptedIn(o) && !kubeOptedIn(n)) {
				return
			}
			// Status-only and resourceVersion-only updates (and resyncs
			// after a reconnect) cannot change the State.
			if reflect.DeepEqual(o.Annotations, n.Annotations) && reflect.DeepEqual(o.Spec, n.Spec) {
				return
			}
			s.kubeMarkDirty()
		},
		DeleteFunc: func(obj any) {
			s.metrics.events.WithLabelValues("service", "delete").Inc()
			s.metrics.cached.WithLabelValues("service").Dec()
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if svc, ok := obj.(*corev1.Service); !ok || kubeOptedIn(svc) {
				s.kubeMarkDirty()
			}
		},
	}
}

func (s *KubeSource) kubeSliceHandler(svcs listersv1.ServiceLister) cache.ResourceEventHandler {
	// A slice matters only if its Service is opted in. A slice seen before
	// its Service is picked up when the Service arrives, since every
	// rebuild reads all slices of each Service from the cache.
	relevant := func(obj any) bool {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		sl, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return true
		}
		svc, err := svcs.Services(sl.Namespace).Get(sl.Labels[discoveryv1.LabelServiceName])
		return err == nil && kubeOptedIn(svc)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			s.metrics.events.WithLabelValues("endpointslice", "add").Inc()
			s.metrics.cached.WithLabelValues("endpointslice").Inc()
			if relevant(obj) {
				s.kubeMarkDirty()
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			s.metrics.events.WithLabelValues("endpointslice", "update").Inc()
			if relevant(newObj) {
				s.kubeMarkDirty()
			}
		},
		DeleteFunc: func(obj any) {
			s.metrics.events.WithLabelValues("endpointslice", "delete").Inc()
			s.metrics.cached.WithLabelValues("endpointslice").Dec()
			if relevant(obj) {
				s.kubeMarkDirty()
			}
		},
	}
}

func (s *KubeSource) kubeWatchError(_ context.Context, r *cache.Reflector, err error) {
	s.kubeWatchFailed(r.TypeDescription(), err)
}

// kubeWatchFailed counts and logs a failed list or watch of what; the
// reflectors back off between retries, so the log stays short.
func (s *KubeSource) kubeWatchFailed(what string, err error) {
	s.metrics.watchErrors.Inc()
	s.log.Warn("watch interrupted; the informer retries and the last state stays in force", zap.String("reflector", what), zap.Error(err))
}

// kubeLogDraining logs the clusters that start or stop being served from
// terminating endpoints only, the fallback an operator wants to know about
// during a rollout, and sets the gauge.
func (s *KubeSource) kubeLogDraining(was, now map[string]bool) {
	for _, name := range slices.Sorted(maps.Keys(now)) {
		if !was[name] {
			s.log.Info("serving terminating endpoints: no other endpoint of the Service is serving", zap.String("cluster", name))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(was)) {
		if !now[name] {
			s.log.Info("no longer serving terminating endpoints", zap.String("cluster", name))
		}
	}
	s.metrics.drainingClusters.Set(float64(len(now)))
}

// kubeLoggedProblems bounds how many newly found problems one rebuild logs
// one by one; the rest are summed up in one line. One mistake can surface
// as tens of thousands of problems (a slice writer gone wrong across a
// cluster), and logging each would flood the log and hold up the loop.
// Every problem is still counted in the metrics and listed by Problems.
const kubeLoggedProblems = 20

// kubeProblemKey identifies a problem across rebuilds.
type kubeProblemKey struct{ object, field, message string }

// kubeSetProblems replaces the current problems, keeping the Since time of
// those that persist, and logs and counts the new ones. Only the loop calls
// it; the lock is held just to swap the list, so Problems (the debug page)
// never waits for the diff, the sort or the logging.
func (s *KubeSource) kubeSetProblems(found []kubeProblem, now time.Time) {
	prev := s.problemSince
	since := make(map[kubeProblemKey]time.Time, len(found))
	out := make([]Problem, 0, len(found))
	var fresh []kubeProblem
	for _, f := range found {
		k := kubeProblemKey{f.Object, f.Field, f.Message}
		if _, dup := since[k]; dup {
			continue
		}
		p := f.Problem
		if t, ok := prev[k]; ok {
			p.Since = t
		} else {
			p.Since = now
			fresh = append(fresh, f)
		}
		since[k] = p.Since
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Problem) int {
		return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.Object, b.Object),
			strings.Compare(a.Field, b.Field), strings.Compare(a.Message, b.Message))
	})
	s.problemSince = since

	s.mu.Lock()
	s.problems = out
	s.mu.Unlock()
	s.metrics.activeProblems.Set(float64(len(out)))

	byKind := map[string]int{}
	for i, f := range fresh {
		byKind[f.kind]++
		if i < kubeLoggedProblems {
			s.log.Warn("rejected kubernetes input", zap.String("object", f.Object), zap.String("field", f.Field), zap.String("problem", f.Message))
		}
	}
	for kind, n := range byKind {
		s.metrics.problems.WithLabelValues(kind).Add(float64(n))
	}
	if n := len(fresh) - kubeLoggedProblems; n > 0 {
		s.log.Warn("more rejected kubernetes input; Problems() and /debug/problems list it all",
			zap.Int("not_logged", n), zap.Int("new", len(fresh)), zap.Int("current", len(out)))
	}
}

// kubeSliceServiceKey indexes a slice under "namespace/service".
func kubeSliceServiceKey(obj any) ([]string, error) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	svc := sl.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil, nil
	}
	return []string{sl.Namespace + "/" + svc}, nil
}

func kubeSlicesFor(idx cache.Indexer, namespace, name string) []*discoveryv1.EndpointSlice {
	objs, err := idx.ByIndex(kubeIndexByService, namespace+"/"+name)
	if err != nil {
		return nil
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if sl, ok := o.(*discoveryv1.EndpointSlice); ok {
			out = append(out, sl)
		}
	}
	return out
}
