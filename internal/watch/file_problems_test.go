package watch_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// fileProblems renders the problems of a file as "line field: message".
func fileProblems(t *testing.T, data string) []string {
	t.Helper()
	_, err := watch.ParseFile("f.yaml", []byte(data))
	var out []string
	for _, fe := range watch.FileErrors(err) {
		out = append(out, fmt.Sprintf("%d %s: %v", fe.Line, fe.Field, fe.Err))
	}
	return out
}

// A value the parse refuses must not hide the model's checks of the rest
// of the file: one weight of 0 once hid the six other mistakes below.
func TestFileModelChecksRunBesideParseProblems(t *testing.T) {
	const file = `clusters:
  - name: products
    hash_header: X-Product-Id
    endpoints:
      - {address: 10.0.0.1, port: 80, weight: 0}
      - {address: 10.0.0.1, port: 80}
      - {address: 10.0.0.01, port: 80}
      - {address: 10.0.0.2, port: 70000}
  - name: inventory
    lb_policy: maglev
    table_size: 1000
    endpoints: [{address: 10.0.1.1, port: 80}]
  - name: products
    endpoints: [{address: 10.0.2.1, port: 80}]
`
	got := fileProblems(t, file)
	want := []string{
		`3 clusters[0].hash_header: "X-Product-Id" is not a valid lower-case HTTP header name: write "x-product-id"`,
		`5 clusters[0].endpoints[0].weight: must be at least 1; omit the field to use the default`,
		`6 clusters[0].endpoints[1]: duplicates endpoints[0] (10.0.0.1:80) on line 5`,
		`7 clusters[0].endpoints[2].address: "10.0.0.01" is not an IPv4 or IPv6 address`,
		`8 clusters[0].endpoints[3].port: 70000 is outside 1..65535`,
		`11 clusters[1].table_size: 1000 must be a prime no larger than 5000011: 997 or 1009?`,
		`13 clusters[2].name: cluster name "products" is already used on line 2`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// What the parse refused is left out of the model's checks, which would
// see it as omitted (zero) and report a problem the file does not have.
func TestFileRefusedValuesAreNotCheckedAgain(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string
	}{
		{"refused ports are not duplicates", "    endpoints:\n      - {address: 10.0.0.1, port: -3}\n      - {address: 10.0.0.1, port: http}\n",
			[]string{"4 clusters[0].endpoints[0].port", "5 clusters[0].endpoints[1].port"}},
		{"a refused hash_key is not the ring key", "    endpoints:\n      - {address: 10.0.0.1, port: 80, hash_key: 5}\n      - {address: 10.0.0.2, port: 80, hash_key: \"10.0.0.1:80\"}\n",
			[]string{"4 clusters[0].endpoints[0].hash_key"}},
		{"a refused address is not empty", "    endpoints: [{address: 10, port: 80}]\n",
			[]string{"3 clusters[0].endpoints[0].address"}},
		{"an endpoint that is not a mapping has no fields", "    endpoints: [10.0.0.1]\n",
			[]string{"3 clusters[0].endpoints[0]"}},
		{"a misspelt port is not missing", "    endpoints: [{address: 10.0.0.1, prot: 80}]\n",
			[]string{"3 clusters[0].endpoints[0].prot"}},
		{"a misspelt endpoints is not empty", "    endpoint: [{address: 10.0.0.1, port: 80}]\n",
			[]string{"3 clusters[0].endpoint"}},
		{"endpoints that are not a list are not empty", "    endpoints: {address: 10.0.0.1, port: 80}\n",
			[]string{"3 clusters[0].endpoints"}},
		{"a refused name is not empty", "  - name: 5\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			[]string{"2 clusters[0].name"}},
		{"a refused policy does not judge the table size", "    lb_policy: round_robin\n    table_size: 65537\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			[]string{"3 clusters[0].lb_policy"}},
		{"a misspelt policy does not judge the table size", "    lb_polcy: maglev\n    table_size: 65537\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			[]string{"3 clusters[0].lb_polcy"}},
		{"a refused maximum ring size does not bound the capacity", "    maximum_ring_size: -1\n    fade_in: {capacity: 5000}\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			[]string{"3 clusters[0].maximum_ring_size"}},
		{"a refused reader hides the list's checks", "    readers: [5, Bad_Name]\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			[]string{"3 clusters[0].readers[0]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := "clusters:\n"
			if !strings.HasPrefix(tc.body, "  - ") {
				file += "  - name: a\n"
			}
			file += tc.body
			var got []string
			for _, p := range fileProblems(t, file) {
				got = append(got, p[:strings.Index(p, ":")])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems at %q, want %q: %q", got, tc.want, fileProblems(t, file))
			}
		})
	}
}

// Only what the parse refused is left out: the rest of the same endpoint
// and cluster is still checked.
func TestFileRefusedValuesLeaveTheRestChecked(t *testing.T) {
	const file = `clusters:
  - name: a
    maximum_ring_size: 0
    minimum_ring_size: 99999999
    endpoints:
      - {address: 10.0.0.01, port: 80, weight: 0}
      - {address: 10.0.0.1, port: 70000, prot: 80}
`
	var got []string
	for _, p := range fileProblems(t, file) {
		got = append(got, p[:strings.Index(p, ":")])
	}
	want := []string{
		"3 clusters[0].maximum_ring_size", "4 clusters[0].minimum_ring_size",
		"6 clusters[0].endpoints[0].address", "6 clusters[0].endpoints[0].weight",
		"7 clusters[0].endpoints[1].port", "7 clusters[0].endpoints[1].prot",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems at %q, want %q: %q", got, want, fileProblems(t, file))
	}
}

// TestFileDocErrorSample parses the file shown under "Errors" in
// docs/file-source.md and expects exactly the output shown after it, so
// that the sample can only show what the parser does.
func TestFileDocErrorSample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/file-source.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Errors\n")
	if !ok {
		t.Fatal(`docs/file-source.md has no "## Errors" section`)
	}
	_, rest, ok := strings.Cut(section, "```yaml\n")
	input, rest, ok2 := strings.Cut(rest, "```\n")
	_, rest, ok3 := strings.Cut(rest, "```\n")
	output, _, ok4 := strings.Cut(rest, "```\n")
	if !ok || !ok2 || !ok3 || !ok4 {
		t.Fatal(`the "Errors" section lacks a YAML block followed by an output block`)
	}
	_, err = watch.ParseFile("/etc/ringxds/endpoints.yaml", []byte(input))
	if err == nil {
		t.Fatal("the sample file is accepted")
	}
	if got := err.Error() + "\n"; got != output {
		t.Errorf("the sample file is reported as\n%s\nnot as the doc says:\n%s", got, output)
	}
}
