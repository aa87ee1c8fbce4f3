package watch_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringxds/ringxds/internal/watch"
)

// fileBadEndpoints renders a cluster whose endpoints all have a port of 0,
// one problem per line.
func fileBadEndpoints(n int) string {
	var b strings.Builder
	b.WriteString("clusters:\n  - name: a\n    endpoints:\n")
	for i := range n {
		fmt.Fprintf(&b, "      - {address: 10.0.%d.%d, port: 0}\n", i>>8, i&255)
	}
	return b.String()
}

func TestFileReportsTheFirstHundredProblemsAndCountsTheRest(t *testing.T) {
	_, err := watch.ParseFile("f.yaml", []byte(fileBadEndpoints(250)))
	fes := watch.FileErrors(err)
	if len(fes) != 101 {
		t.Fatalf("%d problems listed, want 100 and one counting the rest", len(fes))
	}
	for i, fe := range fes[:100] {
		if fe.Line != 4+i || fe.Field != fmt.Sprintf("clusters[0].endpoints[%d].port", i) {
			t.Fatalf("problem %d is %v, want the port on line %d", i, fe, 4+i)
		}
	}
	if last := fes[100]; last.Line != 0 || last.Err.Error() != "150 more problems are not listed: only the first 100, in line order, are reported" {
		t.Errorf("last problem %q, want the count of the 150 left out", last)
	}

	// Exactly 100 problems need no count.
	if _, err := watch.ParseFile("f.yaml", []byte(fileBadEndpoints(100))); len(watch.FileErrors(err)) != 100 {
		t.Errorf("100 problems listed as %d", len(watch.FileErrors(err)))
	}
}

// Problems are found in walk order, which aliases make differ from line
// order; the ones kept must still be the first in line order.
func TestFileKeepsTheFirstProblemsInLineOrderWhateverOrderTheyAreFound(t *testing.T) {
	var b strings.Builder
	b.WriteString("clusters:\n  - name: a\n    endpoints: &bad\n")
	for i := range 150 {
		fmt.Fprintf(&b, "      - {address: 10.0.0.%d, port: 0}\n", i)
	}
	b.WriteString("  - name: b\n    endpoints: *bad\n")
	_, err := watch.ParseFile("f.yaml", []byte(b.String()))
	fes := watch.FileErrors(err)
	if len(fes) != 101 {
		t.Fatalf("%d problems listed, want 101", len(fes))
	}
	// Both clusters report each line; ties keep the order found: a, b.
	for i, fe := range fes[:100] {
		if want := []string{"a", "b"}[i%2]; fe.Line != 4+i/2 || fe.Cluster != want {
			t.Fatalf("problem %d is line %d of cluster %q, want line %d of %q", i, fe.Line, fe.Cluster, 4+i/2, want)
		}
	}
	if !strings.HasPrefix(fes[100].Err.Error(), "200 more problems") {
		t.Errorf("last problem %q, want a count of 200", fes[100])
	}
}

func TestFileSourceLogsAndListsAHundredProblemsAndCountsThemAll(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, fileYAML(80))
	r := fileStart(t, path, fileTestDebounce)
	fileExpectPorts(t, r.next(t), 80)

	fileWrite(t, path, fileBadEndpoints(5000))
	ps := r.waitProblems(t, func(ps []watch.Problem) bool { return len(ps) > 0 })
	if len(ps) != 101 || ps[100].Field != "" || !strings.HasPrefix(ps[100].Message, "4900 more problems") {
		t.Errorf("%d problems, the last %+v; want 100 and a count of 4900", len(ps), ps[len(ps)-1])
	}
	if n := r.logs.FilterMessageSnippet("endpoints file rejected").Len(); n != 101 {
		t.Errorf("%d log entries for the rejected file, want 101", n)
	}
	if n := r.metric(t, "ringxds_source_problems", ""); n != 5000 {
		t.Errorf("problems gauge = %v, want all 5000, listed or not", n)
	}
}
