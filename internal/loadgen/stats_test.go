package loadgen

import (
	"errors"
	"math"
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

func TestPercentileIsNearestRank(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct{ p, want float64 }{{50, 5}, {99, 10}, {100, 10}, {10, 1}, {0, 1}} {
		if got := percentile(v, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 50); got != -1 {
		t.Errorf("p50 of nothing = %v, want -1", got)
	}
}

func TestParsePromSumsMatchingSamples(t *testing.T) {
	text := `# HELP ringxds_xds_bytes_sent_total bytes
# TYPE ringxds_xds_bytes_sent_total counter
ringxds_xds_bytes_sent_total{kind="envoy",protocol="sotw",type="eds"} 1000
ringxds_xds_bytes_sent_total{kind="envoy",protocol="delta",type="eds"} 250
ringxds_xds_bytes_sent_total{kind="grpc",protocol="sotw",type="lds"} 5
process_resident_memory_bytes 1.048576e+07
`
	p, err := parseProm(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.sum("ringxds_xds_bytes_sent_total"); got != 1255 {
		t.Errorf("sum = %v, want 1255", got)
	}
	if got := p.sum("ringxds_xds_bytes_sent_total", `protocol="sotw"`, `type="eds"`); got != 1000 {
		t.Errorf("sotw eds = %v, want 1000", got)
	}
	if got := p.sum("process_resident_memory_bytes"); got != 10485760 {
		t.Errorf("rss = %v", got)
	}
	if _, err := parseProm(strings.NewReader("broken{a=\"b\" 1\n")); err == nil {
		t.Error("unbalanced braces parsed")
	}
}

func TestFingerprintIgnoresOrderAndTopologyChangesMoveForward(t *testing.T) {
	if fingerprint([]string{"a:1", "b:2"}) != fingerprint([]string{"b:2", "a:1"}) {
		t.Fatal("fingerprint depends on order")
	}
	topo, err := newTopology(t.TempDir()+"/endpoints.yaml", 3, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := topo.latest(); len(got) != 3 || got[0] != 0 {
		t.Fatalf("initial generations %v", got)
	}
	c := topo.clusters[0]
	before := c.gens[0].fp
	c.ports[0] = 9999
	gen := c.record(topo.clusters[0].gens[0].writtenAt)
	if gen != 1 || c.gens[1].fp == before {
		t.Fatalf("a changed port did not make a new generation (gen %d)", gen)
	}
	if ci, g := topo.lookup(c.name, before); ci != 0 || g != 0 {
		t.Fatalf("lookup of the first set = %d/%d", ci, g)
	}
	if _, g := topo.lookup(c.name, 42); g != -1 {
		t.Fatal("content never written was found")
	}
	if signed(math.NaN(), 1) != "NA" || signed(-4.44, 1) != "-4.4" || num(-1, 1) != "NA" {
		t.Fatal("figure formatting")
	}
}

func TestVersionBookComparesAcrossReplicasAndCatchesDisagreement(t *testing.T) {
	a := &anypb.Any{TypeUrl: resource.EndpointType, Value: []byte("assignment a")}
	b := &anypb.Any{TypeUrl: resource.EndpointType, Value: []byte("assignment b")}
	sotw := func(version string, anys ...*anypb.Any) *discovery.DiscoveryResponse {
		return &discovery.DiscoveryResponse{TypeUrl: resource.EndpointType, VersionInfo: version, Resources: anys}
	}
	book := newVersionBook()
	book.sotw(0, sotw("v1", a, b))
	book.sotw(0, sotw("v1", b, a)) // same replica: compares nothing new
	if compared, bad, _ := book.result(); compared != 0 || bad != 0 {
		t.Fatalf("one replica: compared %d, mismatches %d", compared, bad)
	}
	book.sotw(1, sotw("v1", b, a)) // the order of resources is not content
	if compared, bad, _ := book.result(); compared != 1 || bad != 0 {
		t.Fatalf("two replicas agreeing: compared %d, mismatches %d", compared, bad)
	}

	// A delta resource's version, and the response's, are compared too.
	delta := func(version string) *discovery.DeltaDiscoveryResponse {
		return &discovery.DeltaDiscoveryResponse{TypeUrl: resource.EndpointType, SystemVersionInfo: "s",
			Resources: []*discovery.Resource{{Name: "svc-0001", Version: version, Resource: a}}}
	}
	book.delta(0, delta("r1"))
	book.delta(1, delta("r2"))
	book.sotw(2, sotw("v2", a, b))
	compared, bad, examples := book.result()
	if compared != 3 || bad != 2 || len(examples) != 2 {
		t.Fatalf("compared %d, mismatches %d, examples %q", compared, bad, examples)
	}
	if !strings.Contains(examples[0], `delta eds resource svc-0001: replica 0 sent version "r1", replica 1 "r2"`) ||
		!strings.Contains(examples[1], `SotW eds response: replica 0 sent version "v1", replica 2 "v2"`) {
		t.Fatalf("examples do not name what differed: %q", examples)
	}

	res := &Result{Clients: 2, Converged: 2, Replicas: []ReplicaResult{{Clients: 1, Converged: 1}, {Clients: 1, Converged: 1}},
		VersionsCompared: compared, VersionMismatches: bad}
	if res.OK() || !strings.Contains(res.Line(), " replica_versions_identical=false ") {
		t.Fatalf("a disagreement passed: ok=%v %s", res.OK(), res.Line())
	}
	res.VersionMismatches, res.VersionsCompared = 0, 0
	if !res.OK() || !strings.Contains(res.Line(), " replica_versions_identical=NA ") {
		t.Fatalf("nothing compared is not a verdict: ok=%v %s", res.OK(), res.Line())
	}
}

// A refusal over the server's connection rate is the storm smoothing a
// client retries through; any other refusal is a failure of the run.
func TestRateRefusalIsNotAFailure(t *testing.T) {
	rate := status.Error(codes.ResourceExhausted, "ringxds limit --max-new-connections-per-second: more than 500 new connections per second (burst 1000); retry with backoff")
	other := status.Error(codes.ResourceExhausted, "ringxds limit --max-names-per-stream: a request naming 30000 names")
	if !isRateRefusal(rate) || isRateRefusal(other) || isRateRefusal(errors.New("--max-new-connections-per-second")) {
		t.Fatal("isRateRefusal tells the connection rate refusal apart wrongly")
	}
}
