package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startRun runs the server with args on the given listeners until the test
// ends, and waits for /readyz on base.
func startRun(t *testing.T, args []string, lis *listeners, ready string) *syncBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, append([]string{"--log-level=warn"}, args...), out, lis) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not stop within 10 s of cancel")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(ready + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return out
			}
		}
		select {
		case err := <-done:
			t.Fatalf("run returned %v before ready; output:\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/readyz not ready within 10 s (last error %v); output:\n%s", ready, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fetch GETs base+path with the given Host header.
func fetch(t *testing.T, base, path, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// With --metrics-addr the pod-network listener serves the kubelet and the
// scraper only; the debug page, /debug/* and pprof stay on the debug
// listener, which refuses Host headers that are not its own.
func TestDebugSplitFromMetrics(t *testing.T) {
	lis := &listeners{xds: loopback(t), debug: loopback(t), metrics: loopback(t)}
	metrics, dbg := "http://"+lis.metrics.Addr().String(), "http://"+lis.debug.Addr().String()
	out := startRun(t, []string{"--debug-allowed-hosts=debug.ops.example, *.corp.example"}, lis, metrics)

	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _ := fetch(t, metrics, path, ""); code != http.StatusOK {
			t.Errorf("metrics listener %s: %d, want 200", path, code)
		}
	}
	for _, path := range []string{"/", "/debug/snapshot", "/debug/pick?cluster=products&key=k", "/debug/clients", "/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/profile?seconds=1"} {
		if code, _ := fetch(t, metrics, path, ""); code != http.StatusNotFound {
			t.Errorf("metrics listener %s: %d, want 404", path, code)
		}
	}
	// Reached as localhost, as 127.0.0.1 or through an allowed name, the
	// debug listener serves everything.
	for _, host := range []string{"", "localhost:18080", "debug.ops.example", "a.corp.example:8080"} {
		for _, path := range []string{"/", "/debug/snapshot", "/debug/pprof/cmdline", "/metrics", "/readyz"} {
			if code, _ := fetch(t, dbg, path, host); code != http.StatusOK {
				t.Errorf("debug listener %s with Host %q: %d, want 200", path, host, code)
			}
		}
	}
	// A page that rebound its name to this address gets nothing.
	for _, path := range []string{"/", "/debug/snapshot", "/debug/pprof/", "/debug/pprof/profile?seconds=1"} {
		code, body := fetch(t, dbg, path, "rebind.attacker.example")
		if code != http.StatusForbidden || !strings.Contains(body, "--debug-allowed-hosts") || strings.Contains(body, "products") {
			t.Errorf("debug listener %s with a rebinding Host: %d %q, want 403 and an explanation", path, code, body)
		}
	}
	if !strings.Contains(out.String(), "http://"+lis.metrics.Addr().String()+"/metrics") {
		t.Errorf("start-up message does not point /metrics at the metrics listener:\n%s", out)
	}
}

// reportsAs is a loopback listener that claims another address, so the
// refusal of a non-loopback --debug-addr is tested without leaving loopback.
type reportsAs struct {
	net.Listener
	addr net.Addr
}

func (l reportsAs) Addr() net.Addr { return l.addr }

func TestDebugAddrMustBeLoopback(t *testing.T) {
	podIP := &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 18080}
	lis := &listeners{xds: loopback(t), debug: reportsAs{loopback(t), podIP}}
	err := run(context.Background(), []string{"--log-level=error"}, io.Discard, lis)
	if err == nil {
		t.Fatal("a non-loopback --debug-addr was served without --debug-remote")
	}
	for _, want := range []string{"--debug-addr 10.1.2.3:18080", "loopback", "--metrics-addr", "--debug-remote", "pprof"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// The listeners were released.
	if _, err := lis.xds.Accept(); err == nil {
		t.Error("the xDS listener is still open after the refusal")
	}

	// An address that is plainly not loopback is refused before it is
	// bound: these never open a socket beyond loopback.
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "192.0.2.1:0"} {
		err := run(context.Background(), []string{"--log-level=error", "--xds-addr=127.0.0.1:0", "--debug-addr=" + addr}, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), "is not a loopback address") {
			t.Errorf("--debug-addr=%s: %v, want a refusal", addr, err)
		}
	}

	// --debug-remote opens it, with the Host check still on.
	inner := loopback(t)
	lis = &listeners{xds: loopback(t), debug: reportsAs{inner, podIP}}
	startRun(t, []string{"--debug-remote"}, lis, "http://"+inner.Addr().String())
	if code, _ := fetch(t, "http://"+inner.Addr().String(), "/debug/snapshot", "rebind.attacker.example"); code != http.StatusForbidden {
		t.Errorf("rebinding Host with --debug-remote: %d, want 403", code)
	}
}

