package watch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// FuzzParseFile parses any bytes as an endpoints file. ParseFile must
// return either a state or problems, never panic, and:
//
//   - every problem names the file, says something, and points at a line of
//     it (or at none); at most fileMaxProblems are listed, in line order,
//     then one counting the rest;
//   - aliases are refused exactly when a naive expansion of the document
//     adds more nodes than FileAliasFloor or the nodes written, or never
//     ends;
//   - an accepted state passes the model's checks and snapshot.Build, and
//     written back out as a file parses to the same state.
func FuzzParseFile(f *testing.F) {
	f.Add(examples.DefaultEndpoints)
	f.Add([]byte("clusters:\n- name: a\n  endpoints: [{address: 10.0.0.1, port: 80}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const path = "endpoints.yaml"
		state, err := ParseFile(path, data)
		checkFileAliases(t, data, err)
		if err != nil {
			if len(state.Clusters) != 0 {
				t.Fatalf("ParseFile returned %d clusters with the error %v", len(state.Clusters), err)
			}
			checkFileErrors(t, path, data, err)
			return
		}
		checkAcceptedFile(t, path, state)
	})
}

// yamlLines counts the lines of data as the YAML parser does, which is
// what problems' line numbers follow: CRLF, a lone CR, LF and the
// Unicode breaks NEL, LS and PS each end a line.
func yamlLines(data []byte) int {
	n := 1
	for i := 0; i < len(data); i++ {
		switch {
		case data[i] == '\r':
			if i+1 < len(data) && data[i+1] == '\n' {
				i++
			}
			n++
		case data[i] == '\n':
			n++
		case bytes.HasPrefix(data[i:], []byte("\u0085")), bytes.HasPrefix(data[i:], []byte("\u2028")), bytes.HasPrefix(data[i:], []byte("\u2029")):
			n++
		}
	}
	return n
}

func checkFileErrors(t *testing.T, path string, data []byte, err error) {
	t.Helper()
	errs := FileErrors(err)
	if len(errs) == 0 || len(errs) > fileMaxProblems+1 {
		t.Fatalf("ParseFile's error holds %d FileErrors: %v", len(errs), err)
	}
	lines := yamlLines(data)
	for i, fe := range errs {
		if fe.Path != path || fe.Err == nil || fe.Err.Error() == "" || fe.Line < 0 || fe.Column < 0 {
			t.Fatalf("problem %d is %#v", i, fe)
		}
		if fe.Line > lines {
			t.Fatalf("problem %d (%v) is on line %d of a file of %d lines", i, fe, fe.Line, lines)
		}
		if i > 0 && fe.Line > 0 && (fe.Line < errs[i-1].Line || fe.Line == errs[i-1].Line && fe.Column < errs[i-1].Column) {
			t.Fatalf("problems out of line order: %v before %v", errs[i-1], fe)
		}
		var more fileMoreProblems
		if errors.As(fe.Err, &more) && (i != len(errs)-1 || i != fileMaxProblems || fe.Line != 0) {
			t.Fatalf("the count of unlisted problems is problem %d of %d: %v", i, len(errs), fe)
		}
	}
}

// checkFileAliases checks the alias budget against a naive expansion of
// the document, when ParseFile got as far as judging its aliases (one
// non-empty document).
func checkFileAliases(t *testing.T, data []byte, err error) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, extra yaml.Node
	if dec.Decode(&doc) != nil || len(doc.Content) == 0 || !errors.Is(dec.Decode(&extra), io.EOF) {
		return
	}
	refused := false
	for _, fe := range FileErrors(err) {
		refused = refused || strings.HasPrefix(fe.Err.Error(), "alias *")
	}
	top := doc.Content[0]
	written := 0
	var count func(n *yaml.Node)
	count = func(n *yaml.Node) {
		written++
		if n.Kind != yaml.AliasNode {
			for _, c := range n.Content {
				count(c)
			}
		}
	}
	count(top)
	budget := max(FileAliasFloor, written)
	// added counts, alias by alias in document order, the nodes each
	// alias stands for, fully expanded, until it passes the budget; an
	// alias met inside the node it names never ends.
	added, endless := 0, false
	var expand func(n *yaml.Node, path []*yaml.Node)
	expand = func(n *yaml.Node, path []*yaml.Node) {
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			for _, p := range path {
				if p == n.Alias {
					endless = true
					return
				}
			}
			n = n.Alias
		}
		added++
		if added > budget {
			return
		}
		path = append(path, n)
		for _, c := range n.Content {
			if expand(c, path); endless || added > budget {
				return
			}
		}
	}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		for _, c := range n.Content {
			if endless || added > budget {
				return
			}
			if c.Kind == yaml.AliasNode {
				expand(c, nil)
			} else {
				walk(c)
			}
		}
	}
	walk(top)
	if want := endless || added > budget; refused != want {
		t.Fatalf("aliases refused: %v; a naive expansion adds %d nodes to the %d written (budget %d), endless %v; ParseFile: %v",
			refused, added, written, budget, endless, err)
	}
}

