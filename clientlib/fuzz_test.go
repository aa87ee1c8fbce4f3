package clientlib

import (
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// fuzzDialects are the dialects Decode knows, each decoded on every input.
var fuzzDialects = []snapshot.Dialect{
	snapshot.DialectEnvoy, snapshot.DialectClientlib, snapshot.DialectGRPCGo,
	snapshot.DialectGRPCJS, snapshot.DialectCCore, snapshot.DialectGRPCJava,
}

// FuzzDecode feeds any bytes, as a Cluster and a ClusterLoadAssignment a
// management server could send, through what clientlib does with them:
// snapshot.Decode of every dialect, PairConsistent, PolicySize, and
// installing the ring in a balancer (the ring budget and the fade-in
// rings included). Bytes that do not unmarshal must be an error; those
// that do must decode to an error wrapping snapshot.ErrUndecodable, or to
// a ring that agrees with what was decoded: one ring member per decoded
// endpoint, the endpoints those of the assignment a data plane puts on the
// ring, in EDS order, and every pick, retry and walk an index among them.
// A balancer given the ring picks the decoded endpoint.
func FuzzDecode(f *testing.F) {
	cds, _ := proto.Marshal(&clusterv3.Cluster{Name: "c", LbPolicy: clusterv3.Cluster_RING_HASH})
	cla, _ := proto.Marshal(probeAssignment("c"))
	f.Add(cds, cla, []byte("user-42"))
	f.Fuzz(func(t *testing.T, cdsBytes, claBytes, keys []byte) {
		cds := &clusterv3.Cluster{}
		if err := proto.Unmarshal(cdsBytes, cds); err != nil {
			return
		}
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := proto.Unmarshal(claBytes, cla); err != nil {
			return
		}
		probes := fuzzProbes(keys)
		for _, d := range fuzzDialects {
			dec, err := snapshot.DecodeAs(cds, cla, d)
			checkDecoded(t, cds, cla, d, dec, err, probes)
		}
		for _, k := range snapshot.AllKinds() {
			dec, err := snapshot.Decode(cds, cla, k)
			checkDecoded(t, cds, cla, k.Dialect(), dec, err, probes)
		}
		_ = snapshot.PairConsistent(cds, cla)
		for _, p := range cds.GetLoadBalancingPolicy().GetPolicies() {
			_ = snapshot.PolicySize(p.GetTypedExtensionConfig().GetTypedConfig())
		}
		fuzzInstall(t, cds, cla, probes)
	})
}

// fuzzProbes turns the fuzzer's third input into request hashes.
func fuzzProbes(keys []byte) []uint64 {
	probes := []uint64{0, 1 << 63, ^uint64(0), ringhash.HashKey(string(keys))}
	for len(keys) >= 8 && len(probes) < 12 {
		probes = append(probes, binary.LittleEndian.Uint64(keys))
		keys = keys[8:]
	}
	return probes
}

// fuzzAdmitted lists the "host:port" of the endpoints a data plane of
// dialect d puts on the ring, in EDS order: priority 0, healthy or of
// unknown health, in a locality the dialect does not drop.
func fuzzAdmitted(cla *endpointv3.ClusterLoadAssignment, d snapshot.Dialect) []string {
	var out []string
	for _, loc := range cla.GetEndpoints() {
		if loc.GetPriority() != 0 || d.Weights != snapshot.WeightsEndpoint && loc.GetLoadBalancingWeight().GetValue() == 0 {
			continue
		}
		for _, lbe := range loc.GetLbEndpoints() {
			switch lbe.GetHealthStatus() {
			case corev3.HealthStatus_HEALTHY, corev3.HealthStatus_UNKNOWN:
				sa := lbe.GetEndpoint().GetAddress().GetSocketAddress()
				out = append(out, net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10)))
			}
		}
	}
	return out
}

