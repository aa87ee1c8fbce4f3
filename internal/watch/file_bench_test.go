package watch

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkFileParseLarge parses what a large deployment's file holds:
// 100 clusters of 100 endpoints. Every reload pays this.
func BenchmarkFileParseLarge(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("clusters:\n")
	for c := range 100 {
		fmt.Fprintf(&sb, "  - name: svc-%03d\n    lb_policy: ring_hash\n    hash_header: x-key\n    endpoints:\n", c)
		for e := range 100 {
			fmt.Fprintf(&sb, "      - {address: 10.%d.%d.1, port: 8080, weight: 1, zone: zone-%d}\n", c, e, e%3)
		}
	}
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseFile("endpoints.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}
