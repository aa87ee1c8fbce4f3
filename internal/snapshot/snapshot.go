package snapshot

import (
	"fmt"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/model"
)

// Kind is a kind of data plane. Each kind is served its own resources,
// because the data planes accept different load-balancing policies.
type Kind string

// The kinds of data plane ringxds serves.
const (
	// KindEnvoy is an Envoy proxy: CDS and EDS only.
	KindEnvoy Kind = "envoy"
	// KindGRPC is a proxyless gRPC client that reads the typed
	// load_balancing_policy list: grpc-go, gRPC C-core, grpc-java. Its
	// Cluster carries the ring_hash policy in the legacy lb_policy and
	// ring_hash_lb_config fields as well, with the same sizes, for versions
	// that predate gRFC A52 or have it switched off.
	KindGRPC Kind = "grpc"
	// KindGRPCLegacy is a proxyless gRPC client that must not see the
	// typed list: grpc-js-xds NACKs a typed RingHash with explicit ring
	// sizes, so its Cluster carries the legacy fields only.
	KindGRPCLegacy Kind = "grpc-legacy"
	// KindGRPCRoundRobin is a proxyless gRPC client known to crash when it
	// runs ring_hash (gRPC C-core 1.50 and 1.51, grpc/grpc#31766). Its
	// Cluster asks for round_robin; the server reports every such client
	// as incompatible.
	KindGRPCRoundRobin Kind = "grpc-round-robin"
	// KindClientlib is the ringxds Go client library.
	KindClientlib Kind = "clientlib"
)

// AllKinds lists every Kind in a fixed order.
func AllKinds() []Kind {
	return []Kind{KindEnvoy, KindGRPC, KindGRPCLegacy, KindGRPCRoundRobin, KindClientlib}
}

// RingKinds lists the kinds whose clusters carry a consistent hash: every
// kind but KindGRPCRoundRobin.
func RingKinds() []Kind { return []Kind{KindEnvoy, KindGRPC, KindGRPCLegacy, KindClientlib} }

// Encoding says where the kind's Clusters carry the load-balancing policy,
// as /debug/clients shows it.
func (k Kind) Encoding() string {
	switch k {
	case KindGRPC:
		return "load_balancing_policy, and lb_policy RING_HASH with ring_hash_lb_config"
	case KindGRPCLegacy:
		return "lb_policy RING_HASH with ring_hash_lb_config"
	case KindGRPCRoundRobin:
		return "lb_policy ROUND_ROBIN"
	}
	return "load_balancing_policy"
}

// Proxyless reports whether the kind resolves xds:/// targets itself and
// so is served LDS and RDS; Envoy takes its listeners from its bootstrap.
func (k Kind) Proxyless() bool { return k != KindEnvoy }

// Resources are one client kind's resources: type URL -> resource name ->
// resource. The type URLs are go-control-plane's resourcev3.ClusterType,
// EndpointType, ListenerType and RouteType.
//
// Resources returned by Build are shared between kinds and snapshots and
// must not be modified.
type Resources map[string]map[string]types.Resource

// Snapshot is the translation of one State for every Kind.
type Snapshot struct {
	State model.State
	Kinds map[Kind]Resources
	// Notes records each translation decision a user might question, per
	// cluster name, e.g. "maglev is published to grpc clients as ring_hash:
	// gRPC NACKs MAGLEV". Shown on /debug/snapshot.
	Notes map[string][]string
	// NextStep is when these resources next change with no input change (the
	// next fade-in step); zero when nothing is fading. The server rebuilds
	// the snapshot from the same State at that instant.
	NextStep time.Time
	// Fading lists, per cluster name, the endpoints still fading in at the
	// instant the snapshot was built. Shown on /debug/snapshot and counted
	// in metrics.
	Fading map[string][]FadeStatus
	// Failed names, per cluster, why it could not be translated. Such a
	// cluster keeps the resources of its last good translation, if it had
	// one, and is left out otherwise: one cluster that cannot be built
	// must not hold back every other cluster's updates.
	Failed map[string]string
}

// FadeStatus is the progress of one endpoint fading in.
type FadeStatus struct {
	// Endpoint is host:port.
	Endpoint string    `json:"endpoint"`
	Start    time.Time `json:"start"`
	// Duration and Exponent are the curve share(t) = min(1, (t/Duration)^Exponent).
	Duration time.Duration `json:"duration_ns"`
	Exponent float64       `json:"exponent"`
	// Share is share(step - Start), step being the fade-in step in force
	// (now rounded down to fadein.StepInterval): the fraction of its final
	// traffic the published resources give the endpoint.
	Share float64 `json:"share"`
	// Weight is the EDS weight published for this step.
	Weight uint32 `json:"weight"`
	// Entries and FinalEntries are, in a cluster laid out for fade-in, the
	// ring entries the endpoint holds at this step and once its fade is
	// over. Entries can trail Share: an endpoint waits, possibly at 0, for
	// the entries ahead of its own in ring order (docs/fade-in.md).
	Entries      uint64 `json:"entries,omitempty"`
	FinalEntries uint64 `json:"final_entries,omitempty"`
}

