package authz

import (
	"crypto/x509"
	"net/url"
	"testing"
)

func cert(uri string, dns ...string) *x509.Certificate {
	c := &x509.Certificate{DNSNames: dns}
	if uri != "" {
		u, _ := url.Parse(uri)
		c.URIs = []*url.URL{u}
	}
	return c
}

func TestIdentityFromCertificate(t *testing.T) {
	for _, tc := range []struct {
		cert      *x509.Certificate
		spiffe    string
		namespace string
		anonymous bool
	}{
		{cert("spiffe://cluster.local/ns/shop/sa/cart"), "spiffe://cluster.local/ns/shop/sa/cart", "shop", false},
		{cert("spiffe://example.org/workload"), "spiffe://example.org/workload", "", false},
		{cert("", "cart.shop.svc"), "", "shop", false},
		{cert("", "cart.shop.svc.cluster.local"), "", "shop", false},
		{cert("", "cart.example.com"), "", "", false},
		// The SPIFFE ID wins over a DNS SAN naming another namespace.
		{cert("spiffe://td/ns/shop/sa/x", "x.other.svc"), "spiffe://td/ns/shop/sa/x", "shop", false},
		{cert("https://example.org/ns/shop"), "", "", true},
		{&x509.Certificate{}, "", "", true},
		{nil, "", "", true},
	} {
		id := FromCertificate(tc.cert)
		if id.SPIFFEID != tc.spiffe || id.Namespace != tc.namespace || id.Anonymous() != tc.anonymous {
			t.Errorf("%+v: got %+v (anonymous %v)", tc.cert, id, id.Anonymous())
		}
	}
}

func TestParseReader(t *testing.T) {
	for _, ok := range []string{"shop", " shop ", "cart.shop.svc", "spiffe://td/ns/shop/sa/cart"} {
		if _, err := ParseReader(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Shop", "shop_1", "spiffe://", "spiffe:///ns/x", "a..b", "*", "-a"} {
		if _, err := ParseReader(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if got := SplitList(" a, b c,,\td "); len(got) != 4 {
		t.Errorf("SplitList = %q", got)
	}
}

func TestAllow(t *testing.T) {
	p, err := NewPolicy([]string{"spiffe://td/ns/ops/sa/dashboard", "audit"})
	if err != nil {
		t.Fatal(err)
	}
	shop := FromCertificate(cert("spiffe://td/ns/shop/sa/cart"))
	web := FromCertificate(cert("", "front.web.svc"))
	dash := FromCertificate(cert("spiffe://td/ns/ops/sa/dashboard"))
	otherOps := FromCertificate(cert("spiffe://td/ns/ops/sa/other"))
	auditor := FromCertificate(cert("", "x.audit.svc"))
	readers, err := ParseReaders([]string{"web", "spiffe://td/ns/ops/sa/other"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who     string
		id      Identity
		cluster string
		readers []Reader
		want    string
	}{
		{"own namespace", shop, "products.shop", nil, ""},
		{"other namespace", shop, "products.billing", nil, RefusedNotReader},
		{"no namespace in the name", shop, "products", nil, RefusedNotReader},
		{"listed namespace", web, "products.shop", readers, ""},
		{"listed SPIFFE ID", otherOps, "products.shop", readers, ""},
		{"not listed", shop, "products.billing", readers, RefusedNotReader},
		{"cluster reader by SPIFFE ID", dash, "anything", nil, ""},
		{"cluster reader by namespace", auditor, "products.billing", nil, ""},
		{"anonymous", Identity{}, "products.shop", readers, RefusedAnonymous},
	} {
		if got := p.Allow(tc.id, tc.cluster, tc.readers); got != tc.want {
			t.Errorf("%s: Allow(%s, %s) = %q, want %q", tc.who, tc.id, tc.cluster, got, tc.want)
		}
	}
	if _, err := NewPolicy([]string{"Not Valid"}); err == nil {
		t.Error("an invalid cluster reader was accepted")
	}
}
