package model

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringxds/ringxds/internal/authz"
	"github.com/ringxds/ringxds/internal/ringhash"
)

// Policy names the consistent-hash dialect a cluster is balanced with.
type Policy string

// The supported policies. The string values are the user-facing spelling in
// the file source and in Kubernetes annotations.
const (
	// PolicyRingHash is Envoy's RING_HASH, which grpc-go implements too.
	PolicyRingHash Policy = "ring_hash"
	// PolicyMaglev is Envoy's MAGLEV. gRPC clients receive it as ring_hash.
	PolicyMaglev Policy = "maglev"
	// PolicySkipper is Skipper's consistentHash ring (100 vnodes per endpoint).
	PolicySkipper Policy = "skipper"
)

// Policies lists every valid Policy, in documentation order.
var Policies = []Policy{PolicyRingHash, PolicyMaglev, PolicySkipper}

// ParsePolicy validates a user-supplied policy name.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown lb_policy %q (want one of ring_hash, maglev, skipper)", s)
}

// Defaults that every source applies, so that a cluster means the same thing
// whichever source described it.
const (
	// DefaultHashHeader is the request header hashed when a cluster names none.
	DefaultHashHeader = "x-hash-key"
	// DefaultScheme is the Skipper identity scheme when an endpoint names none.
	DefaultScheme = "http"
	// DefaultMaglevTableSize is Envoy's default Maglev table size.
	DefaultMaglevTableSize = ringhash.DefaultMaglevTableSize
	// MaxMaglevTableSize is the largest table Envoy accepts.
	MaxMaglevTableSize = ringhash.MaxMaglevTableSize
	// DefaultRingSize is the ring_hash minimum and maximum ring size used when
	// a cluster sets neither: grpc-go's default ring cap, so Envoy, grpc-go
	// and ringxds all build the same ring (see docs/ring-sizes.md).
	DefaultRingSize = ringhash.GRPCRingHashCap
	// MaxRingSize is Envoy's upper bound for maximum_ring_size.
	MaxRingSize = ringhash.MaxRingSizeLimit
	// DefaultFadeInDuration is the fade-in window when fade_in sets none.
	DefaultFadeInDuration = 30 * time.Second
	// DefaultFadeInExponent is the fade-in curve exponent when fade_in sets none.
	DefaultFadeInExponent = 2.5
)

// FadeIn configures how a new endpoint's traffic share ramps up:
// share(t) = min(1, (t/Duration)^Exponent).
type FadeIn struct {
	Duration time.Duration
	Exponent float64
	// Capacity, when set, is the largest endpoint weight sum (the endpoint
	// count, at weight 1) the ring_hash ring is laid out for: every unit of
	// weight gets maximum_ring_size / Capacity entries, whatever the
	// cluster's current size, so scaling anywhere up to Capacity never
	// re-lays the ring out. Zero picks the entries per weight from the
	// current weight sum (see fadein.EntriesPerWeight).
	Capacity uint64
}

// Endpoint is one backend of a cluster.
type Endpoint struct {
	// Address is an IPv4 or IPv6 literal.
	Address string
	Port    uint32
	// Weight is at least 1.
	Weight uint32
	// Scheme is part of the Skipper ring identity: http, https or h2c.
	Scheme string
	// Zone is carried as metadata only; it never splits the ring.
	Zone string
	// HashKey, when set, replaces the address as the endpoint's ring key
	// (Envoy's envoy.lb hash_key metadata).
	HashKey string
	// FirstSeen is when the source first saw this endpoint, if it knows.
	// Fade-in ramps from this instant. The zero time means "established".
	FirstSeen time.Time
}

// RingKey is the string the endpoint is hashed under on a ring_hash ring
// and its identity across versions: its HashKey if set, else HostPort.
// Envoy and grpc-go derive the same from the published metadata and
// address, and Validate keeps it unique within a cluster.
func (e Endpoint) RingKey() string { return cmp.Or(e.HashKey, e.HostPort()) }

// HostPort is the endpoint's "host:port" with IPv6 bracketed, which is
// both the Envoy ring key and the identity used in picks.
func (e Endpoint) HostPort() string {
	return net.JoinHostPort(e.Address, strconv.FormatUint(uint64(e.Port), 10))
}

