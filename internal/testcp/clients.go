package testcp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// LineClient is a real proxyless gRPC client of another language running
// as a child process: it routes each key written to its stdin and answers
// "key<TAB>backend" (or "key<TAB>!error") per line.
type LineClient struct {
	t     testing.TB
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	// stderr keeps what the client logged, shown when the test fails.
	stderr  *syncBuffer
	exited  chan struct{}
	waitErr error
}

// NodeModules returns the node_modules directory holding the pinned
// grpc-js packages (hack/node-clients.sh installs them and make test sets
// RINGXDS_NODE_MODULES). Without it the test is skipped, or fails when
// RINGXDS_REQUIRE_NODE=1, as in make test.
func NodeModules(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("RINGXDS_NODE_MODULES")
	_, nodeErr := exec.LookPath("node")
	var why string
	switch {
	case dir == "":
		why = "RINGXDS_NODE_MODULES is not set (make test installs grpc-js with hack/node-clients.sh)"
	case nodeErr != nil:
		why = "node is not on PATH"
	default:
		if _, err := os.Stat(filepath.Join(dir, "@grpc", "grpc-js-xds", "package.json")); err != nil {
			why = fmt.Sprintf("no @grpc/grpc-js-xds in %s: %v", dir, err)
		}
	}
	if why == "" {
		return dir
	}
	if os.Getenv("RINGXDS_REQUIRE_NODE") == "1" {
		t.Fatalf("grpc-js client unavailable: %s", why)
	}
	t.Skipf("grpc-js client unavailable: %s", why)
	return ""
}

// RepoFile returns the path of a file of the repository, for tests that
// run the examples.
func RepoFile(rel string) string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..", filepath.FromSlash(rel))
}

// Bootstrap returns an xDS bootstrap naming xdsAddr, for a node whose id
// names the test. metadata, if not nil, is the node's metadata. The node
// has an empty locality, which grpc-js-xds requires.
func Bootstrap(t testing.TB, xdsAddr, prefix string, metadata map[string]any) string {
	t.Helper()
	node := map[string]any{"id": prefix + "-" + strings.ReplaceAll(t.Name(), "/", "-"), "locality": map[string]any{}}
	if metadata != nil {
		node["metadata"] = metadata
	}
	b, err := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{"server_uri": xdsAddr, "channel_creds": []any{map[string]string{"type": "insecure"}}, "server_features": []string{"xds_v3"}}},
		"node":        node,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// StartNodeClient starts a grpc-js client dialing xds:///target through the
// xDS server at xdsAddr, hashing header. It is stopped at cleanup.
func StartNodeClient(t testing.TB, xdsAddr, target, header string) *LineClient {
	t.Helper()
	modules := NodeModules(t)
	cmd := exec.Command("node", RepoFile("examples/grpc-node/client.js"), "--lines", "--target", target, "--header", header)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "GRPC_XDS_BOOTSTRAP_CONFIG="+Bootstrap(t, xdsAddr, "test-node", nil))
	return startLineClient(t, cmd, "grpc-js")
}

// startLineClient starts cmd and reads its answers; it is stopped at
// cleanup, and its stderr is logged if the test failed.
func startLineClient(t testing.TB, cmd *exec.Cmd, name string) *LineClient {
	t.Helper()
	c := &LineClient{t: t, name: name, cmd: cmd, lines: make(chan string, 1024), stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = c.stderr
	var err error
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the %s client: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		// Wait closes stdout, so it comes after the last read.
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		_ = c.stdin.Close()
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-c.exited
		}
		if t.Failed() {
			t.Logf("%s client log (last lines):\n%s", name, lastLines(c.stderr.String(), 40))
		}
	})
	return c
}

// Stderr is what the client has logged so far.
func (c *LineClient) Stderr() string { return c.stderr.String() }

// Exited returns a channel closed when the client process has exited, and
// then its exit error (nil, or an *exec.ExitError).
func (c *LineClient) Exited() (<-chan struct{}, func() error) {
	return c.exited, func() error { return c.waitErr }
}

// ErrRPC marks a key the client could not route.
var ErrRPC = errors.New("RPC failed")

// Route sends keys through the client and returns the backend each went
// to. A failed RPC is an error naming the key and the gRPC status.
func (c *LineClient) Route(keys []string) (map[string]string, error) {
	go func() {
		var b strings.Builder
		for _, k := range keys {
			b.WriteString(k)
			b.WriteByte('\n')
		}
		_, _ = io.WriteString(c.stdin, b.String())
	}()
	out := make(map[string]string, len(keys))
	var errs []error
	timeout := time.After(time.Duration(len(keys))*50*time.Millisecond + 30*time.Second)
	for range keys {
		select {
		case line, ok := <-c.lines:
			if !ok {
				return nil, fmt.Errorf("the %s client exited: %s", c.name, lastLines(c.stderr.String(), 5))
			}
			key, backend, _ := strings.Cut(line, "\t")
			if msg, failed := strings.CutPrefix(backend, "!"); failed {
				errs = append(errs, fmt.Errorf("%s %w: key %s: %s", c.name, ErrRPC, key, msg))
				continue
			}
			out[key] = backend
		case <-timeout:
			return nil, fmt.Errorf("the %s client answered %d of %d keys in time", c.name, len(out)+len(errs), len(keys))
		}
	}
	return out, errors.Join(errs...)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// syncBuffer is a bytes.Buffer safe for a process writing while a test
// reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// PythonGRPC returns the Python interpreter whose grpc module is gRPC
// C-core (Debian's python3-grpcio; make test installs it). Without it the
// test is skipped, or fails when RINGXDS_REQUIRE_PYGRPC=1, as in make test.
func PythonGRPC(t testing.TB) string {
	t.Helper()
	const python = "/usr/bin/python3"
	out, err := exec.Command(python, "-c", "import grpc; print(grpc.__version__)").CombinedOutput()
	if err == nil {
		return python
	}
	why := fmt.Sprintf("%s cannot import grpc (install Debian's python3-grpcio): %v: %s", python, err, lastLines(string(out), 2))
	if os.Getenv("RINGXDS_REQUIRE_PYGRPC") == "1" {
		t.Fatalf("gRPC C-core client unavailable: %s", why)
	}
	t.Skipf("gRPC C-core client unavailable: %s", why)
	return ""
}

// StartCCoreClient starts a Python client on gRPC C-core dialing
// xds:///target through the xDS server at xdsAddr, hashing header, with
// C-core's xDS client trace on stderr (the "parsed Cluster" lines say what
// policy it runs). metadata, if not nil, is the node's metadata.
func StartCCoreClient(t testing.TB, xdsAddr, target, header string, metadata map[string]any) *LineClient {
	t.Helper()
	python := PythonGRPC(t)
	cmd := exec.Command(python, RepoFile("internal/testcp/testdata/ccore_client.py"), target, header)
	cmd.Env = append(os.Environ(),
		"GRPC_XDS_BOOTSTRAP_CONFIG="+Bootstrap(t, xdsAddr, "test-ccore", metadata),
		"GRPC_TRACE=xds_client,cds_lb", "GRPC_VERBOSITY=INFO")
	return startLineClient(t, cmd, "c-core")
}
