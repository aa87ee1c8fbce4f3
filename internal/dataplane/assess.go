package dataplane

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// Verdict states, from best to worst.
const (
	// StateOK: the client sends every key where Envoy does.
	StateOK = "ok"
	// StateUnverified: ringxds cannot tell (an unknown implementation, or a
	// ring too large to compare).
	StateUnverified = "unverified"
	// StateRingDiffers: the client runs a ring, but a different one, so
	// some keys go to other pods than on Envoy.
	StateRingDiffers = "ring_differs"
	// StateIncompatible: the client cannot run a ring for the cluster (it
	// runs round_robin, rejected the cluster or crashes).
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

// Verdict says whether one client sends a cluster's keys where Envoy does.
type Verdict struct {
	Cluster string `json:"cluster"`
	State   string `json:"state"`
	// Reason says why, in words an operator can act on; empty for ok,
	// except where an ok client still routes some keys differently by
	// design (a per-key fade-in cut-over).
	Reason string `json:"reason,omitempty"`
	// Elsewhere is the share of the key space the client sends to another
	// pod than Envoy does, when measured (StateRingDiffers).
	Elsewhere float64 `json:"keys_elsewhere,omitempty"`
}

// MaxCompareSize bounds the rings and tables a verdict builds: a larger
// one (a deliberately huge minimum_ring_size) is judged from its size
// alone, since building it for every client version would cost seconds and
// gigabytes.
const MaxCompareSize = 1 << 20

// IsReference reports whether the client is served the reference
// translation by the implementation it was written for (Envoy, or the
// client library) and so builds the reference ring itself.
func (c Client) IsReference() bool {
	return c.Implementation == Envoy && c.Kind == snapshot.KindEnvoy ||
		c.Implementation == Clientlib && c.Kind == snapshot.KindClientlib
}

// Assess compares the ring the client builds for cluster, from the
// resources of its kind in snap, with the ring or table Envoy runs for it.
func Assess(snap *snapshot.Snapshot, c Client, cluster string) Verdict {
	var a Assessor
	return a.Assess(snap, c, []string{cluster})[0]
}

// static returns the verdict that depends on the client alone, if any: a
// release known to crash in ring_hash, or an implementation ringxds does
// not know.
func static(c Client, cluster string) (Verdict, bool) {
	v := Verdict{Cluster: cluster, State: StateOK}
	if c.IsReference() {
		return v, true
	}
	if c.crashesInRingHash() {
		v.State = StateIncompatible
		v.Reason = fmt.Sprintf("%s crashes (SIGSEGV) as soon as it runs ring_hash (grpc/grpc#31766; 1.53 and later have the fix)", c.UserAgent())
		if c.Kind == snapshot.KindGRPCRoundRobin {
			v.Reason += ": ringxds serves it round_robin, so its keys are spread at random. Upgrade to gRPC 1.53 or later"
		} else {
			v.Reason += fmt.Sprintf(", and its node metadata asks for the %q translation: expect it to crash. Upgrade to gRPC 1.53 or later", c.Kind)
		}
		return v, true
	}
	if _, known := c.Dialect(); !known {
		v.State, v.Reason = StateUnverified, fmt.Sprintf("ringxds does not know how %s builds rings: nothing checks that its keys go where Envoy's do", c.UserAgent())
		return v, true
	}
	return v, false
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

// judge computes the verdict of a dialect served kind on one cluster.
func judge(d snapshot.Dialect, kind snapshot.Kind, cluster string, cds, envoyCDS *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment, ref *reference) Verdict {
	v := Verdict{Cluster: cluster, State: StateOK}
	if size := largestSize(cds); size > MaxCompareSize {
		v.State, v.Reason = StateUnverified, fmt.Sprintf("the cluster's ring may have %d entries, too many to compare", size)
		return v
	}
	got, err := snapshot.DecodeAs(cds, cla, d)
	if err != nil {
		v.State, v.Reason = StateIncompatible, incompatibleReason(d, kind, cds, err)
		return v
	}
	switch {
	case ref.err != nil:
		v.State, v.Reason = StateUnverified, "no reference: "+ref.err.Error()
		return v
	case ref.ring == nil:
		v.State, v.Reason = StateUnverified, fmt.Sprintf("Envoy's ring or table for the cluster may have %d entries, too many to compare", largestSize(envoyCDS))
		return v
	}
	differ, exact, err := snapshot.Disagreement(ref.ring, got)
	if err != nil {
		v.State, v.Reason = StateUnverified, err.Error()
		return v
	}
	if differ > 0 {
		v.State, v.Elsewhere = StateRingDiffers, differ
		v.Reason = differsReason(d, ref.ring, got, differ, exact)
	}
	return v
}

// largestSize is the most entries (or slots) a published Cluster can ask
// for: its maximum ring size, or its Maglev table size.
func largestSize(cds *clusterv3.Cluster) uint64 {
	var size uint64
	if rh := cds.GetRingHashLbConfig(); rh != nil {
		size = max(size, rh.GetMaximumRingSize().GetValue(), rh.GetMinimumRingSize().GetValue())
	}
	if mg := cds.GetMaglevLbConfig(); mg != nil {
		size = max(size, mg.GetTableSize().GetValue())
	}
	for _, p := range cds.GetLoadBalancingPolicy().GetPolicies() {
		size = max(size, snapshot.PolicySize(p.GetTypedExtensionConfig().GetTypedConfig()))
	}
	return size
}

func incompatibleReason(d snapshot.Dialect, kind snapshot.Kind, cds *clusterv3.Cluster, err error) string {
	if errors.Is(err, snapshot.ErrNotConsistentHash) {
		if !d.LoadBalancingPolicy && cds.GetLoadBalancingPolicy() != nil {
			return fmt.Sprintf("this %s release reads only the legacy lb_policy field (it predates gRFC A52), and the %q translation it gets sets load_balancing_policy alone: it runs round_robin, so its keys are spread at random", d.Name, kind)
		}
		return fmt.Sprintf("%s runs a policy without a ring, so its keys are spread at random: %v", d.Name, err)
	}
	return fmt.Sprintf("%s rejects (NACKs) the cluster as served (%q) and keeps its previous config, if any: %v", d.Name, kind, err)
}

func differsReason(d snapshot.Dialect, ref, got *snapshot.Decoded, differ float64, exact bool) string {
	var why []string
	switch {
	case ref.Ring.Policy() != got.Ring.Policy() && got.Ring.Policy() == ringhash.PolicySkipper:
		why = append(why, fmt.Sprintf("it runs the cluster's Skipper ring (clientlib/grpcbalancer), which Envoy cannot, and Envoy runs %s", ref.Ring.Policy()))
	case ref.Ring.Policy() != got.Ring.Policy():
		why = append(why, fmt.Sprintf("Envoy runs %s on this cluster, which %s cannot, and %s runs %s", ref.Ring.Policy(), d.Name, d.Name, got.Ring.Policy()))
	}
	if d.KeyPrefix != "" {
		why = append(why, fmt.Sprintf("it hashes each endpoint as %q, not as Envoy does", d.KeyPrefix+"ip:port"))
	}
	if !d.HashKey && hasHashKey(got) {
		why = append(why, "it ignores the envoy.lb hash_key metadata and hashes addresses")
	}
	if ref.Ring.Policy() == got.Ring.Policy() && got.Ring.Size() != ref.Ring.Size() {
		why = append(why, fmt.Sprintf("its ring has %d entries, Envoy's %d (gRPC caps ring sizes at %d)", got.Ring.Size(), ref.Ring.Size(), ringhash.GRPCRingHashCap))
	}
	if len(why) == 0 {
		why = append(why, "it rounds weighted ring shares differently (docs/ring-sizes.md)")
	}
	amount := fmt.Sprintf("%.3g%%", 100*differ)
	if d.Approximate || !exact {
		amount = "about " + amount
	}
	return fmt.Sprintf("%s sends %s of keys to another pod than Envoy: %s", d.Name, amount, strings.Join(why, "; "))
}

func hasHashKey(d *snapshot.Decoded) bool {
	for _, ep := range d.Endpoints {
		if ep.HashKey != "" {
			return true
		}
	}
	return false
}

// Assessor caches verdicts while the resources they were computed from stay
// published, so clients can be judged on every ACK: a ring is decoded once
// per dialect and cluster change, not once per client. Only verdicts are
// kept, never rings: a Maglev table costs half a megabyte, and thousands of
// clusters would hold gigabytes. It is safe for concurrent use; rings are
// decoded outside its lock, and callers wanting the same verdict wait for
// one decode.
type Assessor struct {
	mu       sync.Mutex
	snap     *snapshot.Snapshot
	verdicts map[verdictKey]*verdictEntry
}

type verdictKey struct {
	dialect snapshot.Dialect
	kind    snapshot.Kind
	cluster string
}

// verdictEntry is a verdict and the resources it was computed from; ready
// is closed once verdict is set.
type verdictEntry struct {
	cds, envoyCDS *clusterv3.Cluster
	cla           *endpointv3.ClusterLoadAssignment
	ready         chan struct{}
	verdict       Verdict
}

// maxAssessEntries bounds the cache: dialects are few, but cluster names
// come from clients.
const maxAssessEntries = 1 << 16

// Assess returns the verdict of client c on each cluster, as published in
// snap.
func (a *Assessor) Assess(snap *snapshot.Snapshot, c Client, clusters []string) []Verdict {
	out := make([]Verdict, len(clusters))
	d, _ := c.Dialect()
	for i, name := range clusters {
		if v, ok := static(c, name); ok {
			out[i] = v
			continue
		}
		out[i] = a.verdict(snap, d, c.Kind, name)
		if c.GRPCBalancer && out[i].State == StateOK && fadesPerKey(snap, c.Kind, name) {
			out[i].Reason = "grpc-go runs ringxds.ring_hash (clientlib/grpcbalancer): while endpoints fade in it cuts each key over on its own, so until the fade ends some keys reach their new endpoint earlier or later than on Envoy, never another old one; it ends on Envoy's ring. /debug/pick?client=" + GRPCGoBalancer + " shows where it sends a key"
		}
	}
	return out
}

// fadesPerKey reports whether the cluster, as served to kind, carries the
// ringxds.ring_hash schedule while some endpoint fades in: then a grpc-go
// client with clientlib/grpcbalancer follows its own per-key cut-over
// rather than the weight ramp the verdict decodes. Both share the ring of
// every established endpoint and the ring the fade ends in; only when a
// fading endpoint takes a key differs.
func fadesPerKey(snap *snapshot.Snapshot, kind snapshot.Kind, cluster string) bool {
	if snap == nil || len(snap.Fading[cluster]) == 0 {
		return false
	}
	cds, _ := resources(snap, kind, cluster)
	for _, p := range cds.GetLoadBalancingPolicy().GetPolicies() {
		if p.GetTypedExtensionConfig().GetName() == snapshot.PolicyNameRingHashFade {
			return true
		}
	}
	return false
}

func (a *Assessor) verdict(snap *snapshot.Snapshot, d snapshot.Dialect, kind snapshot.Kind, cluster string) Verdict {
	cds, cla := resources(snap, kind, cluster)
	envoyCDS, envoyCLA := resources(snap, snapshot.KindEnvoy, cluster)
	if cds == nil || cla == nil || envoyCDS == nil {
		return Verdict{Cluster: cluster, State: StateUnverified, Reason: "the cluster is not published"}
	}
	key := verdictKey{d, kind, cluster}
	a.mu.Lock()
	a.forgetDeleted(snap)
	e := a.verdicts[key]
	if e == nil || e.cds != cds || e.cla != cla || e.envoyCDS != envoyCDS {
		e = &verdictEntry{cds: cds, cla: cla, envoyCDS: envoyCDS, ready: make(chan struct{})}
		a.verdicts[key] = e
		a.mu.Unlock()
		e.verdict = judge(d, kind, cluster, cds, envoyCDS, cla, decodeReference(envoyCDS, envoyCLA))
		close(e.ready)
		return e.verdict
	}
	a.mu.Unlock()
	<-e.ready
	return e.verdict
}

// forgetDeleted drops, when the snapshot changes, the verdicts on clusters
// it no longer publishes. a.mu is held.
func (a *Assessor) forgetDeleted(snap *snapshot.Snapshot) {
	if a.verdicts == nil || len(a.verdicts) >= maxAssessEntries {
		a.verdicts = make(map[verdictKey]*verdictEntry)
	}
	if snap == a.snap {
		return
	}
	a.snap = snap
	published := snap.Kinds[snapshot.KindEnvoy][resource.ClusterType]
	for k := range a.verdicts {
		if _, ok := published[k.cluster]; !ok {
			delete(a.verdicts, k)
		}
	}
}

// reference is Envoy's decoded ring or table of one cluster; ring is nil
// when it is too large to build.
type reference struct {
	ring *snapshot.Decoded
	err  error
}

// decodeReference decodes the ring or table Envoy runs for a cluster.
func decodeReference(cds *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) *reference {
	r := &reference{}
	if largestSize(cds) <= MaxCompareSize {
		r.ring, r.err = snapshot.DecodeAs(cds, cla, snapshot.DialectEnvoy)
	}
	return r
}