// Build translates a normalized State (see model.State.Normalize) into the
// resources of every Kind.
//
// now is the instant fade-in weights are computed for: the resources are
// those of the fade-in step in force at now (see planFade), and NextStep is
// the next step instant.
//
// Build is a pure function of its arguments. A long-lived caller should use
// a Builder, which gives the same result while translating only the
// clusters that changed.
func Build(state model.State, now time.Time) (*Snapshot, error) {
	return NewBuilder().Build(state, now)
}

// Builder builds snapshots incrementally. A cluster whose model is unchanged
// since the previous Build and which has no fade in progress keeps its
// resources (the same instances) instead of being translated and validated
// again, so a change to one cluster costs work for that cluster only.
// A Builder is safe for concurrent use; builds are serialized.
type Builder struct {
	mu   sync.Mutex
	prev map[string]*clusterSet
	// failures counts each failing cluster's consecutive failed builds,
	// which space its retries (retryAfter).
	failures map[string]int
}

// retryAfter is how long after a failed build a cluster is tried again:
// a second, doubling with each failure in a row up to a minute, since
// most failures repeat until the input changes (which rebuilds it anyway).
func retryAfter(failures int) time.Duration {
	return min(fadein.StepInterval<<min(max(failures-1, 0), 6), time.Minute)
}

// NewBuilder returns a Builder with nothing cached.
func NewBuilder() *Builder { return &Builder{} }

// clusterSet is one cluster translated for every kind, validated.
type clusterSet struct {
	model    model.Cluster
	clusters map[Kind]*clusterv3.Cluster
	cla      *endpointv3.ClusterLoadAssignment
	listener *listenerv3.Listener
	route    *routev3.RouteConfiguration
	notes    []string
	fading   []FadeStatus
	next     time.Time
	// ring keeps the fade's planned steps for the next build (ringMemo).
	ring *ringMemo
}

// reusable reports whether the set depends on nothing but its model: with a
// fade in progress it also depends on the time.
func (cs *clusterSet) reusable() bool { return len(cs.fading) == 0 && cs.next.IsZero() }

// Build translates state as the package-level Build does, reusing what it
// can from the previous successful Build.
func (b *Builder) Build(state model.State, now time.Time) (*Snapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(state.Clusters)
	kinds := AllKinds()
	snap := &Snapshot{
		State:  state,
		Kinds:  make(map[Kind]Resources, len(kinds)),
		Notes:  make(map[string][]string),
		Fading: make(map[string][]FadeStatus),
		Failed: make(map[string]string),
	}
	for _, k := range kinds {
		r := Resources{
			resourcev3.ClusterType:  make(map[string]types.Resource, n),
			resourcev3.EndpointType: make(map[string]types.Resource, n),
		}
		if k.Proxyless() {
			r[resourcev3.ListenerType] = make(map[string]types.Resource, n)
			r[resourcev3.RouteType] = make(map[string]types.Resource, n)
		}
		snap.Kinds[k] = r
	}

	next := make(map[string]*clusterSet, n)
	failures := make(map[string]int)
	for i := range state.Clusters {
		c := &state.Clusters[i]
		if _, dup := next[c.Name]; dup {
			return nil, fmt.Errorf("cluster %q: defined twice", c.Name)
		}
		cs, failed := b.clusterSet(c, now)
		retry := b.noteFailure(c.Name, failed, now, failures)
		if !retry.IsZero() && (snap.NextStep.IsZero() || retry.Before(snap.NextStep)) {
			snap.NextStep = retry
		}
		if failed != nil {
			snap.Failed[c.Name] = failed.Error()
			if cs == nil {
				snap.Notes[c.Name] = []string{"not published: " + failed.Error()}
				continue
			}
		}
		next[c.Name] = cs
		for _, k := range kinds {
			r := snap.Kinds[k]
			r[resourcev3.ClusterType][c.Name] = cs.clusters[k]
			r[resourcev3.EndpointType][c.Name] = cs.cla
			if k.Proxyless() {
				r[resourcev3.ListenerType][c.Name] = cs.listener
				r[resourcev3.RouteType][c.Name] = cs.route
			}
		}
		if len(cs.notes) > 0 {
			snap.Notes[c.Name] = cs.notes
		}
		if len(cs.fading) > 0 {
			snap.Fading[c.Name] = cs.fading
		}
		if failed != nil {
			// Its own next step may be long past: the retry above stands
			// in for it, so a cluster that stays broken is no busy loop.
			snap.Notes[c.Name] = append([]string{"serving the last good translation: " + failed.Error()}, cs.notes...)
		} else if !cs.next.IsZero() && (snap.NextStep.IsZero() || cs.next.Before(snap.NextStep)) {
			snap.NextStep = cs.next
		}
	}
	for _, k := range kinds {
		if err := snap.Kinds[k].Consistent(); err != nil {
			return nil, fmt.Errorf("%s resources: %w", k, err)
		}
	}
	b.prev, b.failures = next, failures
	return snap, nil
}

