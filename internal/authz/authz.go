// Package authz decides which xDS clients may read which clusters.
//
// With mTLS, a client's identity is its verified certificate: the SPIFFE
// ID in a URI SAN (spiffe://<trust-domain>/ns/<namespace>/sa/<account>)
// or, failing that, its DNS SANs, of which the first of the form
// <name>.<namespace>.svc[.<domain>] names its namespace. A client may read
// a cluster when
//
//   - the server lists it as a cluster-wide reader,
//   - the cluster's namespace (its name after the last '.', the
//     "<service>.<namespace>" of the Kubernetes source) is its own, or
//   - the cluster lists it among its readers (ringxds.io/readers, the file
//     source's readers field).
//
// A reader is a SPIFFE ID (spiffe://...), a DNS name (anything with a
// dot) or a namespace (a DNS label). A client without a verified
// certificate reads nothing.
package authz

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Identity is what a client's verified certificate says about it.
type Identity struct {
	// SPIFFEID is the certificate's spiffe:// URI SAN, if it has one.
	SPIFFEID string `json:"spiffe_id,omitempty"`
	// DNSNames are its DNS SANs.
	DNSNames []string `json:"dns_names,omitempty"`
	// Namespace comes from the SPIFFE ID's /ns/<namespace>/ path or, when
	// there is none, from the first DNS SAN <name>.<namespace>.svc[...].
	Namespace string `json:"namespace,omitempty"`
}

// Anonymous reports whether the identity names nobody: a plaintext or
// TLS-only client, or a certificate without a SPIFFE ID or DNS SAN.
func (id Identity) Anonymous() bool { return id.SPIFFEID == "" && len(id.DNSNames) == 0 }

// String is the identity as logged: the SPIFFE ID, else the first DNS SAN.
func (id Identity) String() string {
	switch {
	case id.SPIFFEID != "":
		return id.SPIFFEID
	case len(id.DNSNames) > 0:
		return id.DNSNames[0]
	}
	return "anonymous"
}

// maxSANs bounds the DNS SANs kept per client: they come from a
// certificate the CA signed, but are kept for the life of a stream.
const maxSANs = 16

// FromCertificate reads the identity of a verified leaf certificate.
func FromCertificate(cert *x509.Certificate) Identity {
	var id Identity
	if cert == nil {
		return id
	}
	for _, u := range cert.URIs {
		if u.Scheme == "spiffe" && u.Host != "" {
			id.SPIFFEID = u.String()
			id.Namespace = spiffeNamespace(u)
			break
		}
	}
	for _, name := range cert.DNSNames {
		if len(id.DNSNames) == maxSANs {
			break
		}
		name = strings.ToLower(strings.TrimSuffix(name, "."))
		id.DNSNames = append(id.DNSNames, name)
		if id.Namespace == "" && id.SPIFFEID == "" {
			id.Namespace = dnsNamespace(name)
		}
	}
	return id
}

// spiffeNamespace reads /ns/<namespace>/... from a SPIFFE ID's path.
func spiffeNamespace(u *url.URL) string {
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	for i := 0; i+1 < len(parts); i += 2 {
		if parts[i] == "ns" && isLabel(parts[i+1]) {
			return parts[i+1]
		}
	}
	return ""
}

// dnsNamespace reads <name>.<namespace>.svc[.<domain>].
func dnsNamespace(name string) string {
	labels := strings.Split(name, ".")
	for i := 2; i < len(labels); i++ {
		if labels[i] == "svc" && isLabel(labels[i-1]) {
			return labels[i-1]
		}
	}
	return ""
}

var labelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

func isLabel(s string) bool { return labelRE.MatchString(s) }

// ClusterNamespace is the namespace of a cluster name: what follows its
// last '.', or "" when it has none (a file-source name like "products").
func ClusterNamespace(cluster string) string {
	i := strings.LastIndexByte(cluster, '.')
	if i < 0 || !isLabel(cluster[i+1:]) {
		return ""
	}
	return cluster[i+1:]
}

// Reader is one entry of a readers list.
type Reader struct {
	kind  readerKind
	value string
}

type readerKind uint8

const (
	readerNamespace readerKind = iota
	readerSPIFFE
	readerDNS
)

// String is the entry as written.
func (r Reader) String() string { return r.value }

// ParseReader reads one readers entry: a SPIFFE ID, a DNS name or a
// namespace.
func ParseReader(s string) (Reader, error) {
	s = strings.TrimSpace(s)
	switch {
	case strings.HasPrefix(s, "spiffe://"):
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return Reader{}, fmt.Errorf("%q is not a SPIFFE ID (spiffe://<trust-domain>/<path>)", s)
		}
		return Reader{readerSPIFFE, s}, nil
	case strings.Contains(s, "."):
		name := strings.TrimSuffix(s, ".")
		for _, l := range strings.Split(name, ".") {
			if !isLabel(l) {
				return Reader{}, fmt.Errorf("%q is not a lower-case DNS name", s)
			}
		}
		return Reader{readerDNS, name}, nil
	case isLabel(s):
		return Reader{readerNamespace, s}, nil
	}
	return Reader{}, fmt.Errorf("%q is neither a namespace, a DNS name nor a SPIFFE ID (spiffe://...)", s)
}

// ParseReaders reads a list of entries, all problems at once.
func ParseReaders(entries []string) ([]Reader, error) {
	out := make([]Reader, 0, len(entries))
	var bad []string
	for _, e := range entries {
		r, err := ParseReader(e)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		out = append(out, r)
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("readers: %s", strings.Join(bad, "; "))
	}
	return out, nil
}

// SplitList splits a comma- or whitespace-separated list, dropping empty
// entries: the form of ringxds.io/readers and --authz-cluster-readers.
func SplitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
}

// Matches reports whether the reader names id.
func (r Reader) Matches(id Identity) bool {
	switch r.kind {
	case readerSPIFFE:
		return id.SPIFFEID != "" && id.SPIFFEID == r.value
	case readerDNS:
		return slices.Contains(id.DNSNames, r.value)
	}
	return id.Namespace != "" && id.Namespace == r.value
}

// Reasons a client is refused a cluster, a fixed set (metric labels).
const (
	// RefusedAnonymous: the client presented no identity.
	RefusedAnonymous = "anonymous"
	// RefusedNotReader: the cluster is in another namespace and does not
	// list the client among its readers.
	RefusedNotReader = "not_reader"
)

// RefusalReasons lists every refusal reason.
var RefusalReasons = []string{RefusedAnonymous, RefusedNotReader}

// Policy is the server-wide part of the decision.
type Policy struct {
	clusterReaders []Reader
}

// NewPolicy builds a policy with the given cluster-wide readers.
func NewPolicy(clusterReaders []string) (*Policy, error) {
	rs, err := ParseReaders(clusterReaders)
	if err != nil {
		return nil, err
	}
	return &Policy{clusterReaders: rs}, nil
}

// ClusterReader reports whether id may read every cluster.
func (p *Policy) ClusterReader(id Identity) bool {
	for _, r := range p.clusterReaders {
		if r.Matches(id) {
			return true
		}
	}
	return false
}

// Allow decides whether id may read the named cluster, whose readers are
// given. It returns "" when allowed, else the refusal reason.
func (p *Policy) Allow(id Identity, cluster string, readers []Reader) string {
	if id.Anonymous() {
		return RefusedAnonymous
	}
	if p.ClusterReader(id) {
		return ""
	}
	if ns := ClusterNamespace(cluster); ns != "" && ns == id.Namespace {
		return ""
	}
	for _, r := range readers {
		if r.Matches(id) {
			return ""
		}
	}
	return RefusedNotReader
}
