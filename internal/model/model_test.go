package model

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func validCluster() Cluster {
	return Cluster{Name: "products", Endpoints: []Endpoint{{Address: "10.0.0.1", Port: 8080}, {Address: "2001:db8::1", Port: 8080}}}
}

func TestApplyDefaults(t *testing.T) {
	c := validCluster()
	c.FadeIn = &FadeIn{}
	c.ApplyDefaults()
	if c.Policy != PolicyRingHash || c.HashHeader != DefaultHashHeader || c.MinRingSize != DefaultRingSize || c.MaxRingSize != DefaultRingSize {
		t.Fatalf("defaults not applied: %+v", c)
	}
	if c.FadeIn.Duration != 30*time.Second || c.FadeIn.Exponent != 2.5 {
		t.Fatalf("fade-in defaults: %+v", c.FadeIn)
	}
	if ep := c.Endpoints[0]; ep.Weight != 1 || ep.Scheme != "http" {
		t.Fatalf("endpoint defaults: %+v", ep)
	}
	m := Cluster{Name: "m", Policy: PolicyMaglev}
	m.ApplyDefaults()
	if m.TableSize != DefaultMaglevTableSize {
		t.Fatalf("maglev table size default = %d", m.TableSize)
	}
	// Only one bound given: the other follows it without inverting them.
	one := Cluster{MinRingSize: 8192}
	one.ApplyDefaults()
	if one.MaxRingSize != 8192 {
		t.Fatalf("max ring size = %d, want 8192", one.MaxRingSize)
	}
}

func TestHostPortBracketsIPv6(t *testing.T) {
	if got := (Endpoint{Address: "2001:db8::1", Port: 80}).HostPort(); got != "[2001:db8::1]:80" {
		t.Fatalf("HostPort = %q", got)
	}
	if got := (Endpoint{Address: "10.0.0.1", Port: 80}).HostPort(); got != "10.0.0.1:80" {
		t.Fatalf("HostPort = %q", got)
	}
}

func TestValidateNamesEachProblem(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Cluster)
		field string
		text  string
	}{
		{"empty name", func(c *Cluster) { c.Name = "" }, "name", "must not be empty"},
		{"slash in name", func(c *Cluster) { c.Name = "a/b" }, "name", "must not contain"},
		{"bad policy", func(c *Cluster) { c.Policy = "round_robin" }, "lb_policy", `unknown lb_policy "round_robin"`},
		{"bad header", func(c *Cluster) { c.HashHeader = "X Product" }, "hash_header", "not a valid"},
		{"upper-case header", func(c *Cluster) { c.HashHeader = "X-Order-Id" }, "hash_header", `"X-Order-Id" is not a valid lower-case HTTP header name: write "x-order-id"`},
		{"binary header", func(c *Cluster) { c.HashHeader = "x-product-bin" }, "hash_header", "gRPC clients cannot hash"},
		{"min above max", func(c *Cluster) { c.MinRingSize, c.MaxRingSize = 4096, 1024 }, "minimum_ring_size", "larger than maximum_ring_size"},
		{"ring too large", func(c *Cluster) { c.MaxRingSize = MaxRingSize + 1 }, "maximum_ring_size", "outside"},
		{"non-prime table", func(c *Cluster) { c.Policy, c.TableSize = PolicyMaglev, 65536 }, "table_size", "must be a prime"},
		{"non-prime table names its neighbours", func(c *Cluster) { c.Policy, c.TableSize = PolicyMaglev, 1000 }, "table_size", "1000 must be a prime no larger than 5000011: 997 or 1009?"},
		{"table past the largest", func(c *Cluster) { c.Policy, c.TableSize = PolicyMaglev, 6000000 }, "table_size", ": 5000011?"},
		{"table on ring_hash", func(c *Cluster) { c.TableSize = 7 }, "table_size", "only to lb_policy maglev"},
		{"no endpoints", func(c *Cluster) { c.Endpoints = nil }, "endpoints", "at least one"},
		{"DNS name", func(c *Cluster) { c.Endpoints[0].Address = "backend.example" }, "endpoints[0].address", "not an IPv4 or IPv6 address"},
		{"zero port", func(c *Cluster) { c.Endpoints[0].Port = 0 }, "endpoints[0].port", "outside 1..65535"},
		{"bad scheme", func(c *Cluster) { c.Endpoints[0].Scheme = "ftp" }, "endpoints[0].scheme", "not one of"},
		{"duplicate", func(c *Cluster) { c.Endpoints[1] = c.Endpoints[0] }, "endpoints[1]", "duplicates endpoints[0]"},
		{"duplicate hash key", func(c *Cluster) { c.Endpoints[0].HashKey, c.Endpoints[1].HashKey = "k", "k" }, "endpoints[1].hash_key", "also the hash_key of endpoints[0]"},
		{"hash key spelled as another address", func(c *Cluster) { c.Endpoints[0].HashKey = c.Endpoints[1].HostPort() }, "endpoints[1]", "is the hash_key of endpoints[0]"},
		{"address spelled as a later hash key", func(c *Cluster) { c.Endpoints[1].HashKey = c.Endpoints[0].HostPort() }, "endpoints[1].hash_key", "is the address of endpoints[0]"},
		{"bad fade exponent", func(c *Cluster) { c.FadeIn = &FadeIn{Duration: time.Second, Exponent: -1} }, "fade_in.exponent", "must be in"},
		{"fade capacity above the ring", func(c *Cluster) { c.FadeIn = &FadeIn{Duration: time.Second, Exponent: 1, Capacity: 5000} }, "fade_in.capacity", "larger than maximum_ring_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validCluster()
			c.ApplyDefaults()
			tc.edit(&c)
			err := c.Validate()
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v, want a FieldError", err)
			}
			if fe.Field != tc.field || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Validate() = %q (field %q), want field %q saying %q", err, fe.Field, tc.field, tc.text)
			}
		})
	}
	c := validCluster()
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("valid cluster rejected: %v", err)
	}
}

