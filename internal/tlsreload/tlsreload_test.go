package tlsreload

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour).Truncate(time.Second),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate for 127.0.0.1 and its key, valid for
// life.
func (ca *testCA) issue(t *testing.T, serial int64, life time.Duration, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "ringxds"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(life).Truncate(time.Second),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func (ca *testCA) clientCert(t *testing.T, serial int64) tls.Certificate {
	t.Helper()
	c, k := ca.issue(t, serial, time.Hour, x509.ExtKeyUsageClientAuth)
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// replace writes b next to path and renames it over path, as kubelet and
// cert-manager's tools do, so no reader sees a half-written file.
func replace(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type files struct{ cert, key, ca string }

func writeFiles(t *testing.T, ca *testCA, serial int64, life time.Duration) files {
	t.Helper()
	dir := t.TempDir()
	f := files{filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")}
	c, k := ca.issue(t, serial, life, x509.ExtKeyUsageServerAuth)
	replace(t, f.cert, c)
	replace(t, f.key, k)
	replace(t, f.ca, ca.pem)
	return f
}

// serve answers TLS handshakes with r's configuration on loopback: each
// connection that completes the handshake gets "ok".
func serve(t *testing.T, r *Reloader) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", r.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					_, _ = c.Write([]byte("ok"))
				}
			}()
		}
	}()
	return l.Addr().String()
}

// dial completes a handshake, waits for the server's "ok" (so a client
// certificate the server refuses fails here under TLS 1.3 too), and returns
// the certificate the server presented.
func dial(addr string, roots *x509.CertPool, client *tls.Certificate) (*x509.Certificate, error) {
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		return nil, err
	}
	if string(b) != "ok" {
		return nil, errors.New("server closed without answering")
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

func pool(cas ...*testCA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca.cert)
	}
	return p
}

// metric returns the value of the named metric (with the given file
// label, if any) as reg gathers it; ok is false when it is absent.
func metric(t *testing.T, reg *prometheus.Registry, name, file string) (v float64, ok bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := file == ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "file" && lp.GetValue() == file {
					match = true
				}
			}
			if !match {
				continue
			}
			if m.Counter != nil {
				return m.Counter.GetValue(), true
			}
			return m.Gauge.GetValue(), true
		}
	}
	return 0, false
}