func TestDebugAndTLSFlags(t *testing.T) {
	var out bytes.Buffer
	_ = run(context.Background(), []string{"--help"}, &out, nil)
	for _, f := range []string{"-metrics-addr", "-debug-remote", "-debug-allowed-hosts", "-tls-reload-interval"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not list %s", f)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-key", "/k.pem"}, "--tls-cert and --tls-key"},
		{[]string{"--tls-client-ca", "/ca.pem"}, "--tls-client-ca needs"},
		{[]string{"--tls-cert", "/c.pem", "--tls-key", "/k.pem", "--tls-reload-interval=0s"}, "--tls-reload-interval"},
		{[]string{"--debug-allowed-hosts", "http://x.example"}, "--debug-allowed-hosts"},
		{[]string{"--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"}, "/nonexistent/c.pem"},
	} {
		err := run(context.Background(), append(tc.args, "--xds-addr=127.0.0.1:0", "--debug-addr=127.0.0.1:0"), io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
}

type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) *ca {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &ca{c, key}
}

func (c *ca) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw})
}

func (c *ca) issue(t *testing.T, serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte, leaf *x509.Certificate) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "ringxds"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Duration(serial) * time.Hour).Truncate(time.Second),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	leaf, _ = x509.ParseCertificate(der)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), leaf
}

func renameInto(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path+".new", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// handshake opens a TLS connection to the xDS port as a gRPC client would
// and reads the server's first HTTP/2 frame, which a refused client
// certificate never gets; it returns the server's certificate.
func handshake(addr string, roots *x509.CertPool, client tls.Certificate) (*x509.Certificate, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{client}, NextProtos: []string{"h2"}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")); err != nil {
		return nil, err
	}
	if _, err := c.Read(make([]byte, 9)); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

// metricValue reads one unlabelled metric from /metrics.
func metricValue(t *testing.T, base, name string) float64 {
	t.Helper()
	_, body := fetch(t, base, "/metrics", "")
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics has no %s", name)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The binary follows its --tls-* files: a new pair and a new client CA are
// used by new connections without a restart, a broken key is reported and
// the last good pair kept, and the expiry metric tracks the certificate.
func TestTLSFilesFollowedWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	serverCA, oldClients, newClients := newTestCA(t, "server CA"), newTestCA(t, "old client CA"), newTestCA(t, "new client CA")
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	c, k, leaf := serverCA.issue(t, 2, x509.ExtKeyUsageServerAuth)
	renameInto(t, certFile, c)
	renameInto(t, keyFile, k)
	renameInto(t, caFile, oldClients.pem())
	roots := x509.NewCertPool()
	roots.AddCert(serverCA.cert)
	clientOf := func(ca *ca, serial int64) tls.Certificate {
		c, k, _ := ca.issue(t, serial, x509.ExtKeyUsageClientAuth)
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return pair
	}
	oldClient, newClient := clientOf(oldClients, 10), clientOf(newClients, 11)

	lis := &listeners{xds: loopback(t), debug: loopback(t)}
	base, xdsAddr := "http://"+lis.debug.Addr().String(), lis.xds.Addr().String()
	out := startRun(t, []string{"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile, "--tls-reload-interval=20ms"}, lis, base)
	if !strings.Contains(out.String(), "(mTLS)") {
		t.Errorf("start-up message does not say mTLS:\n%s", out)
	}
	// until polls cond for up to 5 s.
	until := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5 s", what)
			}
		}
	}
	until("served with the old client CA", func() bool { _, err := handshake(xdsAddr, roots, oldClient); return err == nil })
	if _, err := handshake(xdsAddr, roots, newClient); err == nil {
		t.Fatal("a client of a CA not yet configured was accepted")
	}
	if got := metricValue(t, base, "ringxds_tls_certificate_expiry_timestamp_seconds"); got != float64(leaf.NotAfter.Unix()) {
		t.Errorf("expiry metric %v, want NotAfter %d", got, leaf.NotAfter.Unix())
	}

	renameInto(t, caFile, newClients.pem())
	until("a client of the rotated-in CA accepted", func() bool { _, err := handshake(xdsAddr, roots, newClient); return err == nil })
	if _, err := handshake(xdsAddr, roots, oldClient); err == nil {
		t.Error("a client of the rotated-out CA is still accepted")
	}

	c, k, leaf3 := serverCA.issue(t, 3, x509.ExtKeyUsageServerAuth)
	renameInto(t, keyFile, k)
	renameInto(t, certFile, c)
	until("the new pair served", func() bool {
		got, err := handshake(xdsAddr, roots, newClient)
		return err == nil && got.SerialNumber.Int64() == 3
	})
	until("the expiry metric follows", func() bool {
		return metricValue(t, base, "ringxds_tls_certificate_expiry_timestamp_seconds") == float64(leaf3.NotAfter.Unix())
	})

	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(keyFile, 0o700); err != nil {
		t.Fatal(err)
	}
	until("the failure counted", func() bool {
		_, body := fetch(t, base, "/metrics", "")
		return strings.Contains(body, `ringxds_tls_reload_failures_total{file="certificate"} 1`) && strings.Contains(body, `ringxds_tls_reload_failing{file="certificate"} 1`)
	})
	if got, err := handshake(xdsAddr, roots, newClient); err != nil || got.SerialNumber.Int64() != 3 {
		t.Fatalf("after a broken key: %v, %v; want the last good pair", got, err)
	}
}