func TestNormalizeSortsAndRejectsDuplicateClusters(t *testing.T) {
	s := State{Clusters: []Cluster{validCluster(), {Name: "a", Endpoints: []Endpoint{{Address: "10.0.0.9", Port: 1}}}}}
	if err := s.Normalize(); err != nil {
		t.Fatal(err)
	}
	if s.Clusters[0].Name != "a" {
		t.Fatalf("clusters not sorted: %s first", s.Clusters[0].Name)
	}
	if c, ok := s.Cluster("products"); !ok || c.Name != "products" {
		t.Fatal("Cluster lookup failed")
	}
	if _, ok := s.Cluster("nope"); ok {
		t.Fatal("Cluster found a missing name")
	}
	dup := State{Clusters: []Cluster{validCluster(), validCluster()}}
	if err := dup.Normalize(); err == nil || !strings.Contains(err.Error(), "defined twice") {
		t.Fatalf("duplicate cluster: %v", err)
	}
}

func TestClusterEqual(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	base := Cluster{Name: "a", Policy: PolicyRingHash, HashHeader: "h", MinRingSize: 4, MaxRingSize: 8,
		FadeIn:    &FadeIn{Duration: time.Second, Exponent: 1},
		Endpoints: []Endpoint{{Address: "10.0.0.1", Port: 1, Weight: 1, Scheme: "http", Zone: "z", HashKey: "k", FirstSeen: t0}},
		Departed:  []Departure{{Endpoint: Endpoint{Address: "10.0.0.9", Port: 1, Weight: 1}, Gone: t0}},
		Readers:   []string{"team-a"}}
	edits := map[string]func(*Cluster){
		"name": func(c *Cluster) { c.Name = "b" }, "policy": func(c *Cluster) { c.Policy = PolicySkipper },
		"header": func(c *Cluster) { c.HashHeader = "g" }, "min": func(c *Cluster) { c.MinRingSize = 2 },
		"max": func(c *Cluster) { c.MaxRingSize = 16 }, "table": func(c *Cluster) { c.TableSize = 7 },
		"fade off":      func(c *Cluster) { c.FadeIn = nil },
		"fade exponent": func(c *Cluster) { c.FadeIn.Exponent = 2 },
		"address":       func(c *Cluster) { c.Endpoints[0].Address = "10.0.0.2" },
		"port":          func(c *Cluster) { c.Endpoints[0].Port = 2 },
		"weight":        func(c *Cluster) { c.Endpoints[0].Weight = 2 },
		"scheme":        func(c *Cluster) { c.Endpoints[0].Scheme = "h2c" },
		"zone":          func(c *Cluster) { c.Endpoints[0].Zone = "y" },
		"hash key":      func(c *Cluster) { c.Endpoints[0].HashKey = "j" },
		"first seen":    func(c *Cluster) { c.Endpoints[0].FirstSeen = t0.Add(time.Second) },
		"extra":         func(c *Cluster) { c.Endpoints = append(c.Endpoints, Endpoint{}) },
		"departed":      func(c *Cluster) { c.Departed = nil },
		"departed port": func(c *Cluster) { c.Departed[0].Endpoint.Port = 2 },
		"gone":          func(c *Cluster) { c.Departed[0].Gone = t0.Add(time.Second) },
		"readers":       func(c *Cluster) { c.Readers = append(c.Readers, "team-b") },
		"reader":        func(c *Cluster) { c.Readers[0] = "team-b" },
	}
	for name, edit := range edits {
		c := base.Clone()
		if !c.Equal(&base) {
			t.Fatal("a clone is not equal")
		}
		edit(&c)
		if c.Equal(&base) || base.Equal(&c) {
			t.Errorf("Equal misses a change of %s", name)
		}
	}
	loc := base.Clone()
	loc.Endpoints[0].FirstSeen = t0.In(time.FixedZone("x", 3600))
	if !loc.Equal(&base) {
		t.Error("the same instant in another zone compares unequal")
	}
}

