//go:build unix

package watch_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/watch"
)

// fileLoadBounded runs Load in the background and fails the test, rather
// than hanging it, if Load blocks.
func fileLoadBounded(t *testing.T, src *watch.FileSource) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := src.Load()
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(fileWait):
		t.Fatal("Load blocked")
		return nil
	}
}

func TestFileNamedPipeIsRefusedWithoutBlocking(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, fileYAML(80))
	r := fileStart(t, path, fileTestDebounce)
	fileExpectPorts(t, r.next(t), 80)

	// A pipe with no writer: reading it would wait for good.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	r.waitProblems(t, func(ps []watch.Problem) bool {
		return len(ps) == 1 && strings.HasPrefix(ps[0].Message, "is a named pipe (FIFO), not a regular file")
	})

	// The source is not stuck: replacing the pipe is read, and nothing was
	// published in between.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	fileWrite(t, path, fileYAML(80, 81))
	fileExpectPorts(t, r.next(t), 80, 81)

	src, err := watch.NewFileSource(path, watch.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fileLoadBounded(t, src); err == nil || !strings.Contains(err.Error(), path+": is a named pipe (FIFO), not a regular file") {
		t.Errorf("Load of a pipe: %v", err)
	}
}

func TestFileDirectoryInPlaceOfTheFileIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := watch.NewFileSource(path, watch.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fileLoadBounded(t, src); err == nil || !strings.Contains(err.Error(), "is a directory, not a regular file") {
		t.Errorf("Load of a directory: %v", err)
	}
}

func TestFileOverTheSizeLimitIsRefusedUnread(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, fileYAML(80))
	r := fileStart(t, path, fileTestDebounce)
	fileExpectPorts(t, r.next(t), 80)

	// A sparse file one byte over the limit: reading it whole would
	// allocate 16 MiB and parsing it far more. It is extended through an
	// open descriptor, as truncate(1) does; truncate(2) on the path would
	// be a write never closed (see TestFileHeldOpenPastTheWaitIsReadAsItStands).
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(watch.DefaultFileMaxSize + 1); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ps := r.waitProblems(t, func(ps []watch.Problem) bool { return len(ps) > 0 })
	want := "the file is 16.0 MiB (16777217 bytes), over the limit of 16.0 MiB (16777216 bytes)"
	if len(ps) != 1 || !strings.HasPrefix(ps[0].Message, want) {
		t.Errorf("problems %+v, want one starting %q", ps, want)
	}
	src, err := watch.NewFileSource(path, watch.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if alloc := fileAllocated(func() { _ = fileLoadBounded(t, src) }); alloc > 1<<20 {
		t.Errorf("refusing the file allocated %d KiB: it was read", alloc>>10)
	}

	fileWrite(t, path, fileYAML(80, 81))
	fileExpectPorts(t, r.next(t), 80, 81)
}

func TestFileMaxSizeOption(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	content := fileYAML(80)
	fileWrite(t, path, content)
	for _, tc := range []struct {
		max int64
		ok  bool
	}{{int64(len(content)), true}, {int64(len(content)) - 1, false}} {
		src, err := watch.NewFileSource(path, watch.FileOptions{MaxSize: tc.max})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.Load(); (err == nil) != tc.ok {
			t.Errorf("MaxSize %d on a %d-byte file: Load = %v", tc.max, len(content), err)
		}
		mem, err := watch.NewFileSourceFromBytes("builtin.yaml", []byte(content), watch.FileOptions{MaxSize: tc.max})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mem.Load(); (err == nil) != tc.ok {
			t.Errorf("MaxSize %d on %d bytes in memory: Load = %v", tc.max, len(content), err)
		}
	}
	if _, err := watch.NewFileSource(path, watch.FileOptions{MaxSize: -1}); err == nil {
		t.Error("a negative MaxSize was accepted")
	}
}
