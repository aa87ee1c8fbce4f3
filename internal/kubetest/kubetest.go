package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Environment variables that locate the binaries.
const (
	// EnvTestbin names the folder holding kube-apiserver, etcd and kubectl
	// (hack/testbin.sh fills it; `make testbin`).
	EnvTestbin = "RINGXDS_TESTBIN"
	// EnvRequire, set to 1, turns missing binaries into a test failure
	// instead of a skip, so CI cannot pass by skipping.
	EnvRequire = "RINGXDS_REQUIRE_TESTBIN"
)

const (
	startTimeout = 90 * time.Second
	stopTimeout  = 15 * time.Second
)

// Env is a running etcd and kube-apiserver, both on 127.0.0.1 only.
type Env struct {
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
	// Client is a clientset built from Config.
	Client kubernetes.Interface
	// Bin is the folder holding the binaries, kubectl included.
	Bin string

	dir        string
	token      string
	authz      string
	etcdURL    string
	port       int
	etcd       *exec.Cmd
	apiserver  *exec.Cmd
	apiExited  chan struct{}
	etcdExited chan struct{}
}

// Option changes how Start sets up the API server.
type Option func(*Env)

// WithRBAC has the API server authorize requests with RBAC instead of
// allowing everything, for tests of missing permissions. The admin
// credentials (Config, Kubeconfig) are in system:masters and keep every
// permission, and may impersonate users that have fewer.
func WithRBAC() Option {
	return func(e *Env) { e.authz = "RBAC" }
}

// Start starts etcd and kube-apiserver for t and stops them when t ends.
// Without binaries it skips t, or fails it when RINGXDS_REQUIRE_TESTBIN=1.
// Start-up takes about 5 s; share one Env between subtests where possible.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	bin, err := findTestbin()
	if err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("kubetest: %v (%s=1 requires the binaries; run `make testbin`)", err, EnvRequire)
		}
		t.Skipf("kubetest: %v; run `make testbin` and set %s to run this test", err, EnvTestbin)
	}
	e := &Env{Bin: bin, dir: t.TempDir(), authz: "AlwaysAllow"}
	for _, o := range opts {
		o(e)
	}
	t.Cleanup(e.stopAll)
	if err := e.startEtcd(); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	if err := e.writeAuth(); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	if e.port, err = freePort(); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	if err := e.StartAPIServer(); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	e.Config = &rest.Config{
		Host:            "https://127.0.0.1:" + strconv.Itoa(e.port),
		BearerToken:     e.token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(e.dir, "certs", "apiserver.crt")},
		QPS:             200,
		Burst:           400,
	}
	if e.Client, err = kubernetes.NewForConfig(e.Config); err != nil {
		t.Fatalf("kubetest: clientset: %v", err)
	}
	return e
}

// findTestbin locates the binaries: $RINGXDS_TESTBIN, else a .testbin folder
// in the working directory or one of its parents (the repository root when
// run by `go test ./...`).
func findTestbin() (string, error) {
	dir := os.Getenv(EnvTestbin)
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("working directory: %w", err)
		}
		for d := wd; ; d = filepath.Dir(d) {
			if fi, err := os.Stat(filepath.Join(d, ".testbin")); err == nil && fi.IsDir() {
				dir = filepath.Join(d, ".testbin")
				break
			}
			if filepath.Dir(d) == d {
				return "", fmt.Errorf("%s is not set and no .testbin folder was found above %s", EnvTestbin, wd)
			}
		}
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kubectl"} {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("%s missing from %s: %w", name, dir, err)
		}
		if fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not executable", p)
		}
	}
	return dir, nil
}

func (e *Env) startEtcd() error {
	client, err := freePort()
	if err != nil {
		return err
	}
	peer, err := freePort()
	if err != nil {
		return err
	}
	e.etcdURL = "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	cmd := exec.Command(filepath.Join(e.Bin, "etcd"),
		"--name=kubetest",
		"--data-dir="+filepath.Join(e.dir, "etcd"),
		"--listen-client-urls="+e.etcdURL,
		"--advertise-client-urls="+e.etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL,
		// Test data is thrown away; skipping fsync saves seconds per test
		// on a busy disk.
		"--unsafe-no-fsync=true",
	)
	exited, err := e.launch(cmd, "etcd.log")
	if err != nil {
		return err
	}
	e.etcd, e.etcdExited = cmd, exited
	if err := waitHTTP(e.etcdURL+"/health", "", nil, exited); err != nil {
		return fmt.Errorf("etcd did not become healthy: %w\n%s", err, e.tail("etcd.log"))
	}
	return nil
}

// writeAuth writes the bearer token file and the service-account key the
// API server insists on, once, so that a restarted API server accepts the
// same credentials.
func (e *Env) writeAuth() error {
	buf := make([]byte, 16)
	if _, err := rand.Read(buf); err != nil {
		return fmt.Errorf("token: %w", err)
	}
	e.token = hex.EncodeToString(buf)
	line := e.token + `,kubetest-admin,kubetest-admin,"system:masters"` + "\n"
	if err := os.WriteFile(filepath.Join(e.dir, "tokens.csv"), []byte(line), 0o600); err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(filepath.Join(e.dir, "sa.key"), pemKey, 0o600); err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	return nil
}

