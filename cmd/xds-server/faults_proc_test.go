package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/server"
)

// serveEnv, set to 1, makes the test binary run the server's main instead
// of the tests, so that a test can run the real server as a process of its
// own and kill it with SIGKILL, which an in-process run cannot survive.
const serveEnv = "RINGXDS_TEST_SERVE_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serverProc is xds-server running as a child process of the test.
type serverProc struct {
	t        *testing.T
	cmd      *exec.Cmd
	out      *syncBuffer
	exited   chan struct{}
	waitErr  error
	killed   bool
	xdsAddr  string
	debugURL string
}

// startServerProc runs main with args plus --xds-addr and --debug-addr in
// a child process and waits until /readyz answers 200. The child is
// stopped at cleanup (SIGTERM, so that a race it detected fails the test
// through its exit status), and dies with the test binary if that dies
// first.
func startServerProc(t *testing.T, xdsAddr, debugAddr string, args ...string) *serverProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append([]string{"--xds-addr=" + xdsAddr, "--debug-addr=" + debugAddr}, args...)...)
	cmd.Env = append(os.Environ(), serveEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &serverProc{t: t, cmd: cmd, out: &syncBuffer{}, exited: make(chan struct{}), xdsAddr: xdsAddr, debugURL: "http://" + debugAddr}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _ := httpGet(p.debugURL + "/readyz"); code == http.StatusOK {
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("xds-server exited before it was ready (%v):\n%s", p.waitErr, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("xds-server not ready within 30 s:\n%s", p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running reports whether the process has not exited.
func (p *serverProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL, as the OOM killer or a lost node does, and waits for
// the process to be gone.
func (p *serverProc) kill() {
	p.t.Helper()
	p.killed = true
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.t.Fatal("xds-server still running 10 s after SIGKILL")
	}
}

func (p *serverProc) stop() {
	if p.running() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			p.killed = true
			_ = p.cmd.Process.Kill()
			<-p.exited
			p.t.Errorf("xds-server ignored SIGTERM for 15 s")
		}
	}
	if !p.killed && p.waitErr != nil {
		p.t.Errorf("xds-server exited with %v:\n%s", p.waitErr, p.out.String())
	} else if p.t.Failed() {
		p.t.Logf("xds-server output:\n%s", p.out.String())
	}
}

// freeAddr returns a loopback address nothing listens on now, for a server
// that must come back on the same address after it dies.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpGet(u string) (int, []byte) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	code, body := httpGet(u)
	if code != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", u, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

// debugPicks asks /debug/pick where each key goes for a client kind.
func debugPicks(t *testing.T, base, cluster, client string, keys []string) map[string]string {
	t.Helper()
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		var res struct{ Endpoint string }
		getJSON(t, base+"/debug/pick?"+url.Values{"cluster": {cluster}, "key": {k}, "client": {client}}.Encode(), &res)
		out[k] = res.Endpoint
	}
	return out
}

// publishedVersions lists the content version of every published resource
// by kind/type/name, from /debug/snapshot.
func publishedVersions(t *testing.T, base string) map[string]string {
	t.Helper()
	var snap struct {
		Kinds map[string]map[string]map[string]struct{ Version string }
	}
	getJSON(t, base+"/debug/snapshot", &snap)
	out := map[string]string{}
	for kind, types := range snap.Kinds {
		for typ, byName := range types {
			for name, r := range byName {
				out[kind+"/"+typ+"/"+name] = r.Version
			}
		}
	}
	return out
}

// ackedVersions returns, per client kind, the version of each type the one
// stream of that kind last acknowledged, failing on a NACK or on a type
// whose last response is not acknowledged yet (ok false).
func ackedVersions(t *testing.T, base string) (acked map[string]map[string]string, ok bool) {
	t.Helper()
	var body struct{ Clients []server.ClientStatus }
	getJSON(t, base+"/debug/clients", &body)
	acked = map[string]map[string]string{}
	ok = true
	for _, c := range body.Clients {
		byType := map[string]string{}
		for typ, ts := range c.Types {
			if ts.Nacks > 0 {
				t.Fatalf("%s NACKed %s: %+v", c.Kind, typ, ts.LastNack)
			}
			if ts.SentVersion == "" || ts.AckedVersion != ts.SentVersion {
				ok = false
			}
			byType[typ] = ts.AckedVersion
		}
		if _, dup := acked[string(c.Kind)]; dup {
			t.Fatalf("two %s streams on the server", c.Kind)
		}
		acked[string(c.Kind)] = byType
	}
	return acked, ok
}

// routeAll sends one RPC per key through route and returns where each
// went; a failed RPC is an error naming the key.
func routeAll(keys []string, route func(key string) (string, error)) (map[string]string, error) {
	got := make(map[string]string, len(keys))
	var errs []error
	for _, k := range keys {
		ep, err := route(k)
		if err != nil {
			errs = append(errs, fmt.Errorf("key %s: %w", k, err))
			continue
		}
		got[k] = ep
	}
	return got, errors.Join(errs...)
}

// differences describes the keys whose endpoint in got is not the one in
// want, at most five of them.
func differences(want, got map[string]string) (int, string) {
	var n int
	var b strings.Builder
	for k, w := range want {
		if got[k] == w {
			continue
		}
		if n++; n <= 5 {
			fmt.Fprintf(&b, " %s: %s, want %s;", k, got[k], w)
		}
	}
	return n, b.String()
}

func keysN(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}
