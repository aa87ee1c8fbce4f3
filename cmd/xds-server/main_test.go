package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer lets the test read what run prints while run is still going.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func loopback(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The embedded default is what `make run` serves: it must come up ready,
// answer picks for every example cluster, and say where to look.
func TestRunServesEmbeddedDefault(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	lis := &listeners{xds: loopback(t), debug: loopback(t)}
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--log-level=warn"}, out, lis) }()
	base := "http://" + lis.debug.Addr().String()

	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not ready within 10 s (last error %v); output:\n%s", err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, cluster := range []string{"products", "inventory", "catalog"} {
		resp, err := http.Get(base + "/debug/pick?cluster=" + cluster + "&key=k-1")
		if err != nil {
			t.Fatal(err)
		}
		var res struct{ Endpoint, Policy string }
		_ = json.NewDecoder(resp.Body).Decode(&res)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(res.Endpoint, "127.0.0.1:") {
			t.Fatalf("pick in %s: status %d, %+v", cluster, resp.StatusCode, res)
		}
	}
	for _, want := range []string{lis.xds.Addr().String(), "http://" + lis.debug.Addr().String() + "/", "embedded examples/endpoints.yaml", "plaintext",
		"/debug/pick?cluster=products&", "built into the binary", "--file endpoints.yaml"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("start-up message does not mention %q:\n%s", want, out.String())
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop within 10 s of cancel")
	}
}

func TestHelpListsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"--help"}, &out, nil)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help returned %v", err)
	}
	for _, f := range []string{"-file", "-xds-addr", "-debug-addr", "-log-level", "-tls-cert", "-tls-key", "-tls-client-ca", "-source", "-kubeconfig", "-namespace", "-service-selector", "-kube-max-ring-size", "-debounce", "127.0.0.1:18000", "127.0.0.1:18080"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not list %s", f)
		}
	}
}

func TestStartupErrorsAreClear(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(bad, []byte("clusters:\n  - name: a\n    lb_policy: round_robin\n    endpoints: [{address: 10.0.0.1, port: 80}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--file", bad}, []string{"endpoints.yaml", "3", "lb_policy", "round_robin"}},
		{[]string{"--file", filepath.Join(t.TempDir(), "missing.yaml")}, []string{"missing.yaml"}},
		{[]string{"--source", "consul"}, []string{"--source", "consul"}},
		{[]string{"--log-level", "loud"}, []string{"--log-level"}},
		{[]string{"--tls-cert", "/nonexistent.pem"}, []string{"--tls-cert and --tls-key"}},
		{[]string{"--source", "kubernetes", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, []string{"kubeconfig"}},
		{[]string{"stray"}, []string{"unexpected arguments"}},
	} {
		err := run(context.Background(), append(tc.args, "--xds-addr=127.0.0.1:0", "--debug-addr=127.0.0.1:0"), io.Discard, nil)
		if err == nil {
			t.Errorf("%v: no error", tc.args)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not mention %q", tc.args, err, w)
			}
		}
	}
}