// fileJSON is an endpoints file as JSON, which is YAML.
type fileJSON struct {
	Clusters []fileClusterJSON `json:"clusters"`
}

type fileClusterJSON struct {
	Name        string             `json:"name"`
	LBPolicy    string             `json:"lb_policy,omitempty"`
	HashHeader  string             `json:"hash_header,omitempty"`
	MinRingSize uint64             `json:"minimum_ring_size,omitempty"`
	MaxRingSize uint64             `json:"maximum_ring_size,omitempty"`
	TableSize   uint64             `json:"table_size,omitempty"`
	FadeIn      *fileFadeInJSON    `json:"fade_in,omitempty"`
	Endpoints   []fileEndpointJSON `json:"endpoints"`
}

type fileFadeInJSON struct {
	Duration string  `json:"duration,omitempty"`
	Exponent float64 `json:"exponent,omitempty"`
	Capacity uint64  `json:"capacity,omitempty"`
}

type fileEndpointJSON struct {
	Address string `json:"address"`
	Port    uint32 `json:"port"`
	Weight  uint32 `json:"weight,omitempty"`
	Scheme  string `json:"scheme,omitempty"`
	Zone    string `json:"zone"`
	HashKey string `json:"hash_key"`
}

func fileClusterToJSON(c model.Cluster) fileClusterJSON {
	out := fileClusterJSON{
		Name: c.Name, LBPolicy: string(c.Policy), HashHeader: c.HashHeader,
		MinRingSize: c.MinRingSize, MaxRingSize: c.MaxRingSize, TableSize: c.TableSize,
		Endpoints: []fileEndpointJSON{},
	}
	if c.FadeIn != nil {
		out.FadeIn = &fileFadeInJSON{Exponent: c.FadeIn.Exponent, Capacity: c.FadeIn.Capacity}
		if c.FadeIn.Duration != 0 {
			out.FadeIn.Duration = c.FadeIn.Duration.String()
		}
	}
	for _, ep := range c.Endpoints {
		out.Endpoints = append(out.Endpoints, fileEndpointJSON{
			Address: ep.Address, Port: ep.Port, Weight: ep.Weight, Scheme: ep.Scheme, Zone: ep.Zone, HashKey: ep.HashKey,
		})
	}
	return out
}

// fuzzBuildLimit bounds the ring sizes of states the fuzz targets publish
// with snapshot.Build, which builds every ring: an 8M-entry ring takes a
// second, and the fuzzer would spend its time there.
const fuzzBuildLimit = 1 << 17

func fuzzSmallRings(s model.State) bool {
	for _, c := range s.Clusters {
		if c.MaxRingSize > fuzzBuildLimit || c.TableSize > fuzzBuildLimit || (c.FadeIn != nil && c.FadeIn.Capacity > fuzzBuildLimit) {
			return false
		}
	}
	return true
}

func checkAcceptedFile(t *testing.T, path string, state model.State) {
	t.Helper()
	names := map[string]bool{}
	for i := range state.Clusters {
		c := &state.Clusters[i]
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted cluster %q fails the model's checks: %v", c.Name, err)
		}
		if names[c.Name] {
			t.Fatalf("accepted two clusters named %q", c.Name)
		}
		names[c.Name] = true
		if i > 0 && state.Clusters[i-1].Name > c.Name {
			t.Fatalf("clusters not sorted: %q before %q", state.Clusters[i-1].Name, c.Name)
		}
	}
	// An empty list, not null: a file naming no clusters list at all is
	// refused on purpose (a truncated file must not withdraw everything),
	// while "clusters: []" is accepted.
	out := fileJSON{Clusters: []fileClusterJSON{}}
	for _, c := range state.Clusters {
		out.Clusters = append(out.Clusters, fileClusterToJSON(c))
	}
	written, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseFile(path, written)
	if err != nil {
		t.Fatalf("the accepted state, written out as\n%s\nis refused: %v", written, err)
	}
	if !reflect.DeepEqual(again, state) {
		t.Fatalf("the accepted state, written out as\n%s\nparses to\n%+v\nnot\n%+v", written, again, state)
	}
	if fuzzSmallRings(state) {
		if _, err := snapshot.Build(state, time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)); err != nil {
			t.Fatalf("an accepted file cannot be published: %v", err)
		}
	}
}

