package dataplane

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/ringxds/ringxds/internal/snapshot"
)

// Verdict states, from best to worst.
const (
	// StateOK: the client sends every key where Envoy does.
	StateOK = "ok"
	// StateUnverified: ringxds does not know how the client builds rings.
	StateUnverified = "unverified"
	// StateRingDiffers: the client runs ring_hash on a different ring, so
	// some keys go to other pods than on Envoy.
	StateRingDiffers = "ring_differs"
	// StateIncompatible: the client cannot run a ring for the cluster (it
	// runs round_robin, rejects the Cluster or crashes).
	StateIncompatible = "incompatible"
)

// States lists the verdict states from best to worst.
func States() []string {
	return []string{StateOK, StateUnverified, StateRingDiffers, StateIncompatible}
}

func rank(state string) int {
	for i, s := range States() {
		if s == state {
			return i
		}
	}
	return 0
}

// Worst returns the worst state among vs, StateOK when vs is empty.
func Worst(vs []Verdict) string {
	worst := StateOK
	for _, v := range vs {
		if rank(v.State) > rank(worst) {
			worst = v.State
		}
	}
	return worst
}

// Verdict says whether one client sends a cluster's keys where the other
// data planes do.
type Verdict struct {
	Cluster string `json:"cluster"`
	State   string `json:"state"`
	// Reason says why, in words an operator can act on; empty for ok.
	Reason string `json:"reason,omitempty"`
	// Elsewhere is the fraction of the key space the client sends to
	// another pod than Envoy does (StateRingDiffers only).
	Elsewhere float64 `json:"keys_elsewhere,omitempty"`
}

// IsReference reports whether the client builds the reference rings
// itself (Envoy and the client library), so there is nothing to assess.
func (c Client) IsReference() bool {
	return c.Implementation == Envoy || c.Implementation == Clientlib
}

// Assess compares the ring the client builds for cluster, from the
// resources of its kind in snap, with the reference ring: the cluster's
// ring_hash as Envoy builds it from what gRPC clients are served (for a
// ring_hash cluster exactly the ring Envoy runs). Envoy and the client
// library are the references and always agree.
func Assess(snap *snapshot.Snapshot, c Client, cluster string) Verdict {
	v := Verdict{Cluster: cluster, State: StateOK}
	if c.IsReference() {
		return v
	}
	if c.crashesInRingHash() {
		v.State = StateIncompatible
		v.Reason = fmt.Sprintf("%s crashes (SIGSEGV) as soon as it runs ring_hash (grpc/grpc#31766, fixed in gRPC 1.52)", c.UserAgent())
		if c.Kind == snapshot.KindGRPCRoundRobin {
			v.Reason += ": ringxds serves it round_robin, so its keys are spread at random. Upgrade to gRPC 1.53 or later"
		} else {
			v.Reason += fmt.Sprintf(", and its node metadata asks for the %q translation, which has ring_hash: expect it to crash. Upgrade to gRPC 1.53 or later", c.Kind)
		}
		return v
	}
	d, known := c.Dialect()
	if !known {
		v.State, v.Reason = StateUnverified, fmt.Sprintf("ringxds does not know how %s builds rings: nothing checks that its keys go where Envoy's do", c.UserAgent())
		return v
	}
	cds, cla := resources(snap, c.Kind, cluster)
	refCDS, _ := resources(snap, snapshot.KindGRPC, cluster)
	if cds == nil || cla == nil || refCDS == nil {
		v.State, v.Reason = StateUnverified, "the cluster is not published"
		return v
	}
	got, err := snapshot.DecodeAs(cds, cla, d)
	if err != nil {
		v.State, v.Reason = StateIncompatible, incompatibleReason(c, d, cds, err)
		return v
	}
	ref, err := snapshot.DecodeAs(refCDS, cla, snapshot.DialectEnvoy)
	if err != nil {
		v.State, v.Reason = StateUnverified, "no reference ring: "+err.Error()
		return v
	}
	differ, err := snapshot.Disagreement(ref, got)
	if err != nil {
		v.State, v.Reason = StateUnverified, err.Error()
		return v
	}
	if differ > 0 {
		v.State, v.Elsewhere = StateRingDiffers, differ
		v.Reason = differsReason(c, d, ref, got, differ)
	}
	return v
}

func resources(snap *snapshot.Snapshot, kind snapshot.Kind, cluster string) (*clusterv3.Cluster, *endpointv3.ClusterLoadAssignment) {
	if snap == nil {
		return nil, nil
	}
	r := snap.Kinds[kind]
	cds, _ := r[resource.ClusterType][cluster].(*clusterv3.Cluster)
	cla, _ := r[resource.EndpointType][cluster].(*endpointv3.ClusterLoadAssignment)
	return cds, cla
}

