package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/testcp"
)

// ctl runs ringxdsctl with args and returns its output and exit status.
func ctl(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code = run(ctx, args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// ctlJSON runs a command that must succeed with -o json and decodes it.
func ctlJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, errOut, code := ctl(t, append(args, "-o", "json")...)
	if code != 0 {
		t.Fatalf("ringxdsctl %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("ringxdsctl %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// pick answers offline what /debug/pick answers on a server serving the
// same file, for every data plane, cluster and key.
func TestPickMatchesDebugPick(t *testing.T) {
	file := testcp.TempFile(t, string(examples.DefaultEndpoints))
	cp := testcp.Start(t, file)
	keys := make([]string, 40)
	args := []string{"pick", "--file", file}
	for i := range keys {
		keys[i] = fmt.Sprintf("product-%d", i*7919)
		args = append(args, "--key", keys[i])
	}
	var got pickOutput
	ctlJSON(t, &got, args...)
	if len(got.Picks) != 3*len(keys) {
		t.Fatalf("%d answers, want %d (3 clusters x %d keys)", len(got.Picks), 3*len(keys), len(keys))
	}
	for _, a := range got.Picks {
		want := cp.Pick(a.Cluster, a.Key, dataplane.Clientlib)
		if !maps.Equal(a.ByClient, want.ByClient) || a.Hash != want.Hash {
			t.Errorf("%s %q: ringxdsctl %v (hash %s), /debug/pick %v (hash %s)", a.Cluster, a.Key, a.ByClient, a.Hash, want.ByClient, want.Hash)
		}
		if _, ok := got.Unpredicted[dataplane.GRPCJava]; !ok || len(a.ByClient) != len(dataplane.Predicted()) {
			t.Errorf("%s %q: answers for %v, unpredicted %v", a.Cluster, a.Key, a.ByClient, got.Unpredicted)
		}
	}

	// The table: one row per data plane, and the embedded example when no
	// file is named.
	out, _, code := ctl(t, "pick", "--cluster", "products", "--key", keys[0])
	if code != 0 || !strings.HasPrefix(out, "CLUSTER") || strings.Count(out, "\nproducts ") != len(dataplane.Predicted()) ||
		!strings.Contains(out, cp.Pick("products", keys[0], dataplane.Envoy).ByClient[dataplane.Envoy]) || !strings.Contains(out, "not predicted: grpc-java") {
		t.Errorf("table (exit %d):\n%s", code, out)
	}
}

// Mistakes are named: an unknown cluster lists the known ones, a bad file
// its line, a missing flag the usage.
func TestPickErrors(t *testing.T) {
	_, stderr, code := ctl(t, "pick", "--cluster", "prodcts", "--key", "k")
	if code != 1 || !strings.Contains(stderr, `no cluster "prodcts"; its clusters: catalog, inventory, products`) {
		t.Errorf("unknown cluster: exit %d, %s", code, stderr)
	}
	bad := writeFile(t, "bad.yaml", "clusters:\n  - name: products\n    endpoints:\n      - {address: 10.0.0.1, port: 99999}\n")
	_, stderr, code = ctl(t, "pick", "--file", bad, "--key", "k")
	if code != 1 || !strings.Contains(stderr, bad+":4:") || !strings.Contains(stderr, "port") {
		t.Errorf("bad file: exit %d, %s", code, stderr)
	}
	_, stderr, code = ctl(t, "pick", "--file", filepath.Join(t.TempDir(), "missing.yaml"), "--key", "k")
	if code != 1 || !strings.Contains(stderr, "missing.yaml: no such file") {
		t.Errorf("missing file: exit %d, %s", code, stderr)
	}
	if _, stderr, code = ctl(t, "pick", "--cluster", "products"); code != 2 || !strings.Contains(stderr, "--key is required") {
		t.Errorf("no key: exit %d, %s", code, stderr)
	}
	if _, stderr, code = ctl(t, "pick", "--key", "k", "-o", "yaml"); code != 2 || !strings.Contains(stderr, "want table or json") {
		t.Errorf("-o yaml: exit %d, %s", code, stderr)
	}
	if _, stderr, code = ctl(t, "frobnicate"); code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, %s", code, stderr)
	}
}