// noteFailure records in failures whether c's build failed, and returns
// when to try it again (zero if it did not fail).
func (b *Builder) noteFailure(name string, failed error, now time.Time, failures map[string]int) time.Time {
	if failed == nil {
		return time.Time{}
	}
	n := b.failures[name] + 1
	failures[name] = n
	return fadein.StepTime(now).Add(retryAfter(n))
}

// clusterSet returns c translated for every kind: the previous build's
// when nothing it depends on changed, else a new translation. When that
// fails it returns the error and the previous build's set, the last good
// one (nil if there is none).
func (b *Builder) clusterSet(c *model.Cluster, now time.Time) (*clusterSet, error) {
	prev := b.prev[c.Name]
	if prev != nil && prev.reusable() && prev.model.Equal(c) {
		return prev, nil
	}
	memo := &ringMemo{}
	if prev != nil && prev.ring != nil {
		memo = prev.ring // it checks the model itself
	}
	cs, err := buildClusterSet(c, now, memo)
	if err != nil {
		return prev, err
	}
	return cs, nil
}

// buildClusterSet translates and validates one cluster for every kind.
func buildClusterSet(c *model.Cluster, now time.Time, memo *ringMemo) (*clusterSet, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("cluster %q is not normalized: %w", c.Name, err)
	}
	fade, err := planFade(c, now, memo)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	kinds := AllKinds()
	cs := &clusterSet{model: c.Clone(), clusters: make(map[Kind]*clusterv3.Cluster, len(kinds)), ring: memo}
	if cs.listener, err = buildListener(c); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	cs.route = buildRoute(c)
	var clusterNotes []string
	for _, k := range kinds {
		cds, cdsNotes, err := buildCluster(c, k, fade)
		if err != nil {
			return nil, fmt.Errorf("cluster %q, %s: %w", c.Name, k, err)
		}
		clusterNotes = append(clusterNotes, cdsNotes...)
		cs.clusters[k] = cds
	}
	// The CLA is built last: it carries the version of the Clusters.
	clusterVersion, err := clustersVersion(cs.clusters, kinds)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	cs.cla = buildLoadAssignment(c, fade, clusterVersion)
	cs.notes = append(cs.notes, ringNotes(c, fade)...)
	if fade != nil {
		cs.notes = append(cs.notes, fade.notes...)
		cs.fading = fade.status
		cs.next = fade.next
	}
	cs.notes = append(cs.notes, clusterNotes...)
	if err := cs.validate(kinds); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	return cs, nil
}

// validate applies the proto validation rules Envoy and go-control-plane
// apply, so an invalid model is caught here rather than NACKed by every
// client. Shared instances are validated once.
func (cs *clusterSet) validate(kinds []Kind) error {
	all := []types.Resource{cs.cla, cs.listener, cs.route}
	for _, k := range kinds {
		all = append(all, cs.clusters[k])
	}
	done := make(map[types.Resource]bool, len(all))
	for _, res := range all {
		if done[res] {
			continue
		}
		done[res] = true
		v, ok := res.(validator)
		if !ok {
			return fmt.Errorf("%T has no validation rules", res)
		}
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("%T: %w", res, err)
		}
	}
	return nil
}

// clustersVersion is the content version of a cluster's CDS resources for
// every kind: the ClusterLoadAssignment carries it, so that any change to a
// Cluster also changes its CLA and a client gets the CLA again after the
// Cluster (docs/xds.md, "Wire order").
func clustersVersion(clusters map[Kind]*clusterv3.Cluster, kinds []Kind) (string, error) {
	h := xxhash.New()
	opts := proto.MarshalOptions{Deterministic: true}
	var buf []byte
	for _, k := range kinds {
		var err error
		if buf, err = opts.MarshalAppend(buf[:0], clusters[k]); err != nil {
			return "", fmt.Errorf("marshal %s cluster: %w", k, err)
		}
		_, _ = h.Write(buf)
	}
	return fmt.Sprintf("%016x", h.Sum64()), nil
}

// validator is implemented by every Envoy API message (protoc-gen-validate).
type validator interface {
	ValidateAll() error
}

// Version returns a content-derived version: the hex XXH64 of the
// deterministic proto marshal of res. Equal resources get equal versions on
// every replica and across restarts.
func Version(res types.Resource) (string, error) {
	b, err := Encode(res)
	if err != nil {
		return "", err
	}
	return VersionOf(b), nil
}

// Encode is res's deterministic encoding, the bytes Version hashes and the
// wire carries.
func Encode(res types.Resource) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("marshal %T: %w", res, err)
	}
	return b, nil
}

// VersionOf is the content version of an encoding from Encode.
func VersionOf(encoded []byte) string {
	return fmt.Sprintf("%016x", xxhash.Sum64(encoded))
}

// marshalAny wraps m in an Any with a deterministic encoding (map fields,
// such as Struct ones, ordered), so equal messages give equal bytes and
// equal versions.
func marshalAny(m proto.Message) (*anypb.Any, error) {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		return nil, fmt.Errorf("marshal %T: %w", m, err)
	}
	return a, nil
}
