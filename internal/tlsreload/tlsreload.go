// Package tlsreload serves a TLS certificate, its key and an optional client
// CA bundle from files, and follows them when they change on disk (a
// cert-manager renewal, a rotated Secret, a CA rollover) without a restart.
//
// The files are read every Interval by a background poller (Run), and loaded
// when their contents changed; never during a handshake, which only loads
// the current configuration through an atomic pointer. A change that cannot be loaded (a half-written
// pair, a key path replaced by a directory, a bundle without certificates)
// is logged once, counted in ringxds_tls_reload_failures_total and flagged in
// ringxds_tls_reload_failing, and the last good configuration stays in
// service.
package tlsreload

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// DefaultInterval is how often Run looks at the files when Options.Interval
// is zero. Kubelet takes up to a minute or two to project a renewed Secret,
// so a few seconds more go unnoticed.
const DefaultInterval = 5 * time.Second

// Options name the files and where to report.
type Options struct {
	// CertFile and KeyFile are the PEM certificate chain and private key.
	CertFile, KeyFile string
	// ClientCAFile, if set, is a PEM bundle of the CAs whose client
	// certificates are accepted; clients must then present one (mTLS).
	ClientCAFile string
	// Interval between checks of the files in Run; zero means
	// DefaultInterval.
	Interval time.Duration
	Logger   *zap.Logger
	// Registerer receives the reload metrics; nil registers none.
	Registerer prometheus.Registerer
}

// The two things loaded, as the "file" label of the metrics names them.
const (
	partCertificate = "certificate" // CertFile and KeyFile, loaded together
	partClientCA    = "client_ca"
)

// Reloader holds the TLS configuration currently served.
type Reloader struct {
	opts Options
	cur  atomic.Pointer[tls.Config]

	// mu serializes Reload; handshakes never take it.
	mu       sync.Mutex
	pair     *tls.Certificate
	pool     *x509.CertPool
	seen     map[string]fingerprint // per part: the files as last tried
	failing  map[string]bool
	failures *prometheus.CounterVec
	reloads  *prometheus.CounterVec
	failGage *prometheus.GaugeVec
	certExp  prometheus.Gauge
	caExp    prometheus.Gauge
}

// New loads the files once and fails if they do not make a usable
// configuration; nothing is retried at start-up.
func New(opts Options) (*Reloader, error) {
	switch {
	case opts.CertFile == "" || opts.KeyFile == "":
		return nil, errors.New("--tls-cert and --tls-key must be given together")
	case opts.Interval < 0:
		return nil, fmt.Errorf("TLS reload interval %v must not be negative", opts.Interval)
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	r := &Reloader{
		opts:    opts,
		seen:    map[string]fingerprint{},
		failing: map[string]bool{},
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringxds_tls_reload_failures_total",
			Help: "Changes to the TLS files that could not be loaded (the last good certificate and client CA stay in service), by file: certificate (--tls-cert with --tls-key) or client_ca (--tls-client-ca).",
		}, []string{"file"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringxds_tls_reloads_total",
			Help: "TLS files loaded into service, start-up included, by file: certificate or client_ca.",
		}, []string{"file"}),
		failGage: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringxds_tls_reload_failing",
			Help: "1 while the TLS files on disk cannot be loaded and an older certificate or client CA is served, by file: certificate or client_ca.",
		}, []string{"file"}),
		certExp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringxds_tls_certificate_expiry_timestamp_seconds",
			Help: "NotAfter of the xDS server certificate in service, in Unix seconds.",
		}),
		caExp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringxds_tls_client_ca_expiry_timestamp_seconds",
			Help: "Earliest NotAfter among the client CA certificates in service, in Unix seconds (absent without --tls-client-ca).",
		}),
	}
	parts := []string{partCertificate}
	if opts.ClientCAFile != "" {
		parts = append(parts, partClientCA)
	}
	for _, p := range parts {
		r.failures.WithLabelValues(p)
		r.reloads.WithLabelValues(p)
		r.failGage.WithLabelValues(p)
	}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	if reg := opts.Registerer; reg != nil {
		cs := []prometheus.Collector{r.failures, r.reloads, r.failGage, r.certExp}
		if opts.ClientCAFile != "" {
			cs = append(cs, r.caExp)
		}
		for _, c := range cs {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register TLS metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Config returns a server configuration that serves whatever the Reloader
// holds at each handshake.
func (r *Reloader) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.cur.Load(), nil
		},
	}
}

// Certificate returns the leaf certificate in service.
func (r *Reloader) Certificate() *x509.Certificate {
	return r.cur.Load().Certificates[0].Leaf
}

// Run checks the files every Interval until ctx is done.
func (r *Reloader) Run(ctx context.Context) {
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = r.Reload()
		}
	}
}

