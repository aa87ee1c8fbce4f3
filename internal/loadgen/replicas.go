package loadgen

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// replica is one server the clients connect to.
type replica struct {
	xdsAddr string
	// dbg is nil for a server given without a debug address.
	dbg *debugClient
}

// ReplicaResult is what the clients of one replica measured, when the run
// spread them over several.
type ReplicaResult struct {
	Clients, Converged int
	// P50 and P99 are the propagation of the measured changes to this
	// replica's clients, in milliseconds.
	P50, P99 float64
}

// startReplicas starts the servers the run owns, or records the one given
// by address.
func (r *runner) startReplicas(ctx context.Context) error {
	lcs := r.cfg.lifecycles()
	if len(lcs) == 0 {
		rep := &replica{xdsAddr: r.cfg.Server}
		if r.cfg.Debug != "" {
			rep.dbg = newDebugClient(r.cfg.Debug)
		}
		r.replicas = []*replica{rep}
		return nil
	}
	for i, lc := range lcs {
		xdsAddr, debugAddr, err := lc.Start(ctx)
		if err != nil {
			return fmt.Errorf("start server %d of %d: %w", i+1, len(lcs), err)
		}
		rep := &replica{xdsAddr: xdsAddr}
		if debugAddr != "" {
			rep.dbg = newDebugClient(debugAddr)
		}
		r.replicas = append(r.replicas, rep)
	}
	return nil
}

// debugs returns the debug clients of every replica that has one.
func (r *runner) debugs() []*debugClient {
	var out []*debugClient
	for _, rep := range r.replicas {
		if rep.dbg != nil {
			out = append(out, rep.dbg)
		}
	}
	return out
}

// replicaResults splits convergence and propagation by replica. It
// returns nil for a run against one server.
func (r *runner) replicaResults(phase []phaseChange) []ReplicaResult {
	if len(r.replicas) < 2 {
		return nil
	}
	target := r.sh.topo.latest()
	out := make([]ReplicaResult, len(r.replicas))
	groups := make([][]*client, len(r.replicas))
	for _, c := range r.clients {
		groups[c.replica] = append(groups[c.replica], c)
	}
	for i, cs := range groups {
		lat := r.latencies(phase, cs)
		out[i] = ReplicaResult{Clients: len(cs), P50: percentile(lat, 50), P99: percentile(lat, 99)}
		for _, c := range cs {
			if c.converged(target) {
				out[i].Converged++
			}
		}
	}
	return out
}

// versionBook checks that replicas agree on versions. The server derives
// every response version (SotW) and resource version (delta) from content,
// so clients on different replicas must be sent the same version for the
// same content: a client moved to another replica by a restart or by
// MaxConnectionAge then resumes with what it holds. The book keys each
// version by the content it came with, hashed here independently of how
// the server hashes, and notes every content two versions were sent for.
type versionBook struct {
	mu   sync.Mutex
	seen map[versionKey]versionSeen
	// compared counts contents received from more than one replica, whose
	// versions were therefore compared across replicas.
	compared   int
	mismatches int
	examples   []string
}

// versionKey is one content: a SotW response's resources (name empty), a
// delta resource (by name), or a delta response's resources and removals
// (name empty).
type versionKey struct {
	delta   bool
	typeURL string
	name    string
	content uint64
}

type versionSeen struct {
	version string
	first   int    // the replica that sent it first
	from    uint64 // a bit per replica that sent this content
}

func newVersionBook() *versionBook { return &versionBook{seen: map[versionKey]versionSeen{}} }

// sotw records a SotW response.
func (b *versionBook) sotw(replica int, resp *discovery.DiscoveryResponse) {
	k := versionKey{typeURL: resp.GetTypeUrl(), content: contentKey(resp.GetResources(), nil)}
	b.record(k, resp.GetVersionInfo(), replica)
}

// delta records a delta response and each resource in it.
func (b *versionBook) delta(replica int, resp *discovery.DeltaDiscoveryResponse) {
	anys := make([]*anypb.Any, 0, len(resp.GetResources()))
	for _, res := range resp.GetResources() {
		a := res.GetResource()
		anys = append(anys, a)
		k := versionKey{delta: true, typeURL: resp.GetTypeUrl(), name: res.GetName(), content: xxhash.Sum64(a.GetValue())}
		b.record(k, res.GetVersion(), replica)
	}
	k := versionKey{delta: true, typeURL: resp.GetTypeUrl(), content: contentKey(anys, resp.GetRemovedResources())}
	b.record(k, resp.GetSystemVersionInfo(), replica)
}

// contentKey identifies a set of serialized resources and removed names,
// whatever their order.
func contentKey(anys []*anypb.Any, removed []string) uint64 {
	sums := make([]uint64, 0, len(anys)+len(removed))
	for _, a := range anys {
		sums = append(sums, xxhash.Sum64(a.GetValue()))
	}
	for _, name := range removed {
		sums = append(sums, ^xxhash.Sum64String(name))
	}
	slices.Sort(sums)
	d := xxhash.New()
	var buf [8]byte
	for _, s := range sums {
		for i := range buf {
			buf[i] = byte(s >> (8 * i))
		}
		_, _ = d.Write(buf[:])
	}
	return d.Sum64()
}

func (b *versionBook) record(k versionKey, version string, replica int) {
	bit := uint64(1) << replica
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.seen[k]
	if !ok {
		b.seen[k] = versionSeen{version: version, first: replica, from: bit}
		return
	}
	if s.from&bit == 0 {
		if bits.OnesCount64(s.from) == 1 {
			b.compared++
		}
		s.from |= bit
		b.seen[k] = s
	}
	if version == s.version {
		return
	}
	b.mismatches++
	if len(b.examples) < 5 {
		what := "response"
		if k.name != "" {
			what = "resource " + k.name
		}
		proto := "SotW"
		if k.delta {
			proto = "delta"
		}
		b.examples = append(b.examples, fmt.Sprintf("%s %s %s: replica %d sent version %q, replica %d %q for the same content",
			proto, shortType(k.typeURL), what, s.first, s.version, replica, version))
	}
}

// result returns how many contents were compared across replicas and the
// disagreements.
func (b *versionBook) result() (compared, mismatches int, examples []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.compared, b.mismatches, slices.Clone(b.examples)
}

// replicaLine is the summary line's part for a run over several replicas.
func (r *Result) replicaLine() string {
	if len(r.Replicas) == 0 {
		return ""
	}
	identical := "NA" // nothing reached clients of two replicas
	switch {
	case r.VersionMismatches > 0:
		identical = "false"
	case r.VersionsCompared > 0:
		identical = "true"
	}
	var b strings.Builder
	fmt.Fprintf(&b, " replicas=%d replica_versions_identical=%s replica_versions_compared=%d replica_version_mismatches=%d",
		len(r.Replicas), identical, r.VersionsCompared, r.VersionMismatches)
	for i, rr := range r.Replicas {
		fmt.Fprintf(&b, " replica%d_converged=%d/%d replica%d_p50_ms=%s replica%d_p99_ms=%s",
			i, rr.Converged, rr.Clients, i, num(rr.P50, 1), i, num(rr.P99, 1))
	}
	return b.String()
}
