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

// BenchmarkFileParseAliasBomb refuses the 22 KB "billion laughs"
// file (2000 aliases of a cluster whose 2000 endpoints are aliases of one),
// which, expanded, took 26 s and 4.5 GB and reported 4 million errors.
func BenchmarkFileParseAliasBomb(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("clusters:\n  - &c\n    name: a\n    endpoints: [&e {address: 10.0.0.1, port: 0}")
	sb.WriteString(strings.Repeat(", *e", 1999))
	sb.WriteString("]\n")
	sb.WriteString(strings.Repeat("  - *c\n", 1999))
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseFile("bomb.yaml", data); len(FileErrors(err)) != 1 {
			b.Fatalf("want one error, got %.200v", err)
		}
	}
}