// Reload loads whichever files changed since they were last tried, and puts
// them in service if they load. A change that does not load is reported
// once and returned; the files are tried again only once they change again.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	changed := false

	if data, fp := read(r.opts.CertFile, r.opts.KeyFile); r.pair == nil || fp != r.seen[partCertificate] {
		r.seen[partCertificate] = fp
		pair, err := loadPair(r.opts.CertFile, r.opts.KeyFile, data)
		if err == nil {
			r.pair, changed = pair, true
			r.certExp.Set(float64(pair.Leaf.NotAfter.Unix()))
			r.loaded(partCertificate, zap.String("cert", r.opts.CertFile), zap.String("subject", pair.Leaf.Subject.String()),
				zap.String("serial", pair.Leaf.SerialNumber.String()), zap.Time("not_after", pair.Leaf.NotAfter))
		} else {
			errs = append(errs, r.failed(partCertificate, err))
		}
	}
	if f := r.opts.ClientCAFile; f != "" {
		if data, fp := read(f); r.pool == nil || fp != r.seen[partClientCA] {
			r.seen[partClientCA] = fp
			pool, notAfter, n, err := loadPool(f, data)
			if err == nil {
				r.pool, changed = pool, true
				r.caExp.Set(float64(notAfter.Unix()))
				r.loaded(partClientCA, zap.String("client_ca", f), zap.Int("certificates", n), zap.Time("earliest_not_after", notAfter))
			} else {
				errs = append(errs, r.failed(partClientCA, err))
			}
		}
	}
	if changed && r.pair != nil && (r.opts.ClientCAFile == "" || r.pool != nil) {
		cfg := &tls.Config{
			MinVersion:   tls.VersionTLS12,
			NextProtos:   []string{"h2"},
			Certificates: []tls.Certificate{*r.pair},
		}
		if r.pool != nil {
			cfg.ClientCAs = r.pool
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
		r.cur.Store(cfg)
	}
	return errors.Join(errs...)
}

// loaded records a part put in service; a log line only when it replaces
// another one or ends a failure, start-up being announced by the caller.
func (r *Reloader) loaded(part string, fields ...zap.Field) {
	r.reloads.WithLabelValues(part).Inc()
	r.failGage.WithLabelValues(part).Set(0)
	if r.cur.Load() != nil || r.failing[part] {
		r.opts.Logger.Info("TLS "+part+" reloaded; new handshakes use it", fields...)
	}
	r.failing[part] = false
}

// failed reports a part that did not load. Before anything is in service
// (start-up) the error is only returned.
func (r *Reloader) failed(part string, err error) error {
	if r.cur.Load() == nil {
		return err
	}
	r.failures.WithLabelValues(part).Inc()
	r.failGage.WithLabelValues(part).Set(1)
	r.failing[part] = true
	r.opts.Logger.Error("TLS "+part+" changed on disk but cannot be loaded; the previous one stays in service until the files are fixed", zap.Error(err))
	return err
}

func loadPair(certFile, keyFile string, data []fileData) (*tls.Certificate, error) {
	if err := data[0].err; err != nil {
		return nil, fmt.Errorf("read --tls-cert: %w", err)
	}
	if err := data[1].err; err != nil {
		return nil, fmt.Errorf("read --tls-key: %w", err)
	}
	c, err := tls.X509KeyPair(data[0].b, data[1].b)
	if err != nil {
		return nil, fmt.Errorf("load TLS key pair --tls-cert %s, --tls-key %s: %w", certFile, keyFile, err)
	}
	if c.Leaf == nil { // Go fills Leaf since 1.23; be sure.
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("parse --tls-cert %s: %w", certFile, err)
		}
	}
	return &c, nil
}

// loadPool reads a CA bundle and returns it with the earliest expiry in it.
func loadPool(file string, data []fileData) (*x509.CertPool, time.Time, int, error) {
	b, err := data[0].b, data[0].err
	if err != nil {
		return nil, time.Time{}, 0, fmt.Errorf("read --tls-client-ca: %w", err)
	}
	pool := x509.NewCertPool()
	var earliest time.Time
	n := 0
	for rest := b; len(rest) > 0; {
		var der []byte
		der, rest = nextCertificate(rest)
		if der == nil {
			break
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, time.Time{}, 0, fmt.Errorf("--tls-client-ca %s: %w", file, err)
		}
		pool.AddCert(c)
		if n == 0 || c.NotAfter.Before(earliest) {
			earliest = c.NotAfter
		}
		n++
	}
	if n == 0 {
		return nil, time.Time{}, 0, fmt.Errorf("--tls-client-ca %s holds no PEM certificate", file)
	}
	return pool, earliest, n, nil
}

// nextCertificate returns the DER of the first CERTIFICATE block of b, and
// what follows it; nil when there is none.
func nextCertificate(b []byte) (der, rest []byte) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, nil
		}
		if blk.Type == "CERTIFICATE" && len(blk.Headers) == 0 {
			return blk.Bytes, b
		}
	}
}

// fingerprint is what the files held when last tried: their contents'
// digests, or why they could not be read. Comparing contents, not
// modification times, catches a rewrite within one timestamp tick and
// ignores a touch.
type fingerprint [2]struct {
	sum [sha256.Size]byte
	err string
}

type fileData struct {
	b   []byte
	err error
}

// read reads the files (at most two) and fingerprints what it read; the
// files are small, so reading them every interval costs next to nothing.
func read(files ...string) ([]fileData, fingerprint) {
	var fp fingerprint
	data := make([]fileData, len(files))
	for i, f := range files {
		data[i].b, data[i].err = os.ReadFile(f)
		if data[i].err != nil {
			fp[i].err = data[i].err.Error()
			continue
		}
		fp[i].sum = sha256.Sum256(data[i].b)
	}
	return data, fp
}
