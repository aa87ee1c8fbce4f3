package watch

import (
	"fmt"
	"os"
	"path/filepath"
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

// fileLargeYAML renders BenchmarkFileParseLarge's file with the port of
// the first endpoint of each cluster c for which changed(c) is true moved
// to 9090: a change to those clusters, and to no other.
func fileLargeYAML(changed func(c int) bool) []byte {
	var sb strings.Builder
	sb.WriteString("clusters:\n")
	for c := range 100 {
		fmt.Fprintf(&sb, "  - name: svc-%03d\n    lb_policy: ring_hash\n    hash_header: x-key\n    endpoints:\n", c)
		for e := range 100 {
			port := 8080
			if e == 0 && changed(c) {
				port = 9090
			}
			fmt.Fprintf(&sb, "      - {address: 10.%d.%d.1, port: %d, weight: 1, zone: zone-%d}\n", c, e, port, e%3)
		}
	}
	return []byte(sb.String())
}

// BenchmarkFileReload is what a FileSource spends on one reload of the
// 10,000-endpoint file, from reading it to the state it publishes, when
// the file alternates between two versions that differ in no cluster, in
// one, or in every one.
func BenchmarkFileReload(b *testing.B) {
	base := fileLargeYAML(func(int) bool { return false })
	for _, bc := range []struct {
		name    string
		changed func(c int) bool
	}{
		{"unchanged", func(int) bool { return false }},
		{"one-cluster", func(c int) bool { return c == 42 }},
		{"every-cluster", func(int) bool { return true }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			versions := [][]byte{base, fileLargeYAML(bc.changed)}
			path := filepath.Join(b.TempDir(), "endpoints.yaml")
			src, err := NewFileSource(path, FileOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(path, base, 0o644); err != nil {
				b.Fatal(err)
			}
			if _, err := src.Load(); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(base)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if err := os.WriteFile(path, versions[i%2], 0o644); err != nil {
					b.Fatal(err)
				}
				if _, err := src.Load(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