// Cluster is a named set of endpoints balanced by one policy.
type Cluster struct {
	// Name is the CDS and EDS resource name and the gRPC target xds:///Name.
	Name       string
	Policy     Policy
	HashHeader string
	// MinRingSize and MaxRingSize apply to ring_hash (and to the ring_hash
	// that gRPC clients receive for maglev and skipper clusters).
	MinRingSize uint64
	MaxRingSize uint64
	// TableSize applies to maglev; it must be prime.
	TableSize uint64
	// FadeIn is nil when new endpoints take their full share at once.
	FadeIn    *FadeIn
	Endpoints []Endpoint
	// Departed lists endpoints that left the cluster while a fade-in was
	// under way, so the fade-in plan can replay the ring as it was before
	// each left: a plan redone without them could take back a ring entry
	// it had already published (fadein.PlanRamp). Sources keep a
	// departure until the cluster's last fade is over; only fade-in
	// planning reads them.
	Departed []Departure
	// Readers lists who may read the cluster besides its own namespace
	// when the server authorizes readers (package authz): namespaces, DNS
	// names and SPIFFE IDs. It changes no xDS resource.
	Readers []string
}

// Departure is an endpoint that left a cluster during a fade-in.
type Departure struct {
	// Endpoint is the endpoint as it was when it left, FirstSeen included.
	Endpoint Endpoint
	// Gone is when the source saw it leave.
	Gone time.Time
}

// State is everything a source currently describes: the clusters, sorted by
// name. A State is a value: sources build a new one on every change.
type State struct {
	Clusters []Cluster
	// ChangedAt is when the source first saw the earliest input change that
	// this State reflects (before coalescing). The server measures
	// change-to-push latency from it. Zero when unknown.
	ChangedAt time.Time
}

// Cluster returns the named cluster.
func (s *State) Cluster(name string) (*Cluster, bool) {
	i, ok := slices.BinarySearchFunc(s.Clusters, name, func(c Cluster, n string) int { return strings.Compare(c.Name, n) })
	if !ok {
		return nil, false
	}
	return &s.Clusters[i], true
}

// ApplyDefaults fills the fields a source left empty with the documented
// defaults. It does not validate.
func (c *Cluster) ApplyDefaults() {
	if c.Policy == "" {
		c.Policy = PolicyRingHash
	}
	if c.HashHeader == "" {
		c.HashHeader = DefaultHashHeader
	}
	if c.MinRingSize == 0 && c.MaxRingSize == 0 {
		c.MinRingSize, c.MaxRingSize = DefaultRingSize, DefaultRingSize
	} else if c.MaxRingSize == 0 {
		c.MaxRingSize = max(c.MinRingSize, DefaultRingSize)
	} else if c.MinRingSize == 0 {
		c.MinRingSize = min(c.MaxRingSize, 1024)
	}
	if c.Policy == PolicyMaglev && c.TableSize == 0 {
		c.TableSize = DefaultMaglevTableSize
	}
	if c.FadeIn != nil {
		if c.FadeIn.Duration == 0 {
			c.FadeIn.Duration = DefaultFadeInDuration
		}
		if c.FadeIn.Exponent == 0 {
			c.FadeIn.Exponent = DefaultFadeInExponent
		}
	}
	for i := range c.Endpoints {
		ep := &c.Endpoints[i]
		if ep.Weight == 0 {
			ep.Weight = 1
		}
		if ep.Scheme == "" {
			ep.Scheme = DefaultScheme
		}
		// One spelling per address: Envoy and C-core hash the canonical
		// text (inet_ntop), grpc-go and grpc-js the text as published, so
		// "FD00:0:0::0001" would put one pod on two different rings. An
		// address that does not parse is left for Validate to report.
		if a, err := netip.ParseAddr(ep.Address); err == nil && a.Zone() == "" {
			ep.Address = a.String()
		}
	}
}