func newReloader(t *testing.T, f files, withCA bool) (*Reloader, *prometheus.Registry, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	reg := prometheus.NewRegistry()
	opts := Options{CertFile: f.cert, KeyFile: f.key, Logger: zap.New(core), Registerer: reg}
	if withCA {
		opts.ClientCAFile = f.ca
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, reg, logs
}

// A pair renamed over the old one is served to the next handshake once the
// files are checked, and the expiry metric follows the certificate.
func TestNewPairIsServed(t *testing.T) {
	ca := newCA(t, "ca")
	f := writeFiles(t, ca, 2, 24*time.Hour)
	r, reg, logs := newReloader(t, f, false)
	addr := serve(t, r)

	got, err := dial(addr, pool(ca), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.SerialNumber.Int64() != 2 {
		t.Fatalf("serial %v, want 2", got.SerialNumber)
	}
	if v, _ := metric(t, reg, "ringxds_tls_certificate_expiry_timestamp_seconds", ""); v != float64(got.NotAfter.Unix()) {
		t.Fatalf("expiry metric %v, want the served NotAfter %d", v, got.NotAfter.Unix())
	}

	c, k := ca.issue(t, 3, 36*time.Hour, x509.ExtKeyUsageServerAuth)
	replace(t, f.key, k)
	replace(t, f.cert, c)
	// Nothing is read during a handshake: until the files are checked the
	// old pair is served.
	if got, err := dial(addr, pool(ca), nil); err != nil || got.SerialNumber.Int64() != 2 {
		t.Fatalf("before a check: serial %v, err %v; want the old pair", got.SerialNumber, err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	got, err = dial(addr, pool(ca), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.SerialNumber.Int64() != 3 {
		t.Fatalf("after reload: serial %v, want 3", got.SerialNumber)
	}
	if v, _ := metric(t, reg, "ringxds_tls_certificate_expiry_timestamp_seconds", ""); v != float64(got.NotAfter.Unix()) {
		t.Fatalf("expiry metric %v after reload, want %d", v, got.NotAfter.Unix())
	}
	if v, _ := metric(t, reg, "ringxds_tls_reloads_total", "certificate"); v != 2 {
		t.Errorf("ringxds_tls_reloads_total{file=certificate} = %v, want 2", v)
	}
	if logs.FilterMessageSnippet("reloaded").Len() != 1 {
		t.Errorf("want one reload log line, got %v", logs.All())
	}
	// An unchanged pair is not loaded again.
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if v, _ := metric(t, reg, "ringxds_tls_reloads_total", "certificate"); v != 2 {
		t.Errorf("an unchanged pair was reloaded: ringxds_tls_reloads_total = %v", v)
	}
}

// Run notices a change by itself.
func TestRunFollowsTheFiles(t *testing.T) {
	ca := newCA(t, "ca")
	f := writeFiles(t, ca, 2, time.Hour)
	r, err := New(Options{CertFile: f.cert, KeyFile: f.key, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	c, k := ca.issue(t, 7, time.Hour, x509.ExtKeyUsageServerAuth)
	replace(t, f.key, k)
	replace(t, f.cert, c)
	deadline := time.Now().Add(5 * time.Second)
	for r.Certificate().SerialNumber.Int64() != 7 {
		if time.Now().After(deadline) {
			t.Fatalf("Run did not load the new pair within 5 s (serving serial %v)", r.Certificate().SerialNumber)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A key path replaced by a directory is an error in the log and the
// metrics, and the last good pair stays in service; fixing the files ends
// the failure.
func TestBrokenKeyKeepsTheLastGoodPair(t *testing.T) {
	ca := newCA(t, "ca")
	f := writeFiles(t, ca, 2, time.Hour)
	r, reg, logs := newReloader(t, f, false)
	addr := serve(t, r)

	if err := os.Remove(f.key); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(f.key, 0o700); err != nil {
		t.Fatal(err)
	}
	err := r.Reload()
	if err == nil || !strings.Contains(err.Error(), f.key) {
		t.Fatalf("Reload with a directory for the key: %v, want an error naming %s", err, f.key)
	}
	errs := logs.FilterLevelExact(zapcore.ErrorLevel)
	if errs.Len() != 1 || !strings.Contains(errs.All()[0].ContextMap()["error"].(string), f.key) {
		t.Fatalf("want one error log naming the key, got %v", logs.All())
	}
	if v, _ := metric(t, reg, "ringxds_tls_reload_failures_total", "certificate"); v != 1 {
		t.Errorf("ringxds_tls_reload_failures_total{file=certificate} = %v, want 1", v)
	}
	if v, _ := metric(t, reg, "ringxds_tls_reload_failing", "certificate"); v != 1 {
		t.Errorf("ringxds_tls_reload_failing{file=certificate} = %v, want 1", v)
	}
	got, err := dial(addr, pool(ca), nil)
	if err != nil || got.SerialNumber.Int64() != 2 {
		t.Fatalf("after a failed reload: serial %v, err %v; want the old pair", got, err)
	}
	// The same broken files are neither retried nor reported again.
	_ = r.Reload()
	if v, _ := metric(t, reg, "ringxds_tls_reload_failures_total", "certificate"); v != 1 || logs.FilterLevelExact(zapcore.ErrorLevel).Len() != 1 {
		t.Errorf("an unchanged failure was reported again: failures %v, logs %v", v, logs.All())
	}

	if err := os.Remove(f.key); err != nil {
		t.Fatal(err)
	}
	c, k := ca.issue(t, 5, time.Hour, x509.ExtKeyUsageServerAuth)
	replace(t, f.key, k)
	replace(t, f.cert, c)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if v, _ := metric(t, reg, "ringxds_tls_reload_failing", "certificate"); v != 0 {
		t.Errorf("ringxds_tls_reload_failing stays %v after the files were fixed", v)
	}
	if got, err := dial(addr, pool(ca), nil); err != nil || got.SerialNumber.Int64() != 5 {
		t.Fatalf("after the fix: serial %v, err %v; want 5", got, err)
	}
}

// A pair whose certificate and key do not match (a rotation caught between
// its two writes) is refused the same way, and loads once both are written.
func TestHalfRotatedPairWaits(t *testing.T) {
	ca := newCA(t, "ca")
	f := writeFiles(t, ca, 2, time.Hour)
	r, reg, _ := newReloader(t, f, false)
	c, k := ca.issue(t, 3, time.Hour, x509.ExtKeyUsageServerAuth)
	replace(t, f.cert, c)
	if err := r.Reload(); err == nil {
		t.Fatal("a certificate without its key was loaded")
	}
	if r.Certificate().SerialNumber.Int64() != 2 {
		t.Fatalf("serving serial %v, want the old 2", r.Certificate().SerialNumber)
	}
	replace(t, f.key, k)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if r.Certificate().SerialNumber.Int64() != 3 {
		t.Fatalf("serving serial %v, want 3", r.Certificate().SerialNumber)
	}
	if v, _ := metric(t, reg, "ringxds_tls_reload_failing", "certificate"); v != 0 {
		t.Errorf("ringxds_tls_reload_failing = %v", v)
	}
}

// A client CA rotated on disk admits clients of the new CA without a
// restart, and a broken bundle keeps the last good one.
func TestClientCARotation(t *testing.T) {
	oldCA, nextCA := newCA(t, "old client CA"), newCA(t, "new client CA")
	f := writeFiles(t, oldCA, 2, time.Hour)
	r, reg, logs := newReloader(t, f, true)
	addr := serve(t, r)
	roots := pool(oldCA) // the server certificate stays signed by oldCA
	oldClient, newClient := oldCA.clientCert(t, 10), nextCA.clientCert(t, 11)

	if _, err := dial(addr, roots, nil); err == nil {
		t.Fatal("a client without a certificate was served under mTLS")
	}
	if _, err := dial(addr, roots, &oldClient); err != nil {
		t.Fatalf("client of the configured CA: %v", err)
	}
	if _, err := dial(addr, roots, &newClient); err == nil {
		t.Fatal("client of a CA not yet configured was accepted")
	}
	if v, _ := metric(t, reg, "ringxds_tls_client_ca_expiry_timestamp_seconds", ""); v != float64(oldCA.cert.NotAfter.Unix()) {
		t.Errorf("client CA expiry metric %v, want %d", v, oldCA.cert.NotAfter.Unix())
	}

	replace(t, f.ca, nextCA.pem)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(addr, roots, &newClient); err != nil {
		t.Fatalf("client of the rotated-in CA: %v", err)
	}
	if _, err := dial(addr, roots, &oldClient); err == nil {
		t.Fatal("client of the rotated-out CA is still accepted")
	}
	if v, _ := metric(t, reg, "ringxds_tls_client_ca_expiry_timestamp_seconds", ""); v != float64(nextCA.cert.NotAfter.Unix()) {
		t.Errorf("client CA expiry metric %v after rotation, want %d", v, nextCA.cert.NotAfter.Unix())
	}

	replace(t, f.ca, []byte("not a certificate\n"))
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("a bundle without certificates: %v", err)
	}
	if v, _ := metric(t, reg, "ringxds_tls_reload_failures_total", "client_ca"); v != 1 {
		t.Errorf("ringxds_tls_reload_failures_total{file=client_ca} = %v, want 1", v)
	}
	if logs.FilterLevelExact(zapcore.ErrorLevel).Len() != 1 {
		t.Errorf("want one error log, got %v", logs.All())
	}
	if _, err := dial(addr, roots, &newClient); err != nil {
		t.Fatalf("a broken bundle dropped the last good CA: %v", err)
	}
}

func TestBadOptions(t *testing.T) {
	ca := newCA(t, "ca")
	f := writeFiles(t, ca, 2, time.Hour)
	empty := filepath.Join(t.TempDir(), "empty.pem")
	replace(t, empty, nil)
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{CertFile: f.cert}, "--tls-cert and --tls-key"},
		{Options{KeyFile: f.key}, "--tls-cert and --tls-key"},
		{Options{CertFile: f.cert, KeyFile: f.cert}, "--tls-key"},
		{Options{CertFile: f.cert, KeyFile: filepath.Join(t.TempDir(), "missing.key")}, "missing.key"},
		{Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.key}, "no PEM certificate"},
		{Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: empty}, "no PEM certificate"},
		{Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: filepath.Join(t.TempDir(), "none.pem")}, "--tls-client-ca"},
		{Options{CertFile: f.cert, KeyFile: f.key, Interval: -time.Second}, "negative"},
	} {
		_, err := New(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error mentioning %q", tc.opts, err, tc.want)
		}
	}
}

// A change is judged by content: a pair rewritten with the old timestamps
// is loaded, a touched one is not loaded again.
func TestChangeIsJudgedByContent(t *testing.T) {
	ca := newCA(t, "ca")
	f := writeFiles(t, ca, 2, time.Hour)
	r, reg, _ := newReloader(t, f, false)
	old, err := os.Stat(f.cert)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	for _, p := range []string{f.cert, f.key} {
		if err := os.Chtimes(p, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if v, _ := metric(t, reg, "ringxds_tls_reloads_total", "certificate"); v != 1 {
		t.Errorf("a touch reloaded the pair: ringxds_tls_reloads_total = %v", v)
	}
	c, k := ca.issue(t, 3, time.Hour, x509.ExtKeyUsageServerAuth)
	replace(t, f.cert, c)
	replace(t, f.key, k)
	for _, p := range []string{f.cert, f.key} {
		if err := os.Chtimes(p, old.ModTime(), old.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := r.Certificate().SerialNumber.Int64(); got != 3 {
		t.Fatalf("a pair rewritten under the old timestamps was missed: serving serial %d", got)
	}
}
