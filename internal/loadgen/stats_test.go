package loadgen

import (
	"math"
	"strings"
	"testing"
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