// fileItemSeeds are pairs of versions of a file, the second a change of
// the first, in the layouts the item-by-item parse reads and in the ones
// it must leave to ParseFile.
func fileItemSeeds() [][2]string {
	const a = "  - name: a\n    endpoints:\n      - {address: 10.0.0.1, port: 80}\n"
	const b = "  - name: b\n    lb_policy: maglev\n    endpoints:\n      - address: 10.0.0.2\n        port: 81\n"
	const c = "  - name: c\n    fade_in: {duration: 5s}\n    endpoints: [{address: \"fd00::1\", port: 82, zone: z}]\n"
	example := string(examples.DefaultEndpoints)
	return [][2]string{
		{"clusters:\n" + a + b + c, "clusters:\n" + a + strings.Replace(b, "81", "91", 1) + c},
		{"# written by a tool\nclusters:   # all of them\n" + a + "\n# b next\n" + b, "# written by a tool\nclusters:\n" + b + a},
		{example, strings.Replace(example, "port: 9103", "port: 9104", 1)},
		{example, strings.Replace(example, "- name: inventory", "- name: products", 1)},
		{"clusters:\n- name: a\n  endpoints: [{address: 10.0.0.1, port: 80}]\n- name: b\n  endpoints: [{address: 10.0.0.2, port: 80}]\n",
			"clusters:\n- name: a\n  endpoints: [{address: 10.0.0.1, port: 80}]\n- name: b\n  endpoints: [{address: 10.0.0.2, port: 0}]\n"},
		{"clusters:\n" + a + b, "clusters:\n" + a + a},
		{"clusters:\n" + a + b, "clusters:\n" + a + "  - name: \"b\n  - c\"\n    endpoints: [{address: 10.0.0.2, port: 80}]\n"},
		{"clusters:\n" + a + b, "clusters:\n" + a + "  - {name: b, endpoints: [\n  - {address: 10.0.0.2, port: 80}]}\n"},
		{"clusters:\n" + a + b, "clusters:\n" + a + "  - name: b\n    hash_key: |\n      x\n\n  - name: c\n"},
		{"clusters:\n" + a + b, "clusters:\n" + a + "  - &b\n    name: b\n    endpoints: [{address: 10.0.0.2, port: 80}]\n"},
		{"clusters:\n" + a + b, "clusters:\n" + a + b + "other: 1\n"},
		{"clusters:\n" + a + b, "clusters:\n" + a + b + "---\nclusters: []\n"},
		{"clusters:\n" + a + b, "clusters:\r\n" + strings.ReplaceAll(a+b, "\n", "\r\n")},
		{"clusters:\n" + a, `{"clusters": [{"name": "a", "endpoints": [{"address": "10.0.0.1", "port": 80}]}]}`},
	}
}

// FuzzParseFileItems parses a file item by item after a previous version
// of it, as FileSource does on a reload, and requires exactly what
// ParseFile gives: the same state, or the same problems at the same
// places. The previous version decides only what is reused.
func FuzzParseFileItems(f *testing.F) {
	for _, s := range fileItemSeeds() {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, prev, data []byte) {
		const path = "endpoints.yaml"
		var items fileItems
		_, _ = items.parse(path, prev)
		want, wantErr := ParseFile(path, data)
		for _, round := range []string{"after the previous version", "after itself"} {
			got, err := items.parse(path, data)
			if fmt.Sprint(err) != fmt.Sprint(wantErr) {
				t.Fatalf("%s, item by item:\n%v\nParseFile:\n%v", round, err, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s, item by item:\n%+v\nParseFile:\n%+v", round, got, want)
			}
		}
	})
}
