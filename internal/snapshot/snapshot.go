package snapshot

import (
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ringxds/ringxds/internal/model"
)

// Kind is a kind of data plane. Each kind is served its own resources,
// because the data planes accept different load-balancing policies.
type Kind string

// The kinds of data plane ringxds serves.
const (
	// KindEnvoy is an Envoy proxy: CDS and EDS only.
	KindEnvoy Kind = "envoy"
	// KindGRPC is a proxyless grpc-go (or other gRPC xDS) client.
	KindGRPC Kind = "grpc"
	// KindClientlib is the ringxds Go client library.
	KindClientlib Kind = "clientlib"
)

// AllKinds lists every Kind in a fixed order.
func AllKinds() []Kind { return []Kind{KindEnvoy, KindGRPC, KindClientlib} }

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
}

// Build translates a normalized State (see model.State.Normalize) into the
// resources of every Kind.
//
// now is the instant fade-in weights are computed for: the resources are
// those of the fade-in step in force at now (see planFade), and NextStep is
// the next step instant.
func Build(state model.State, now time.Time) (*Snapshot, error) {
	n := len(state.Clusters)
	kinds := AllKinds()
	snap := &Snapshot{
		State:  state,
		Kinds:  make(map[Kind]Resources, len(kinds)),
		Notes:  make(map[string][]string),
		Fading: make(map[string][]FadeStatus),
	}
	for _, k := range kinds {
		r := Resources{
			resourcev3.ClusterType:  make(map[string]types.Resource, n),
			resourcev3.EndpointType: make(map[string]types.Resource, n),
		}
		if k != KindEnvoy {
			r[resourcev3.ListenerType] = make(map[string]types.Resource, n)
			r[resourcev3.RouteType] = make(map[string]types.Resource, n)
		}
		snap.Kinds[k] = r
	}

	for i := range state.Clusters {
		c := &state.Clusters[i]
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("cluster %q is not normalized: %w", c.Name, err)
		}
		if _, dup := snap.Kinds[KindEnvoy][resourcev3.ClusterType][c.Name]; dup {
			return nil, fmt.Errorf("cluster %q: defined twice", c.Name)
		}

		fade, err := planFade(c, now)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
		}
		var notes []string
		cla, claNotes := buildLoadAssignment(c, fade)
		notes = append(notes, claNotes...)
		notes = append(notes, ringNotes(c, fade)...)
		if fade != nil {
			notes = append(notes, fade.notes...)
			if len(fade.status) > 0 {
				snap.Fading[c.Name] = fade.status
			}
			if !fade.next.IsZero() && (snap.NextStep.IsZero() || fade.next.Before(snap.NextStep)) {
				snap.NextStep = fade.next
			}
		}

		// The listener and route are identical for grpc and clientlib, so
		// both kinds share one instance.
		lis, err := buildListener(c)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
		}
		route := buildRoute(c)

		for _, k := range kinds {
			cds, cdsNotes, err := buildCluster(c, k, fade)
			if err != nil {
				return nil, fmt.Errorf("cluster %q, %s: %w", c.Name, k, err)
			}
			notes = append(notes, cdsNotes...)
			r := snap.Kinds[k]
			r[resourcev3.ClusterType][c.Name] = cds
			r[resourcev3.EndpointType][c.Name] = cla
			if k != KindEnvoy {
				r[resourcev3.ListenerType][c.Name] = lis
				r[resourcev3.RouteType][c.Name] = route
			}
		}
		if len(notes) > 0 {
			snap.Notes[c.Name] = notes
		}
	}

	// Kinds share resource instances; each is validated once.
	validated := make(map[types.Resource]bool, 4*n)
	for _, k := range kinds {
		if err := validateAll(snap.Kinds[k], validated); err != nil {
			return nil, fmt.Errorf("%s resources: %w", k, err)
		}
		if err := snap.Kinds[k].Consistent(); err != nil {
			return nil, fmt.Errorf("%s resources: %w", k, err)
		}
	}
	return snap, nil
}

// validator is implemented by every Envoy API message (protoc-gen-validate).
type validator interface {
	ValidateAll() error
}

// validateAll runs the proto validation rules Envoy and go-control-plane
// apply, so that an invalid model is caught here rather than NACKed by every
// client. Resources in done are skipped; validated ones are added to it.
func validateAll(r Resources, done map[types.Resource]bool) error {
	for typ, byName := range r {
		for name, res := range byName {
			if done[res] {
				continue
			}
			done[res] = true
			v, ok := res.(validator)
			if !ok {
				return fmt.Errorf("%s %q: %T has no validation rules", typ, name, res)
			}
			if err := v.ValidateAll(); err != nil {
				return fmt.Errorf("%s %q: %w", typ, name, err)
			}
		}
	}
	return nil
}

// Version returns a content-derived version: the hex XXH64 of the
// deterministic proto marshal of res. Equal resources get equal versions on
// every replica and across restarts.
func Version(res types.Resource) (string, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(res)
	if err != nil {
		return "", fmt.Errorf("marshal %T: %w", res, err)
	}
	return fmt.Sprintf("%016x", xxhash.Sum64(b)), nil
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