// Every data plane must see one spelling per address: Envoy and C-core hash
// the canonical text, grpc-go and grpc-js the text as published.
func TestNormalizeCanonicalisesAddresses(t *testing.T) {
	c := Cluster{Name: "c", Endpoints: []Endpoint{
		{Address: "FD00:0:0::0001", Port: 80},
		{Address: "0:0:0:0:0:0:0:1", Port: 80},
		{Address: "::FFFF:10.0.0.2", Port: 80},
		{Address: "10.0.0.1", Port: 80},
	}}
	st := State{Clusters: []Cluster{c}}
	if err := st.Normalize(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ep := range st.Clusters[0].Endpoints {
		got = append(got, ep.Address)
	}
	if want := []string{"fd00::1", "::1", "::ffff:10.0.0.2", "10.0.0.1"}; !slices.Equal(got, want) {
		t.Fatalf("addresses %q, want %q", got, want)
	}
	// Two spellings of one address are one endpoint listed twice.
	dup := State{Clusters: []Cluster{{Name: "c", Endpoints: []Endpoint{{Address: "fd00::1", Port: 80}, {Address: "FD00:0:0::0001", Port: 80}}}}}
	if err := dup.Normalize(); err == nil || !strings.Contains(err.Error(), "duplicates endpoints[0] ([fd00::1]:80)") {
		t.Fatalf("Normalize = %v, want a duplicate of endpoints[0]", err)
	}
}

// An endpoint kept apart is checked on its own fields but compared with no
// other: a source that could not read its port must not report it as a
// duplicate of another endpoint at port 0.
func TestValidateApartChecksOwnFieldsOnly(t *testing.T) {
	c := Cluster{Name: "a", Endpoints: []Endpoint{
		{Address: "10.0.0.1"},               // port unread, so 0
		{Address: "10.0.0.1"},               // the same
		{Address: "10.0.0.2", Port: 80},     // clean
		{Address: "bad", Port: 80},          // apart, yet its address is checked
		{Address: "10.0.0.3", HashKey: "k"}, // apart: hash_key clashes are not reported
		{Address: "10.0.0.4", Port: 80, HashKey: "k"},
	}}
	c.ApplyDefaults()
	apart := map[int]bool{0: true, 1: true, 3: true, 4: true}
	var fields []string
	for _, e := range errorsOf(c.ValidateApart(func(i int) bool { return apart[i] })) {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a FieldError", e)
		}
		fields = append(fields, fe.Field)
	}
	want := []string{"endpoints[0].port", "endpoints[1].port", "endpoints[3].address", "endpoints[4].port"}
	if !slices.Equal(fields, want) {
		t.Errorf("errors at %q, want %q", fields, want)
	}
	// Without apart the same cluster has the duplicate and the clash too.
	all := errorsOf(c.Validate())
	if len(all) != len(want)+2 {
		t.Errorf("Validate found %d problems, want %d: %v", len(all), len(want)+2, all)
	}
}

func errorsOf(err error) []error {
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		return u.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}