// FieldError names the field of a cluster that is invalid. Sources map
// Field back to a file line or an annotation.
type FieldError struct {
	// Field is a path such as "endpoints[2].port" or "table_size".
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Validate checks a cluster after ApplyDefaults. Errors are *FieldError
// values joined with errors.Join, one per problem.
func (c *Cluster) Validate() error { return c.ValidateApart(nil) }

// ValidateApart is Validate, except that each endpoint i for which apart(i)
// is true is checked on its own fields only, and never compared with the
// others (duplicates, ring keys). A source calls it for endpoints it could
// not read whole: an endpoint whose port was refused is left at port 0, and
// comparing it would report duplicates the input does not have. A nil apart
// compares every endpoint.
func (c *Cluster) ValidateApart(apart func(i int) bool) error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, fieldErr("name", "must not be empty"))
	} else if strings.ContainsAny(c.Name, " \t\r\n/") {
		errs = append(errs, fieldErr("name", "%q must not contain spaces or '/'", c.Name))
	}
	if _, err := ParsePolicy(string(c.Policy)); err != nil {
		errs = append(errs, &FieldError{Field: "lb_policy", Err: err})
	}
	switch {
	case !validHeaderName(c.HashHeader):
		msg := fmt.Sprintf("%q is not a valid lower-case HTTP header name", c.HashHeader)
		if lower := strings.ToLower(c.HashHeader); lower != c.HashHeader && validHeaderName(lower) {
			// Header names are case-insensitive, but C-core matches them
			// as written: the lower-case form is the one every client
			// hashes alike.
			msg += fmt.Sprintf(": write %q", lower)
		}
		errs = append(errs, fieldErr("hash_header", "%s", msg))
	case strings.HasSuffix(c.HashHeader, "-bin"):
		// gRPC carries a -bin header as binary metadata, which its ring
		// hash cannot hash: grpc-go refuses such a hash header and with it
		// the whole cluster.
		errs = append(errs, fieldErr("hash_header", "%q is a binary (-bin) header, which gRPC clients cannot hash", c.HashHeader))
	}
	if c.MinRingSize < 1 || c.MinRingSize > MaxRingSize {
		errs = append(errs, fieldErr("minimum_ring_size", "%d is outside 1..%d", c.MinRingSize, MaxRingSize))
	}
	if c.MaxRingSize < 1 || c.MaxRingSize > MaxRingSize {
		errs = append(errs, fieldErr("maximum_ring_size", "%d is outside 1..%d", c.MaxRingSize, MaxRingSize))
	}
	if c.MinRingSize > c.MaxRingSize {
		errs = append(errs, fieldErr("minimum_ring_size", "%d is larger than maximum_ring_size %d", c.MinRingSize, c.MaxRingSize))
	}
	if c.Policy == PolicyMaglev {
		if c.TableSize > MaxMaglevTableSize || !ringhash.IsPrime(c.TableSize) {
			errs = append(errs, fieldErr("table_size", "%d must be a prime no larger than %d%s", c.TableSize, MaxMaglevTableSize, nearestPrimes(c.TableSize)))
		}
	} else if c.TableSize != 0 {
		errs = append(errs, fieldErr("table_size", "applies only to lb_policy maglev"))
	}
	if c.FadeIn != nil {
		if c.FadeIn.Duration <= 0 {
			errs = append(errs, fieldErr("fade_in.duration", "must be positive"))
		}
		if !(c.FadeIn.Exponent > 0 && c.FadeIn.Exponent <= 100) {
			errs = append(errs, fieldErr("fade_in.exponent", "%v must be in (0, 100]", c.FadeIn.Exponent))
		}
		if c.FadeIn.Capacity > c.MaxRingSize {
			errs = append(errs, fieldErr("fade_in.capacity", "%d is larger than maximum_ring_size %d: the ring could not give every unit of weight an entry", c.FadeIn.Capacity, c.MaxRingSize))
		}
	}
	if len(c.Endpoints) == 0 {
		errs = append(errs, fieldErr("endpoints", "must list at least one endpoint"))
	}
	seen := make(map[string]int, len(c.Endpoints))
	for i, ep := range c.Endpoints {
		f := fmt.Sprintf("endpoints[%d]", i)
		// EDS endpoints are resolved addresses: Envoy rejects a DNS name in
		// an EDS cluster, and grpc-go would hash a name nobody else sees.
		if ep.Address == "" {
			errs = append(errs, fieldErr(f+".address", "must not be empty"))
		} else if a, err := netip.ParseAddr(ep.Address); err != nil || a.Zone() != "" {
			errs = append(errs, fieldErr(f+".address", "%q is not an IPv4 or IPv6 address", ep.Address))
		}
		if ep.Port < 1 || ep.Port > 65535 {
			errs = append(errs, fieldErr(f+".port", "%d is outside 1..65535", ep.Port))
		}
		if ep.Weight < 1 {
			errs = append(errs, fieldErr(f+".weight", "must be at least 1"))
		}
		switch ep.Scheme {
		case "http", "https", "h2c":
		default:
			errs = append(errs, fieldErr(f+".scheme", "%q is not one of http, https, h2c", ep.Scheme))
		}
		if apart != nil && apart(i) {
			continue
		}
		hp := ep.HostPort()
		if j, dup := seen[hp]; dup {
			errs = append(errs, fieldErr(f, "duplicates endpoints[%d] (%s)", j, hp))
		} else {
			seen[hp] = i
		}
	}
	if _, err := authz.ParseReaders(c.Readers); err != nil {
		errs = append(errs, &FieldError{Field: "readers", Err: err})
	}
	errs = append(errs, ringKeyClashes(c.Endpoints, apart)...)
	return errors.Join(errs...)
}

