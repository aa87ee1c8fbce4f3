package loadgen

import "testing"

// BenchmarkRender is the tool's own share of every change: the clock of a
// change starts before its file is rendered.
func BenchmarkRender(b *testing.B) {
	topo, err := newTopology(b.TempDir()+"/endpoints.yaml", 100, 10000)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = topo.render()
	}
}
