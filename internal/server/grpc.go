package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// GRPCOptions configure the xDS gRPC server's transport.
type GRPCOptions struct {
	// TLSCert and TLSKey are PEM files. Without them the server speaks
	// plaintext.
	TLSCert, TLSKey string
	// TLSClientCA, if set, makes the server require client certificates
	// signed by this CA (mTLS).
	TLSClientCA string
	// MaxConnectionAge closes connections after this age (plus a grace
	// period) so clients spread over replicas after a scale-out. Zero
	// means 30 minutes, as Istio does.
	MaxConnectionAge time.Duration
	// ServerOptions are added after the transport's own, so they win:
	// Server.GRPCServerOptions, which enforce the per-connection limits.
	ServerOptions []grpc.ServerOption
}

// NewGRPCServer builds a grpc.Server tuned for long-lived xDS streams.
func NewGRPCServer(opts GRPCOptions) (*grpc.Server, error) {
	age := opts.MaxConnectionAge
	if age == 0 {
		age = 30 * time.Minute
	}
	sopts := []grpc.ServerOption{
		// A non-ADS Envoy opens one EDS stream per cluster; the HTTP/2
		// stream limit is not what refuses a client: --max-streams-per-
		// connection does, with a status (ServerOptions).
		grpc.MaxConcurrentStreams(math.MaxUint32),
		// Envoy pings every 15-30 s on idle connections; a stricter policy
		// would make the server GOAWAY healthy proxies.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  30 * time.Second,
			Timeout:               10 * time.Second,
			MaxConnectionAge:      age,
			MaxConnectionAgeGrace: 10 * time.Second,
		}),
	}
	switch {
	case opts.TLSCert != "" || opts.TLSKey != "":
		if opts.TLSCert == "" || opts.TLSKey == "" {
			return nil, errors.New("--tls-cert and --tls-key must be given together")
		}
		cfg, err := serverTLSConfig(opts)
		if err != nil {
			return nil, err
		}
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(cfg)))
	case opts.TLSClientCA != "":
		return nil, errors.New("--tls-client-ca needs --tls-cert and --tls-key")
	}
	return grpc.NewServer(append(sopts, opts.ServerOptions...)...), nil
}

func serverTLSConfig(opts GRPCOptions) (*tls.Config, error) {
	kp := &keyPairReloader{certFile: opts.TLSCert, keyFile: opts.TLSKey}
	if _, err := kp.get(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get() },
		NextProtos:     []string{"h2"},
	}
	if opts.TLSClientCA != "" {
		pem, err := os.ReadFile(opts.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("read --tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-client-ca %s holds no PEM certificate", opts.TLSClientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// keyPairReloader re-reads the key pair when its files change, so a
// certificate rotated on disk (cert-manager, a mounted Secret) is served on
// new connections without a restart. A broken pair on disk keeps the last
// good one.
type keyPairReloader struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	modTime time.Time
}

func (k *keyPairReloader) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	mt := latestModTime(k.certFile, k.keyFile)
	if k.cert != nil && !mt.After(k.modTime) {
		return k.cert, nil
	}
	c, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			return k.cert, nil
		}
		return nil, fmt.Errorf("load TLS key pair %s, %s: %w", k.certFile, k.keyFile, err)
	}
	k.cert, k.modTime = &c, mt
	return k.cert, nil
}

func latestModTime(files ...string) time.Time {
	var t time.Time
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.ModTime().After(t) {
			t = fi.ModTime()
		}
	}
	return t
}
