package snapshot

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/ringhash"
)

// entryRing is a hand-written hash-ordered ring for exact checks.
type entryRing struct {
	hashes []uint64
	owners []int
}

func (r entryRing) Pick(h uint64) int {
	for i, e := range r.hashes {
		if e >= h {
			return r.owners[i]
		}
	}
	return r.owners[0]
}
func (r entryRing) PickAttempt(h uint64, _ int) int { return r.Pick(h) }
func (r entryRing) Walk(uint64, func(int) bool)     {}
func (r entryRing) NumEndpoints() int               { return 2 }
func (r entryRing) Size() int                       { return len(r.hashes) }
func (r entryRing) Policy() string                  { return ringhash.PolicyRingHash }
func (r entryRing) Entries(fn func(h uint64, ep int)) {
	for i, h := range r.hashes {
		fn(h, r.owners[i])
	}
}

func TestDisagreementExact(t *testing.T) {
	eps := []DecodedEndpoint{{Addr: "x"}, {Addr: "y"}}
	ring := func(hashes ...uint64) *Decoded {
		return &Decoded{Endpoints: eps, Ring: entryRing{hashes: hashes, owners: []int{0, 1}}}
	}
	for _, tc := range []struct {
		name string
		a, b *Decoded
		want float64 // in hashes
	}{
		{"same", ring(100, 200), ring(100, 200), 0},
		// (100, 150] is y in a and x in b.
		{"shifted boundary", ring(100, 200), ring(150, 200), 50},
		// Past the last entry both wrap to x; [0, 100] and (200, max] agree.
		{"last entry moved", ring(100, 200), ring(100, 300), 100},
		// b ends at the top of the hash space: (200, max] is x in a, y in b.
		{"entry at max", ring(100, 200), ring(100, math.MaxUint64), math.MaxUint64 - 200},
	} {
		got, exact, err := Disagreement(tc.a, tc.b)
		if err != nil || !exact {
			t.Fatalf("%s: exact %v, %v", tc.name, exact, err)
		}
		if want := tc.want / math.Exp2(64); got != want {
			t.Errorf("%s: %g, want %g", tc.name, got, want)
		}
		if back, _, _ := Disagreement(tc.b, tc.a); back != got {
			t.Errorf("%s: not symmetric: %g vs %g", tc.name, got, back)
		}
	}
}

// TestDisagreementMatchesSampling compares the exact figure with the share
// of random request hashes whose picks differ, on the rings grpc-java and
// Envoy build from one published cluster.
func TestDisagreementMatchesSampling(t *testing.T) {
	snap := build(t, model.Cluster{Name: "c", Endpoints: threeEndpoints()})
	cds, cla := published(snap, KindGRPC, "c")
	envoy, err := DecodeAs(cds, cla, DialectEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	java, err := DecodeAs(cds, cla, DialectGRPCJava)
	if err != nil {
		t.Fatal(err)
	}
	got, exact, err := Disagreement(envoy, java)
	if err != nil || !exact {
		t.Fatalf("exact %v, %v", exact, err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 200000
	differ := 0
	for range n {
		h := rng.Uint64()
		if envoy.Endpoints[envoy.Ring.Pick(h)].Addr != java.Endpoints[java.Ring.Pick(h)].Addr {
			differ++
		}
	}
	sampled := float64(differ) / n
	t.Logf("exact %.4f, sampled %.4f", got, sampled)
	if math.Abs(got-sampled) > 0.01 {
		t.Errorf("exact %.4f, sampled %.4f", got, sampled)
	}
	if got < 0.5 || got > 0.8 {
		t.Errorf("grpc-java vs Envoy on three equal endpoints: %.3f of keys differ, want about 2/3", got)
	}
	if same, _, _ := Disagreement(envoy, envoy); same != 0 {
		t.Errorf("a ring against itself: %g", same)
	}
}

// A Maglev table against the ring gRPC clients build for the same cluster:
// sampled, and close to the share of random hashes that differ.
func TestDisagreementMaglevIsSampled(t *testing.T) {
	snap := build(t, model.Cluster{Name: "c", Policy: model.PolicyMaglev, Endpoints: threeEndpoints()})
	envoyCDS, cla := published(snap, KindEnvoy, "c")
	grpcCDS, _ := published(snap, KindGRPC, "c")
	maglev, err := DecodeAs(envoyCDS, cla, DialectEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := DecodeAs(grpcCDS, cla, DialectGRPCGo)
	if err != nil {
		t.Fatal(err)
	}
	got, exact, err := Disagreement(maglev, ring)
	if err != nil || exact {
		t.Fatalf("exact %v, %v; want a sampled figure", exact, err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	differ := 0
	const n = 200000
	for range n {
		h := rng.Uint64()
		if maglev.Endpoints[maglev.Ring.Pick(h)].Addr != ring.Endpoints[ring.Ring.Pick(h)].Addr {
			differ++
		}
	}
	if sampled := float64(differ) / n; math.Abs(got-sampled) > 0.01 {
		t.Errorf("Disagreement %.4f, random hashes %.4f", got, sampled)
	}
	if same, _, _ := Disagreement(maglev, maglev); same != 0 {
		t.Errorf("a table against itself: %g", same)
	}
}

// Envoy and C-core hash an address as inet_ntop prints it, grpc-js as it
// was published: a non-canonical spelling splits their rings.
func TestDecodeAsHashesAddressesAsEachDataPlane(t *testing.T) {
	snap := build(t, model.Cluster{Name: "c", Endpoints: []model.Endpoint{{Address: "::1", Port: 80}, {Address: "::2", Port: 80}}})
	// The legacy fields alone: every dialect reads them.
	cds, cla := published(snap, KindGRPCLegacy, "c")
	long := proto.Clone(cla).(*endpointv3.ClusterLoadAssignment)
	for _, lbe := range long.GetEndpoints()[0].GetLbEndpoints() {
		sa := lbe.GetEndpoint().GetAddress().GetSocketAddress()
		sa.Address = strings.ToUpper(strings.Replace(sa.GetAddress(), "::", "0:0:0:0:0:0:0:", 1))
	}
	for _, tc := range []struct {
		d    Dialect
		same bool
	}{{DialectEnvoy, true}, {DialectCCore, true}, {DialectGRPCJS, false}, {DialectGRPCGo, false}} {
		a, err := DecodeAs(cds, cla, tc.d)
		if err != nil {
			t.Fatal(err)
		}
		b, err := DecodeAs(cds, long, tc.d)
		if err != nil {
			t.Fatal(err)
		}
		same := strings.Join(entryHashes(a), ",") == strings.Join(entryHashes(b), ",")
		if same != tc.same {
			t.Errorf("%s: ring of the long spelling is the same: %v, want %v", tc.d.Name, same, tc.same)
		}
	}
}

func entryHashes(d *Decoded) []string {
	var out []string
	d.Ring.(ringhash.Drawable).Entries(func(h uint64, _ int) { out = append(out, strconv.FormatUint(h, 10)) })
	return out
}