func checkDecoded(t *testing.T, cds *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment, d snapshot.Dialect, dec *snapshot.Decoded, err error, probes []uint64) {
	t.Helper()
	if err != nil {
		if dec != nil {
			t.Fatalf("%s: Decode returned both %+v and %v", d.Name, dec, err)
		}
		if !errors.Is(err, snapshot.ErrUndecodable) {
			t.Fatalf("%s: Decode error %q does not wrap ErrUndecodable", d.Name, err)
		}
		return
	}
	if dec == nil || dec.Ring == nil {
		t.Fatalf("%s: Decode returned no ring and no error", d.Name)
	}
	r := dec.Ring
	n := len(dec.Endpoints)
	if n == 0 || r.NumEndpoints() != n {
		t.Fatalf("%s: %d endpoints decoded, the ring has %d", d.Name, n, r.NumEndpoints())
	}
	if dec.Policy != r.Policy() || dec.Cluster != cds.GetName() || dec.Dialect != d.Name {
		t.Fatalf("%s: decoded policy %q, cluster %q, dialect %q; ring %q, cluster %q", d.Name, dec.Policy, dec.Cluster, dec.Dialect, r.Policy(), cds.GetName())
	}
	admitted := fuzzAdmitted(cla, d)
	if len(admitted) != n {
		t.Fatalf("%s: %d endpoints decoded, the assignment admits %d: %q", d.Name, n, len(admitted), admitted)
	}
	for i, ep := range dec.Endpoints {
		if ep.Addr != admitted[i] || ep.Weight == 0 {
			t.Fatalf("%s: endpoint %d decoded as %q weight %d, the assignment has %q there", d.Name, i, ep.Addr, ep.Weight, admitted[i])
		}
	}
	switch r.Policy() {
	case ringhash.PolicyRingHash:
		limit := ringhash.MaxRingSizeLimit
		if d.RingCap > 0 {
			limit = int(d.RingCap)
		}
		// Rounding may take a ring one entry past its maximum (as in
		// Envoy), never more.
		if r.Size() < 1 || r.Size() > limit+1 {
			t.Fatalf("%s: ring_hash ring of %d entries, limit %d", d.Name, r.Size(), limit)
		}
	case ringhash.PolicyMaglev:
		if r.Size() > ringhash.MaxMaglevTableSize || !ringhash.IsPrime(uint64(r.Size())) {
			t.Fatalf("%s: Maglev table of %d slots", d.Name, r.Size())
		}
	case ringhash.PolicySkipper:
		if r.Size() != n*ringhash.SkipperVnodes {
			t.Fatalf("%s: Skipper ring of %d entries for %d endpoints", d.Name, r.Size(), n)
		}
	default:
		t.Fatalf("%s: unknown ring policy %q", d.Name, r.Policy())
	}
	for _, h := range probes {
		if i := r.Pick(h); i < 0 || i >= n {
			t.Fatalf("%s: Pick(%#x) = %d of %d endpoints", d.Name, h, i, n)
		}
		for _, a := range []int{1, 3} {
			if i := r.PickAttempt(h, a); i < 0 || i >= n {
				t.Fatalf("%s: PickAttempt(%#x, %d) = %d of %d endpoints", d.Name, h, a, i, n)
			}
		}
		seen := make(map[int]bool)
		r.Walk(h, func(i int) bool {
			if i < 0 || i >= n || seen[i] {
				t.Fatalf("%s: Walk(%#x) visits %d (of %d endpoints) after %v", d.Name, h, i, n, seen)
			}
			seen[i] = true
			return len(seen) < 64
		})
	}
}

// fuzzInstall applies the pair as clientlib applies an EDS response to an
// accepted cluster, and picks from the balancer it fills.
func fuzzInstall(t *testing.T, cds *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment, probes []uint64) {
	c := &Client{
		log:       zap.NewNop(),
		balancers: make(map[string]*balancer),
		clusters:  make(map[string]*clusterv3.Cluster),
		endpoints: make(map[string]*endpointv3.ClusterLoadAssignment),
		budget:    defaultBudgets(),
	}
	b := newBalancer(cds.GetName(), defaultBalancerOptions(), c.log)
	c.balancers[cds.GetName()] = b
	_ = policyOf(cds)
	d, decodeErr := snapshot.Decode(cds, cla, snapshot.KindClientlib)
	c.mu.Lock()
	err := c.installLocked(b, cds, cla, d, decodeErr)
	c.mu.Unlock()
	s := b.state.Load()
	if err != nil || s == nil {
		return
	}
	if s.ring == nil {
		if len(s.eps) != 0 {
			t.Fatalf("a balancer without a ring has %d endpoints", len(s.eps))
		}
		if _, err := b.Pick("k"); err == nil {
			t.Fatal("a balancer without a ring picked an endpoint")
		}
		return
	}
	if decodeErr != nil || len(s.eps) != len(d.Endpoints) || s.ring != d.Ring {
		t.Fatalf("installed %d endpoints and ring %p after decoding %d endpoints, ring %p (error %v)", len(s.eps), s.ring, len(d.Endpoints), d.Ring, decodeErr)
	}
	now := time.Now()
	for _, h := range probes {
		key := strconv.FormatUint(h, 16)
		ep, err := b.Pick(key)
		if err != nil {
			t.Fatalf("Pick(%q): %v", key, err)
		}
		want := d.Endpoints[d.Ring.Pick(ringhash.HashKey(key))].Addr
		if s.fade != nil {
			// Fading: the N-ring picks, among the same endpoints.
			i := s.fade.Pick(ringhash.HashKey(key), now)
			if i < 0 || i >= len(d.Endpoints) {
				t.Fatalf("fade-in Pick(%q) = %d of %d endpoints", key, i, len(d.Endpoints))
			}
			continue
		}
		if ep.Addr != want {
			t.Fatalf("balancer Pick(%q) = %s, the decoded ring picks %s", key, ep.Addr, want)
		}
	}
}