// ringKeyClashes reports endpoints whose ring key (hash_key, else
// host:port) another endpoint already has. Two endpoints with one ring key
// would share ring positions, which no data plane resolves the same way;
// that includes a hash_key spelled like another endpoint's address. Two
// endpoints with one address and no hash_key are reported as duplicates
// instead. Endpoints for which apart is true are left out.
func ringKeyClashes(eps []Endpoint, apart func(i int) bool) []error {
	var errs []error
	owner := make(map[string]int, len(eps))
	for i, ep := range eps {
		if apart != nil && apart(i) {
			continue
		}
		key := ep.RingKey()
		j, dup := owner[key]
		switch {
		case !dup:
			owner[key] = i
		case ep.HashKey != "" && eps[j].HashKey != "":
			errs = append(errs, fieldErr(fmt.Sprintf("endpoints[%d].hash_key", i), "%q is also the hash_key of endpoints[%d]", ep.HashKey, j))
		case ep.HashKey != "":
			errs = append(errs, fieldErr(fmt.Sprintf("endpoints[%d].hash_key", i), "%q is the address of endpoints[%d], whose ring key it is", ep.HashKey, j))
		case eps[j].HashKey != "":
			errs = append(errs, fieldErr(fmt.Sprintf("endpoints[%d]", i), "its address %s is the hash_key of endpoints[%d]; ring keys must differ", key, j))
		}
	}
	return errs
}

// Normalize applies defaults to every cluster, validates it, and sorts the
// clusters by name. Errors are prefixed with the cluster's name.
func (s *State) Normalize() error {
	var errs []error
	names := make(map[string]bool, len(s.Clusters))
	for i := range s.Clusters {
		c := &s.Clusters[i]
		c.ApplyDefaults()
		if err := c.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("cluster %q: %w", c.Name, err))
		}
		if names[c.Name] {
			errs = append(errs, fmt.Errorf("cluster %q: defined twice", c.Name))
		}
		names[c.Name] = true
	}
	slices.SortFunc(s.Clusters, func(a, b Cluster) int { return strings.Compare(a.Name, b.Name) })
	return errors.Join(errs...)
}

// nearestPrimes suggests the allowed table sizes next to n, below and
// above: ": 997 or 1009?" for 1000; ": 5000011?" past the largest.
func nearestPrimes(n uint64) string {
	if n > MaxMaglevTableSize {
		return fmt.Sprintf(": %d?", MaxMaglevTableSize)
	}
	var below, above uint64
	for p := n; p >= 2; p-- {
		if ringhash.IsPrime(p) {
			below = p
			break
		}
	}
	for p := n + 1; p <= MaxMaglevTableSize; p++ {
		if ringhash.IsPrime(p) {
			above = p
			break
		}
	}
	switch {
	case below != 0 && above != 0:
		return fmt.Sprintf(": %d or %d?", below, above)
	case above != 0:
		return fmt.Sprintf(": %d?", above)
	case below != 0:
		return fmt.Sprintf(": %d?", below)
	}
	return ""
}

func validHeaderName(h string) bool {
	if h == "" || strings.HasPrefix(h, ":") {
		return false
	}
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}

// Equal reports whether two clusters describe the same thing, field by
// field. Times compare as instants.
func (c *Cluster) Equal(o *Cluster) bool {
	if c.Name != o.Name || c.Policy != o.Policy || c.HashHeader != o.HashHeader ||
		c.MinRingSize != o.MinRingSize || c.MaxRingSize != o.MaxRingSize || c.TableSize != o.TableSize ||
		(c.FadeIn == nil) != (o.FadeIn == nil) || (c.FadeIn != nil && *c.FadeIn != *o.FadeIn) ||
		len(c.Endpoints) != len(o.Endpoints) || len(c.Departed) != len(o.Departed) ||
		!slices.Equal(c.Readers, o.Readers) {
		return false
	}
	for i := range c.Endpoints {
		if !c.Endpoints[i].equal(&o.Endpoints[i]) {
			return false
		}
	}
	for i := range c.Departed {
		a, b := &c.Departed[i], &o.Departed[i]
		if !a.Endpoint.equal(&b.Endpoint) || !a.Gone.Equal(b.Gone) {
			return false
		}
	}
	return true
}

func (a *Endpoint) equal(b *Endpoint) bool {
	return a.Address == b.Address && a.Port == b.Port && a.Weight == b.Weight && a.Scheme == b.Scheme &&
		a.Zone == b.Zone && a.HashKey == b.HashKey && a.FirstSeen.Equal(b.FirstSeen)
}

// Clone returns a copy that shares nothing mutable with c.
func (c *Cluster) Clone() Cluster {
	out := *c
	if c.FadeIn != nil {
		f := *c.FadeIn
		out.FadeIn = &f
	}
	out.Endpoints = slices.Clone(c.Endpoints)
	out.Departed = slices.Clone(c.Departed)
	out.Readers = slices.Clone(c.Readers)
	return out
}
