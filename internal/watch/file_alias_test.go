package watch_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ringxds/ringxds/internal/watch"
)

// fileAliasBomb is the "billion laughs" file: one cluster whose
// endpoint list repeats one bad endpoint through perEndpoint aliases, and
// clusters-1 aliases of that cluster. At 2000 by 2000 it is 22 KB and
// describes 4 million endpoints, each with a port of 0, so a parser that
// expands it walks 20 million nodes and reports 4 million errors.
func fileAliasBomb(clusters, endpoints int) string {
	var b strings.Builder
	b.WriteString("clusters:\n  - &c\n    name: a\n    endpoints: [&e {address: 10.0.0.1, port: 0}")
	b.WriteString(strings.Repeat(", *e", endpoints-1))
	b.WriteString("]\n")
	b.WriteString(strings.Repeat("  - *c\n", clusters-1))
	return b.String()
}

// fileLaughs is the classic form: nine levels of ten aliases each under a
// field nobody reads, 10^9 nodes in under 1 KB.
func fileLaughs() string {
	var b strings.Builder
	b.WriteString("clusters: []\nlol:\n  - &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  - &l%d [%s]\n", i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	return b.String()
}

// fileAllocated returns the bytes fn allocates, a measure of the work it
// does that, unlike its duration, does not depend on the machine.
func fileAllocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestFileAliasBombIsRefusedWithOneError(t *testing.T) {
	tests := []struct {
		name  string
		input string
		line  int
		alias string
	}{
		// Each *c adds 10,000 nodes: the tenth, on line 13, passes 100,000.
		{"nested clusters and endpoints", fileAliasBomb(2000, 2000), 13, "*c"},
		// Each *l3 adds 11,111 nodes: on line 7, the list &l4 of ten of
		// them passes 100,000 even before the levels above it.
		{"billion laughs under an unread field", fileLaughs(), 7, "*l3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			// Expanding the first case took 4.5 GB; refusing it takes
			// about 1 MB (the node tree of a 22 KB file).
			alloc := fileAllocated(func() { _, err = watch.ParseFile("bomb.yaml", []byte(tc.input)) })
			if alloc > 64<<20 {
				t.Errorf("refusing the file allocated %d MiB, want the cost of its node tree, far below 64 MiB", alloc>>20)
			}
			fes := watch.FileErrors(err)
			if len(fes) != 1 {
				t.Fatalf("%d errors, want exactly one; first: %.300v", len(fes), err)
			}
			fe := fes[0]
			if fe.Line != tc.line || !strings.Contains(fe.Err.Error(), "alias "+tc.alias+": aliases would add more than 100000 nodes") {
				t.Errorf("error %q, want the alias %s on line %d to be named as taking the file past 100000 added nodes", fe, tc.alias, tc.line)
			}
		})
	}
}

func TestFileAliasNamingItsOwnContainerIsRefused(t *testing.T) {
	// The endpoints of the cluster are the list that holds the cluster.
	input := "clusters: &all\n  - name: a\n    endpoints: *all\n"
	_, err := watch.ParseFile("f.yaml", []byte(input))
	fes := watch.FileErrors(err)
	if len(fes) != 1 || fes[0].Line != 3 || !strings.Contains(fes[0].Err.Error(), "alias *all names a node that contains it") {
		t.Fatalf("errors %v, want one saying the alias on line 3 names a node that contains it", err)
	}
}

func TestFileAliasesWithinTheBudgetWork(t *testing.T) {
	input := `clusters:
  - name: a
    fade_in: &fade {duration: 10s}
    endpoints: &pool
      - {address: 10.0.0.1, port: 80}
      - {address: 10.0.0.2, port: 80}
  - name: b
    lb_policy: maglev
    fade_in: *fade
    endpoints: *pool
`
	st, err := watch.ParseFile("f.yaml", []byte(input))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Clusters {
		if len(c.Endpoints) != 2 || c.FadeIn == nil || c.FadeIn.Duration.String() != "10s" {
			t.Errorf("cluster %s did not get the shared endpoints and fade_in: %+v", c.Name, c)
		}
	}
}

// The budget grows with the file: a large file may repeat through aliases
// as many nodes as it writes out, and no more.
func TestFileAliasBudgetIsTheLargerOfTheFloorAndTheFile(t *testing.T) {
	// 21,000 endpoints of 5 nodes each: one alias of the list adds
	// 105,001 nodes, over the floor but fewer than the file writes out.
	var b strings.Builder
	b.WriteString("clusters:\n  - name: a\n    endpoints: &pool\n")
	for i := range 21000 {
		fmt.Fprintf(&b, "      - {address: 10.%d.%d.%d, port: 80}\n", i>>16, i>>8&255, i&255)
	}
	b.WriteString("  - name: b\n    endpoints: *pool\n")
	once := b.String()
	st, err := watch.ParseFile("f.yaml", []byte(once))
	if err != nil {
		t.Fatalf("one alias of a list as large as the rest of the file: %.300v", err)
	}
	if n := len(st.Clusters[1].Endpoints); n != 21000 {
		t.Fatalf("cluster b has %d endpoints, want 21000", n)
	}

	// A second alias adds twice what the file writes out.
	_, err = watch.ParseFile("f.yaml", []byte(once+"  - name: c\n    endpoints: *pool\n"))
	fes := watch.FileErrors(err)
	if len(fes) != 1 || fes[0].Line != 21007 || !strings.Contains(fes[0].Err.Error(), "alias *pool: aliases would add more than") {
		t.Fatalf("errors %.300v, want one naming the second alias, on line 21007", err)
	}
}

func TestFileAliasBombKeepsTheLastGoodStateServed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, fileYAML(80))
	r := fileStart(t, path, fileTestDebounce)
	fileExpectPorts(t, r.next(t), 80)

	fileWrite(t, path, fileAliasBomb(2000, 2000))
	ps := r.waitProblems(t, func(ps []watch.Problem) bool { return len(ps) > 0 })
	if len(ps) != 1 || ps[0].Field != "line 13" || !strings.Contains(ps[0].Message, "aliases would add more than 100000 nodes") {
		t.Errorf("problems %+v, want one naming the alias on line 13", ps)
	}
	if n := r.logs.FilterMessageSnippet("endpoints file rejected").Len(); n != 1 {
		t.Errorf("the refused file was logged in %d entries, want 1", n)
	}

	// Nothing was published for the bomb: the next state is the fix.
	fileWrite(t, path, fileYAML(80, 81))
	fileExpectPorts(t, r.next(t), 80, 81)
}