// StartAPIServer starts kube-apiserver (again) on the same port, etcd and
// certificates, and waits until it is ready. Start calls it once; tests of
// API server outages call it after StopAPIServer.
func (e *Env) StartAPIServer() error {
	if e.apiserver != nil {
		return errors.New("kube-apiserver is already running")
	}
	cmd := exec.Command(filepath.Join(e.Bin, "kube-apiserver"),
		"--etcd-servers="+e.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// v1.37 refuses a loopback advertise address with the default
		// endpoint reconciler.
		"--endpoint-reconciler-type=none",
		"--secure-port="+strconv.Itoa(e.port),
		"--cert-dir="+filepath.Join(e.dir, "certs"),
		"--token-auth-file="+filepath.Join(e.dir, "tokens.csv"),
		"--authorization-mode="+e.authz,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+filepath.Join(e.dir, "sa.key"),
		"--service-account-signing-key-file="+filepath.Join(e.dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
	)
	exited, err := e.launch(cmd, "kube-apiserver.log")
	if err != nil {
		return err
	}
	e.apiserver, e.apiExited = cmd, exited
	url := "https://127.0.0.1:" + strconv.Itoa(e.port) + "/readyz"
	if err := waitHTTP(url, e.token, insecureClient(), e.apiExited); err != nil {
		return fmt.Errorf("kube-apiserver did not become ready: %w\n%s", err, e.tail("kube-apiserver.log"))
	}
	return nil
}

// StopAPIServer kills kube-apiserver, as in a crash or a lost node, and
// leaves etcd running, so the data survives a later StartAPIServer. It does
// not wait for a graceful shutdown: with watches open that takes over 15 s,
// and clients must cope with an abrupt loss anyway.
func (e *Env) StopAPIServer() error {
	if e.apiserver == nil {
		return errors.New("kube-apiserver is not running")
	}
	_ = e.apiserver.Process.Kill()
	select {
	case <-e.apiExited:
	case <-time.After(stopTimeout):
		return fmt.Errorf("kube-apiserver did not exit within %v of SIGKILL", stopTimeout)
	}
	e.apiserver, e.apiExited = nil, nil
	return nil
}

func (e *Env) stopAll() {
	if e.apiserver != nil {
		_ = e.StopAPIServer()
	}
	if e.etcd != nil {
		_ = stop(e.etcd, e.etcdExited)
		e.etcd = nil
	}
}

// launch starts cmd with its output in a log file under the Env's folder
// and returns a channel closed when it exits.
func (e *Env) launch(cmd *exec.Cmd, logName string) (chan struct{}, error) {
	f, err := os.OpenFile(filepath.Join(e.dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	// The kernel kills the servers if the test binary dies (a panic or a
	// -timeout), so nothing outlives the test run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", filepath.Base(cmd.Path), err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(exited)
	}()
	return exited, nil
}

func stop(cmd *exec.Cmd, exited chan struct{}) error {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-time.After(stopTimeout):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("%s ignored SIGTERM for %v and was killed", filepath.Base(cmd.Path), stopTimeout)
	}
}

func (e *Env) tail(logName string) string {
	b, err := os.ReadFile(filepath.Join(e.dir, logName))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return "--- last lines of " + logName + " ---\n" + strings.Join(lines, "\n")
}

func waitHTTP(url, token string, client *http.Client, exited <-chan struct{}) error {
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("the process exited")
		default:
		}
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("request: %w", err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s answered %s", url, resp.Status)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %v: %w", startTimeout, last)
}

// insecureClient probes readiness before the self-signed certificate has
// been read; the clientset itself verifies it.
func insecureClient() *http.Client {
	cfg := &rest.Config{TLSClientConfig: rest.TLSClientConfig{Insecure: true}, Timeout: 2 * time.Second}
	tr, err := rest.TransportFor(cfg)
	if err != nil {
		return &http.Client{Timeout: 2 * time.Second}
	}
	return &http.Client{Transport: tr, Timeout: 2 * time.Second}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Namespace creates a fresh namespace for t. Namespaces are not deleted:
// without controllers a deleted namespace stays Terminating forever, and the
// whole etcd goes away with the test.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: create namespace: %v", err)
	}
	return ns.Name
}

// Kubeconfig writes a kubeconfig file for kubectl and returns its path.
func (e *Env) Kubeconfig(t testing.TB) string {
	t.Helper()
	var b bytes.Buffer
	fmt.Fprintf(&b, `apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: kubetest-admin
  user:
    token: %s
contexts:
- name: kubetest
  context:
    cluster: kubetest
    user: kubetest-admin
current-context: kubetest
`, e.Config.Host, e.Config.TLSClientConfig.CAFile, e.token)
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		t.Fatalf("kubetest: kubeconfig: %v", err)
	}
	return p
}
