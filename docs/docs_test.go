package docs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ringxds/ringxds/internal/watch"
)

// block is one fenced code block of a Markdown file.
type block struct {
	file, lang, text string
	line             int
	// wrong: the line before the block is a comment starting with
	// wrongMark, for an example that shows a mistake.
	wrong bool
}

// wrongMark starts the comment that marks an example wrong on purpose.
const wrongMark = "<!-- Wrong on purpose"

// pages are the Markdown files a newcomer follows: the README and every
// page it links, the example READMEs included.
func pages(t *testing.T) []string {
	t.Helper()
	files := []string{"../README.md"}
	for _, glob := range []string{"*.md", "../examples/*/README.md"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

// fenceRE matches an opening fence, indented too (a block in a list).
var fenceRE = regexp.MustCompile("(?m)^[ \t]*```([a-z]*)[ \t]*\n")

// blocks returns the fenced blocks of the given language in files.
func blocks(t *testing.T, lang string) []block {
	t.Helper()
	var out []block
	for _, f := range pages(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for pos := 0; ; {
			m := fenceRE.FindStringSubmatchIndex(text[pos:])
			if m == nil {
				break
			}
			start := pos + m[1]
			end := closingFence(text[start:])
			if end < 0 {
				t.Fatalf("%s: a code block that never closes", f)
			}
			if text[pos+m[2]:pos+m[3]] == lang {
				before := strings.TrimSuffix(text[:pos+m[0]], "\n")
				wrong := strings.HasPrefix(before[strings.LastIndexByte(before, '\n')+1:], wrongMark)
				out = append(out, block{file: f, lang: lang, text: text[start : start+end+1], line: strings.Count(text[:start], "\n") + 1, wrong: wrong})
			}
			// Past the closing fence's line.
			pos = start + end + 1
			if nl := strings.IndexByte(text[pos:], '\n'); nl >= 0 {
				pos += nl + 1
			} else {
				pos = len(text)
			}
		}
	}
	return out
}

// closingFence returns the index of the newline that ends the last line of
// the block text begins, the one before its closing fence (indented or not),
// or -1.
func closingFence(text string) int {
	for i := 0; i < len(text); {
		nl := strings.IndexByte(text[i:], '\n')
		if nl < 0 {
			return -1
		}
		next := i + nl + 1
		if strings.HasPrefix(strings.TrimLeft(text[next:], " \t"), "```") {
			return i + nl
		}
		i = next
	}
	return -1
}

// TestReadmeGoSnippetsCompile writes every Go snippet of the README and
// docs/ into a module of its own that requires this repository (by a
// replace directive) and builds and vets it: a snippet must compile as a
// newcomer pastes it.
func TestReadmeGoSnippetsCompile(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	snippets := blocks(t, "go")
	if len(snippets) == 0 {
		t.Fatal("no Go snippet found: the README's clientlib example is gone")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := fmt.Sprintf("module snippets\n\ngo 1.26\n\nrequire github.com/ringxds/ringxds v0.0.0\n\nreplace github.com/ringxds/ringxds => %s\n", root)
	write(t, filepath.Join(dir, "go.mod"), gomod)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "go.sum"), string(sum))
	where := map[string]string{}
	for i, s := range snippets {
		if !strings.Contains(s.text, "package main") {
			t.Errorf("%s:%d: a Go snippet that is no complete program (package main): it cannot compile as pasted", s.file, s.line)
			continue
		}
		pkg := fmt.Sprintf("snippet%d", i)
		where[pkg] = fmt.Sprintf("%s:%d", s.file, s.line)
		write(t, filepath.Join(dir, pkg, "main.go"), s.text)
	}
	for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		// Everything the snippets import is in this module's build list:
		// no network, no toolchain switch.
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
		out, err := cmd.CombinedOutput()
		if err != nil {
			msg := string(out)
			for pkg, w := range where {
				msg = strings.ReplaceAll(msg, pkg+"/main.go", w+" (snippet)")
			}
			t.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
		}
	}
	// The README shows how to fetch the library before the code.
	readme, _ := os.ReadFile("../README.md")
	if !bytes.Contains(readme, []byte("go get github.com/ringxds/ringxds/clientlib")) {
		t.Error("the README has no go get line for clientlib")
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// knownAnnotations are the ringxds.io annotations a Service may carry.
var knownAnnotations = map[string]bool{
	watch.AnnotationEnabled: true, watch.AnnotationLBPolicy: true, watch.AnnotationHashHeader: true,
	watch.AnnotationRingSize: true, watch.AnnotationMinRingSize: true, watch.AnnotationMaxRingSize: true,
	watch.AnnotationTableSize: true, watch.AnnotationFadeIn: true, watch.AnnotationFadeInCapacity: true,
	watch.AnnotationPort: true, watch.AnnotationHashKey: true, watch.AnnotationReaders: true,
}

// TestDocYAMLExamplesLoad loads every YAML example of the README and
// docs/: an endpoints file (a top-level clusters list) must load as the
// file source loads it; a Kubernetes manifest must parse, name its kind,
// and use only annotations ringxds knows.
func TestDocYAMLExamplesLoad(t *testing.T) {
	endpointFiles := 0
	for _, b := range blocks(t, "yaml") {
		where := fmt.Sprintf("%s:%d", b.file, b.line)
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(b.text), &doc); err != nil {
			t.Errorf("%s: not YAML: %v", where, err)
			continue
		}
		switch {
		case doc["clusters"] != nil:
			endpointFiles++
			// Positions in errors are within the block, which starts at line b.line.
			_, err := watch.ParseFile(fmt.Sprintf("%s (block at line %d)", b.file, b.line), []byte(b.text))
			switch {
			case b.wrong && err == nil:
				t.Errorf("%s: the example marked wrong on purpose loads", where)
			case !b.wrong && err != nil:
				t.Errorf("%s: the endpoints file example does not load:\n%v", where, err)
			}
		case doc["apiVersion"] != nil && doc["kind"] != nil:
			md, _ := doc["metadata"].(map[string]any)
			ann, _ := md["annotations"].(map[string]any)
			for k := range ann {
				if strings.HasPrefix(k, "ringxds.io/") && !knownAnnotations[k] {
					t.Errorf("%s: unknown annotation %s", where, k)
				}
			}
		default:
			t.Errorf("%s: a YAML example that is neither an endpoints file nor a Kubernetes object; teach this test what it is", where)
		}
	}
	if endpointFiles == 0 {
		t.Error("no endpoints file example found")
	}
}

// TestDocJSONExamplesParse parses every JSON example (bootstraps, API
// answers) of the README and docs/.
func TestDocJSONExamplesParse(t *testing.T) {
	for _, b := range blocks(t, "json") {
		var v any
		if err := json.Unmarshal([]byte(b.text), &v); err != nil {
			t.Errorf("%s:%d: not JSON: %v", b.file, b.line, err)
		}
	}
}

// The extraction finds the blocks of each kind the pages hold, indented
// ones in lists included.
func TestBlocksAreFound(t *testing.T) {
	for lang, atLeast := range map[string]int{"go": 3, "yaml": 3, "json": 1, "sh": 10} {
		if n := len(blocks(t, lang)); n < atLeast {
			t.Errorf("%d %s blocks found, want at least %d", n, lang, atLeast)
		}
	}
}
