package watch

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/model"
)

// fileItemsOf returns the items fileParseItems made of data after last,
// failing the test if it left data to ParseFile.
func fileItemsOf(t *testing.T, data string, last map[string]*fileItem) map[string]*fileItem {
	t.Helper()
	st, items, ok := fileParseItems([]byte(data), last)
	if !ok {
		t.Fatalf("not parsed item by item:\n%s", data)
	}
	want, err := ParseFile("f.yaml", []byte(data))
	if err != nil || !reflect.DeepEqual(st, want) {
		t.Fatalf("item by item: %+v\nParseFile: %+v, %v", st, want, err)
	}
	return items
}

func TestFileItemsReuseTheClustersThatDidNotChange(t *testing.T) {
	const head = "# generated\nclusters:\n"
	const a = "  - name: a\n    endpoints: [{address: 10.0.0.1, port: 80}]\n"
	const b = "  - name: b\n    endpoints: [{address: 10.0.0.2, port: 80}]\n"
	const c = "  - name: c\n    endpoints: [{address: 10.0.0.3, port: 80}]\n"
	first := fileItemsOf(t, head+a+b+c, nil)
	if len(first) != 3 {
		t.Fatalf("%d items, want 3", len(first))
	}
	// b changes and moves first, with a comment after it; a and c stay.
	b2 := strings.Replace(b, "port: 80", "port: 81", 1)
	second := fileItemsOf(t, head+b2+"# moved\n"+a+c, first)
	if second[a] != first[a] || second[c] != first[c] {
		t.Errorf("clusters a and c, unchanged, were parsed again")
	}
	// An item runs to the next one, comments included.
	if got := second[b2+"# moved\n"]; got == nil || got.cluster.Endpoints[0].Port != 81 {
		t.Errorf("items %v, want b with its new port and the comment after it", second)
	}
}

// The item-by-item parse reads the layouts docs/file-source.md shows and
// leaves everything else to ParseFile; either way the result is
// ParseFile's.
func TestFileItemsReadOnlyThePlainLayout(t *testing.T) {
	const a = "  - name: a\n    endpoints: [{address: 10.0.0.1, port: 80}]\n"
	const b = "  - name: b\n    endpoints:\n      - address: 10.0.0.2\n        port: 80\n"
	tests := []struct {
		name  string
		file  string
		items bool
	}{
		{"the example", string(examples.DefaultEndpoints), true},
		{"block items", "clusters:\n" + a + b, true},
		{"items at the left margin", "clusters:\n- name: a\n  endpoints: [{address: 10.0.0.1, port: 80}]\n", true},
		{"comments and blank lines", "\n# head\nclusters: # list\n# before\n" + a + "\n# between\n" + b + "# after\n", true},
		{"CRLF line ends", strings.ReplaceAll("clusters:\n"+a+b, "\n", "\r\n"), true},
		{"no final newline", strings.TrimSuffix("clusters:\n"+a+b, "\n"), true},
		{"JSON", `{"clusters": [{"name": "a", "endpoints": [{"address": "10.0.0.1", "port": 80}]}]}`, false},
		{"flow list", "clusters: [{name: a, endpoints: [{address: 10.0.0.1, port: 80}]}]\n", false},
		{"empty list", "clusters: []\n", false},
		{"no list", "clusters:\n", false},
		{"tagged list", "clusters: !!seq\n" + a, false},
		{"anchored list", "clusters: &all\n" + a, false},
		{"anchor in an item", "clusters:\n  - &a\n    name: a\n    endpoints: [{address: 10.0.0.1, port: 80}]\n", false},
		{"alias to another item", "clusters:\n  - name: a\n    endpoints: &e [{address: 10.0.0.1, port: 80}]\n  - name: b\n    endpoints: *e\n", false},
		{"block scalar", "clusters:\n" + a + "  - name: >\n      b\n    endpoints: [{address: 10.0.0.2, port: 80}]\n", false},
		{"another top-level key", "clusters:\n" + a + "more: 1\n", false},
		{"quoted key", "\"clusters\":\n" + a, false},
		{"indented key", " clusters:\n" + a, false},
		{"document start", "---\nclusters:\n" + a, false},
		{"second document", "clusters:\n" + a + "---\nclusters:\n" + b, false},
		{"directive", "%YAML 1.1\n---\nclusters:\n" + a, false},
		{"items at two indentations", "clusters:\n" + a + "   - name: b\n", false},
		{"an item less indented", "clusters:\n" + a + "- name: b\n  endpoints: [{address: 10.0.0.2, port: 80}]\n", false},
		{"a line at the items' indentation", "clusters:\n" + a + "  name: b\n", false},
		{"a flow mapping across items", "clusters:\n  - {name: a, endpoints: [\n  - {address: 10.0.0.1, port: 80}]}\n", false},
		{"a quoted scalar across items", "clusters:\n  - name: \"a\n  - b\"\n    endpoints: [{address: 10.0.0.1, port: 80}]\n", false},
		{"an invalid cluster", "clusters:\n" + a + strings.Replace(b, "port: 80", "port: 0", 1), false},
		{"one name twice", "clusters:\n" + a + strings.Replace(b, "name: b", "name: a", 1), false},
		{"one item twice", "clusters:\n" + a + a, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.file)
			_, _, ok := fileParseItems(data, nil)
			if ok != tc.items {
				t.Errorf("parsed item by item: %v, want %v", ok, tc.items)
			}
			var items fileItems
			got, err := items.parse("f.yaml", data)
			want, wantErr := ParseFile("f.yaml", data)
			if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
				t.Errorf("item by item: %+v, %v\nParseFile: %+v, %v", got, err, want, wantErr)
			}
		})
	}
}