func incompatibleReason(c Client, d snapshot.Dialect, cds *clusterv3.Cluster, err error) string {
	if errors.Is(err, snapshot.ErrNotConsistentHash) {
		if !d.LoadBalancingPolicy && cds.GetLoadBalancingPolicy() != nil {
			return fmt.Sprintf("%s reads only the legacy lb_policy field (it predates gRFC A52), and the %q translation it gets sets load_balancing_policy alone: it runs round_robin, so its keys are spread at random", c.UserAgent(), c.Kind)
		}
		return fmt.Sprintf("%s runs a policy without a ring, so its keys are spread at random: %v", c.UserAgent(), err)
	}
	return fmt.Sprintf("%s rejects (NACKs) the cluster and keeps its previous config, if any: %v", c.UserAgent(), err)
}

func differsReason(c Client, d snapshot.Dialect, ref, got *snapshot.Decoded, differ float64) string {
	var why []string
	if d.KeyPrefix != "" {
		why = append(why, fmt.Sprintf("it hashes each endpoint as %q, not as Envoy does", d.KeyPrefix+"ip:port"))
	}
	if !d.HashKey && hasHashKey(got) {
		why = append(why, "it ignores the envoy.lb hash_key metadata and hashes addresses")
	}
	if got.Ring.Size() != ref.Ring.Size() {
		why = append(why, fmt.Sprintf("its ring has %d entries, Envoy's %d (gRPC caps ring sizes at %d)", got.Ring.Size(), ref.Ring.Size(), d.RingCap))
	}
	if len(why) == 0 {
		why = append(why, "it rounds weighted ring shares differently (docs/ring-sizes.md)")
	}
	amount := fmt.Sprintf("%.3g%%", 100*differ)
	if d.Approximate {
		amount = "about " + amount
	}
	return fmt.Sprintf("%s sends %s of keys to another pod than Envoy: %s", c.UserAgent(), amount, strings.Join(why, "; "))
}

func hasHashKey(d *snapshot.Decoded) bool {
	for _, ep := range d.Endpoints {
		if ep.HashKey != "" {
			return true
		}
	}
	return false
}

// Assessor caches verdicts per client and cluster while the resources they
// were computed from stay published, so clients can be assessed on every
// ACK: a ring is decoded once per implementation and cluster change, not
// once per client. It is safe for concurrent use.
type Assessor struct {
	mu      sync.Mutex
	snap    *snapshot.Snapshot
	entries map[assessKey]assessEntry
}

type assessKey struct {
	client  Client
	cluster string
}

// assessEntry is a verdict and the resources it was computed from.
type assessEntry struct {
	cds, ref *clusterv3.Cluster
	cla      *endpointv3.ClusterLoadAssignment
	verdict  Verdict
}

// Assess returns Assess(snap, c, cluster) for each cluster, from the cache
// where the resources are unchanged.
func (a *Assessor) Assess(snap *snapshot.Snapshot, c Client, clusters []string) []Verdict {
	if c.IsReference() {
		out := make([]Verdict, len(clusters))
		for i, name := range clusters {
			out[i] = Verdict{Cluster: name, State: StateOK}
		}
		return out
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.snap != snap {
		a.snap = snap
		// Builder reuses the resources of unchanged clusters, so entries
		// that still point at published resources are still right.
		kept := make(map[assessKey]assessEntry, len(a.entries))
		for k, e := range a.entries {
			cds, cla := resources(snap, k.client.Kind, k.cluster)
			ref, _ := resources(snap, snapshot.KindGRPC, k.cluster)
			if cds == e.cds && cla == e.cla && ref == e.ref {
				kept[k] = e
			}
		}
		a.entries = kept
	}
	if a.entries == nil || len(a.entries) >= maxAssessEntries {
		// User agents and subscribed names come from clients: a client
		// cycling through made-up versions must not grow the cache.
		a.entries = make(map[assessKey]assessEntry)
	}
	out := make([]Verdict, len(clusters))
	for i, name := range clusters {
		k := assessKey{c, name}
		if e, ok := a.entries[k]; ok {
			out[i] = e.verdict
			continue
		}
		out[i] = Assess(snap, c, name)
		cds, cla := resources(snap, c.Kind, name)
		ref, _ := resources(snap, snapshot.KindGRPC, name)
		if cds != nil {
			a.entries[k] = assessEntry{cds: cds, cla: cla, ref: ref, verdict: out[i]}
		}
	}
	return out
}

// maxAssessEntries bounds the cache; real fleets run a handful of client
// versions against at most thousands of clusters.
const maxAssessEntries = 1 << 16
