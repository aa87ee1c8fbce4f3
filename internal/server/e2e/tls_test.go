package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/testcp"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/tlsreload"
	"github.com/ringxds/ringxds/internal/watch"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ringxds test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key for 127.0.0.1.
func (ca *testCA) issue(t *testing.T, serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "ringxds"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
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

func writePEM(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// startTLSServer serves the example over an xDS port with TLS from the given
// files; it returns the address and the reloader following the files.
func startTLSServer(t *testing.T, opts tlsreload.Options) (string, *tlsreload.Reloader) {
	t.Helper()
	rl, err := tlsreload.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	src, err := watch.NewFileSource(exampleFile(t), watch.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := server.New(ctx, server.Options{})
	if err := srv.Apply(st); err != nil {
		t.Fatal(err)
	}
	g, err := server.NewGRPCServer(server.GRPCOptions{TLS: rl.Config()})
	if err != nil {
		t.Fatal(err)
	}
	srv.Register(g)
	l := testcp.Listen(t, "127.0.0.1:0")
	go func() { _ = g.Serve(l) }()
	t.Cleanup(func() { cancel(); g.Stop() })
	return l.Addr().String(), rl
}

// fetchCDS tries one SotW CDS exchange.
func fetchCDS(addr string, creds credentials.TransportCredentials) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: node("tls", "envoy"), TypeUrl: resource.ClusterType}); err != nil {
		return err
	}
	if _, err := st.Recv(); err != nil {
		return err
	}
	return nil
}

func TestXDSOverTLSAndMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	certPEM, keyPEM := ca.issue(t, 2, x509.ExtKeyUsageServerAuth)
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	writePEM(t, certFile, certPEM)
	writePEM(t, keyFile, keyPEM)
	writePEM(t, caFile, ca.pem)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)

	t.Run("TLS", func(t *testing.T) {
		addr, rl := startTLSServer(t, tlsreload.Options{CertFile: certFile, KeyFile: keyFile})
		var served *x509.Certificate
		creds := credentials.NewTLS(&tls.Config{RootCAs: pool, VerifyConnection: func(cs tls.ConnectionState) error {
			served = cs.PeerCertificates[0]
			return nil
		}})
		if err := fetchCDS(addr, creds); err != nil {
			t.Fatalf("TLS client: %v", err)
		}
		if served.SerialNumber.Int64() != 2 {
			t.Fatalf("served certificate serial %v, want 2", served.SerialNumber)
		}
		if err := fetchCDS(addr, insecure.NewCredentials()); err == nil {
			t.Fatal("a plaintext client was served by a TLS server")
		}
		// A certificate rotated on disk is served to new connections once
		// the reloader has seen it (tlsreload's own tests cover Run).
		newCert, newKey := ca.issue(t, 3, x509.ExtKeyUsageServerAuth)
		writePEM(t, certFile, newCert)
		writePEM(t, keyFile, newKey)
		if err := rl.Reload(); err != nil {
			t.Fatal(err)
		}
		if err := fetchCDS(addr, creds); err != nil {
			t.Fatalf("after rotation: %v", err)
		}
		if served.SerialNumber.Int64() != 3 {
			t.Fatalf("after rotation the server still presents serial %v", served.SerialNumber)
		}
	})

	t.Run("mTLS", func(t *testing.T) {
		addr, _ := startTLSServer(t, tlsreload.Options{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile})
		if err := fetchCDS(addr, credentials.NewTLS(&tls.Config{RootCAs: pool})); err == nil {
			t.Fatal("a client without a certificate was served under mTLS")
		}
		other := newCA(t)
		rogueCert, rogueKey := other.issue(t, 9, x509.ExtKeyUsageClientAuth)
		rogue, _ := tls.X509KeyPair(rogueCert, rogueKey)
		if err := fetchCDS(addr, credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{rogue}})); err == nil {
			t.Fatal("a client certificate from another CA was accepted")
		}
		clientCert, clientKey := ca.issue(t, 4, x509.ExtKeyUsageClientAuth)
		good, _ := tls.X509KeyPair(clientCert, clientKey)
		if err := fetchCDS(addr, credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{good}})); err != nil {
			t.Fatalf("a client with a valid certificate: %v", err)
		}
	})
}