// FileSource parses every cluster on its first load and, on a reload, only
// those that changed.
func TestFileSourceReparsesOnlyChangedClusters(t *testing.T) {
	const a = "  - name: a\n    endpoints: [{address: 10.0.0.1, port: 80}]\n"
	const b = "  - name: b\n    endpoints: [{address: 10.0.0.2, port: 80}]\n"
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	src, err := NewFileSource(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	load := func(content string) map[string]*fileItem {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := src.Load(); err != nil {
			t.Fatal(err)
		}
		return src.items.last
	}
	first := load("clusters:\n" + a + b)
	if len(first) != 2 {
		t.Fatalf("first load kept %d items, want 2", len(first))
	}
	b2 := strings.Replace(b, "port: 80", "port: 81", 1)
	second := load("clusters:\n" + a + b2)
	if second[a] != first[a] || second[b2] == nil {
		t.Errorf("the reload did not reuse a and parse b: %v after %v", second, first)
	}
	// An invalid version keeps the items of the last valid one.
	if err := os.WriteFile(path, []byte("clusters:\n"+a+"  - name: b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Load(); err == nil {
		t.Fatal("an invalid file loaded")
	}
	if third := load("clusters:\n" + a + b2); third[a] != first[a] || third[b2] != second[b2] {
		t.Errorf("after an invalid version the items were parsed again")
	}
}

// fileSmallDecimal reads the integers of a file, and only where YAML
// reads them the same way.
func TestFileSmallDecimalAgreesWithYAML(t *testing.T) {
	for _, s := range []string{"1", "80", "65535", "4294967296", "999999999999999999", "9999999999999999999",
		"0", "00", "01", "0123", "1_000", "+1", "-1", "0x10", "0o7", "0b1", "1e3", "1.0", "12a", ""} {
		var want int64
		yamlErr := yaml.Unmarshal([]byte("!!int "+s), &want)
		got, ok := fileSmallDecimal(s)
		if ok && (yamlErr != nil || got != want) {
			t.Errorf("fileSmallDecimal(%q) = %d; YAML reads %d, %v", s, got, want, yamlErr)
		}
	}
	// The values of every file are read without a decoder.
	for _, s := range []string{"1", "80", "65535", "5000011"} {
		if _, ok := fileSmallDecimal(s); !ok {
			t.Errorf("fileSmallDecimal(%q) leaves it to Decode", s)
		}
	}
}

// A state Load returns is the caller's: changing it alters neither the
// clusters kept for the next reload nor FirstSeen.
func TestFileSourceStatesShareNothingWithWhatItKeeps(t *testing.T) {
	const a = "  - name: a\n    endpoints: [{address: 10.0.0.1, port: 80}, {address: 10.0.0.2, port: 80}]\n"
	const b = "  - name: b\n    endpoints: [{address: 10.0.1.1, port: 80}]\n"
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	src, err := NewFileSource(path, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	load := func(content string) model.State {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := src.Load()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	spoil := func(st model.State) {
		for i := range st.Clusters {
			for j := range st.Clusters[i].Endpoints {
				st.Clusters[i].Endpoints[j].Port = 1
				st.Clusters[i].Endpoints[j].FirstSeen = time.Unix(1, 0)
			}
		}
	}
	spoil(load("clusters:\n" + a + b))
	// b changes; a is reused from the items and kept from the last state.
	spoil(load("clusters:\n" + a + strings.Replace(b, "port: 80", "port: 81", 1)))
	st := load("clusters:\n" + a + b)
	// a's endpoints were there from the first load: established. b's came
	// back with this one: new.
	for _, ep := range st.Clusters[0].Endpoints {
		if ep.Port != 80 || !ep.FirstSeen.IsZero() {
			t.Errorf("cluster a has %s first seen %v, want port 80 established", ep.HostPort(), ep.FirstSeen)
		}
	}
	if ep := st.Clusters[1].Endpoints[0]; ep.Port != 80 || !ep.FirstSeen.Equal(st.ChangedAt) {
		t.Errorf("cluster b has %s first seen %v, want port 80 first seen now (%v)", ep.HostPort(), ep.FirstSeen, st.ChangedAt)
	}
}
