//go:build linux

// Only Linux reports when a writer closes a file; elsewhere the source
// cannot wait for it (docs/file-source.md, "Files written in place").

package watch_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/watch"
)

// fileTwoClusters renders clusters a and b, each with one endpoint on port.
// The part before b is a valid file on its own: a reader that stops there
// sees a state without b.
func fileTwoClusters(port string) (partA, partB string) {
	return "clusters:\n  - name: a\n    endpoints: [{address: 10.0.0.1, port: " + port + "}]\n",
		"  - name: b\n    endpoints: [{address: 10.0.0.2, port: " + port + "}]\n"
}

func fileClusterNames(s model.State) []string {
	var out []string
	for _, c := range s.Clusters {
		out = append(out, c.Name)
	}
	return out
}

// waitLog waits until the source has logged msg, for at most max.
func (r *fileRun) waitLog(msg string, max time.Duration) bool {
	deadline := time.Now().Add(max)
	for r.logs.FilterMessageSnippet(msg).Len() == 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// The writer: it rewrites the file in place and pauses mid-file,
// for longer than the debounce, before writing the second cluster.
func TestFileWrittenInPlaceWithAPauseIsReadOnlyWhenClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	a, b := fileTwoClusters("80")
	fileWrite(t, path, a+b)
	r := fileStart(t, path, fileTestDebounce)
	if got := fileClusterNames(r.next(t)); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("first state has clusters %v", got)
	}

	a, b = fileTwoClusters("81")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(a); err != nil {
		t.Fatal(err)
	}
	// The pause lasts until the source has seen the half-written file go
	// quiet and chosen to wait, or 150 ms, the pause that made it publish
	// a state without b.
	waited := r.waitLog("waiting for the writer to close it", 150*time.Millisecond)
	if _, err := f.WriteString(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	st := r.next(t)
	if got := fileClusterNames(st); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("published clusters %v from a half-written file, want a and b", got)
	}
	fileExpectPorts(t, st, 81, 81)
	if !waited {
		t.Error("the source never logged that it waited for the writer: the pause was not seen")
	}
	select {
	case s := <-r.published:
		t.Errorf("a second state %v was published after the file was complete", fileClusterNames(s))
	case <-time.After(5 * fileTestDebounce):
	}
}

// A writer that never closes the file cannot hold reloads back for good:
// once it has been idle for the wait, the file is read as it stands, and
// the log says why.
func TestFileHeldOpenPastTheWaitIsReadAsItStands(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	a, b := fileTwoClusters("80")
	fileWrite(t, path, a+b)
	r := fileStartWith(t, path, watch.FileOptions{Debounce: fileTestDebounce},
		func(s *watch.FileSource) { watch.SetFileWriterWait(s, 4*fileTestDebounce) })
	fileExpectPorts(t, r.next(t), 80, 80)

	a, _ = fileTwoClusters("81")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(a); err != nil {
		t.Fatal(err)
	}
	st := r.next(t)
	if got := fileClusterNames(st); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("published clusters %v, want the file as it stands: a", got)
	}
	if r.logs.FilterMessageSnippet("waiting for the writer to close it").Len() != 1 ||
		r.logs.FilterMessageSnippet("idle for too long; reading it as it stands").Len() != 1 {
		t.Errorf("the log does not say the source waited, then gave up: %v", r.logs.All())
	}
}

// A complete file renamed over one still being written is what the name
// holds now: it is read without waiting for the first writer.
func TestFileRenamedOverAFileBeingWrittenIsReadAtOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "endpoints.yaml")
	a, b := fileTwoClusters("80")
	fileWrite(t, path, a+b)
	r := fileStart(t, path, fileTestDebounce)
	fileExpectPorts(t, r.next(t), 80, 80)

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, _ = fileTwoClusters("81")
	if _, err := f.WriteString(a); err != nil {
		t.Fatal(err)
	}
	if !r.waitLog("waiting for the writer to close it", fileWait) {
		t.Fatal("the source did not wait for the writer")
	}
	a, b = fileTwoClusters("82")
	tmp := filepath.Join(dir, ".endpoints.yaml.tmp")
	fileWrite(t, tmp, a+b)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	fileExpectPorts(t, r.next(t), 82, 82)
}
