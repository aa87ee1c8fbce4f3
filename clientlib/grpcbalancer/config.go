package grpcbalancer

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/serviceconfig"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/ringhash"
)

// Name is the policy's registered name, the last path segment of the
// TypedStruct type_url ringxds publishes.
const Name = "ringxds.skipper"

// DefaultHashHeader is the metadata key hashed when the config names none:
// ringxds' default hash header.
const DefaultHashHeader = "x-hash-key"

type config struct {
	serviceconfig.LoadBalancingConfig `json:"-"`

	HashHeader  string `json:"hash_header,omitempty"`
	Policy      string `json:"policy,omitempty"`
	Scheme      string `json:"scheme,omitempty"`
	MinRingSize uint64 `json:"min_ring_size,omitempty"`
	MaxRingSize uint64 `json:"max_ring_size,omitempty"`
	TableSize   uint64 `json:"table_size,omitempty"`

	// fade is the fade-in schedule of a ringxds.ring_hash config, nil for
	// ringxds.skipper.
	fade *fadeConfig
	// raw is the ringxds.ring_hash config as received.
	raw string
}

// MarshalJSON writes the config back as it was read: grpc-go marshals the
// parsed configs of a policy tree and parses them again on their way down
// (xds cluster_impl and priority configs carry their children as JSON).
func (c *config) MarshalJSON() ([]byte, error) {
	if c.fade != nil {
		return []byte(c.raw), nil
	}
	type plain config
	return json.Marshal((*plain)(c))
}

// equal reports whether two configs build the same rings.
func (c *config) equal(d *config) bool {
	if c == nil || d == nil {
		return c == d
	}
	a, b := *c, *d
	a.fade, b.fade, a.raw, b.raw = nil, nil, "", ""
	return a == b && c.fade.equal(d.fade)
}

func parseConfig(js json.RawMessage) (*config, error) {
	c := &config{}
	if len(js) > 0 && string(js) != "null" {
		if err := json.Unmarshal(js, c); err != nil {
			return nil, fmt.Errorf("%s: bad config %s: %w", Name, js, err)
		}
	}
	if c.HashHeader == "" {
		c.HashHeader = DefaultHashHeader
	}
	// gRPC metadata keys are lower case.
	c.HashHeader = strings.ToLower(c.HashHeader)
	if strings.HasSuffix(c.HashHeader, "-bin") {
		return nil, fmt.Errorf("%s: hash_header %q: binary headers cannot be hashed", Name, c.HashHeader)
	}
	switch c.Policy {
	case "":
		c.Policy = ringhash.PolicySkipper
	case ringhash.PolicySkipper, ringhash.PolicyRingHash, ringhash.PolicyMaglev:
	default:
		return nil, fmt.Errorf("%s: unknown policy %q (want skipper, ring_hash or maglev)", Name, c.Policy)
	}
	switch c.Scheme {
	case "":
		c.Scheme = "http"
	case "http", "https", "h2c":
	default:
		return nil, fmt.Errorf("%s: unknown scheme %q (want http, https or h2c)", Name, c.Scheme)
	}
	return c, nil
}

// NameRingHash is the registered name of the fade-in policy ringxds
// publishes to gRPC clients, ahead of ring_hash, for ring_hash clusters laid
// out for fade-in: the last path segment of its TypedStruct type_url.
const NameRingHash = "ringxds.ring_hash"

// fadeConfig is the schedule of a ringxds.ring_hash cluster: everything the
// client library reads from EDS metadata, which grpc-go does not hand to
// balancers.
type fadeConfig struct {
	curve fadein.Curve
	// members by address, in the order the config lists them.
	byAddr map[string]fadeMember
	order  []string
}

type fadeMember struct {
	key     string
	entries uint32
	start   time.Time // zero: established
}

// equal reports whether two schedules build the same rings.
func (f *fadeConfig) equal(g *fadeConfig) bool {
	if f == nil || g == nil {
		return f == g
	}
	return f.curve == g.curve && slices.Equal(f.order, g.order) && maps.EqualFunc(f.byAddr, g.byAddr, func(a, b fadeMember) bool {
		return a.key == b.key && a.entries == b.entries && a.start.Equal(b.start)
	})
}

// fadeJSON is the TypedStruct value internal/snapshot publishes.
type fadeJSON struct {
	HashHeader   string  `json:"hash_header"`
	FadeDuration string  `json:"fade_duration"`
	FadeExponent float64 `json:"fade_exponent"`
	Endpoints    []struct {
		Address     string  `json:"address"`
		Key         string  `json:"key"`
		RingEntries float64 `json:"ring_entries"`
		FadeStart   string  `json:"fade_start"`
	} `json:"endpoints"`
}

func parseFadeConfig(js json.RawMessage) (*config, error) {
	var in fadeJSON
	if err := json.Unmarshal(js, &in); err != nil {
		return nil, fmt.Errorf("%s: bad config %s: %w", NameRingHash, js, err)
	}
	hdr, err := json.Marshal(map[string]string{"hash_header": in.HashHeader, "policy": ringhash.PolicyRingHash})
	if err != nil {
		return nil, err
	}
	c, err := parseConfig(hdr)
	if err != nil {
		return nil, err
	}
	f := &fadeConfig{byAddr: make(map[string]fadeMember, len(in.Endpoints)), order: make([]string, 0, len(in.Endpoints))}
	if f.curve.Duration, err = time.ParseDuration(in.FadeDuration); err != nil {
		return nil, fmt.Errorf("%s: fade_duration: %w", NameRingHash, err)
	}
	f.curve.Exponent = in.FadeExponent
	if len(in.Endpoints) == 0 {
		return nil, fmt.Errorf("%s: no endpoints", NameRingHash)
	}
	for i, ep := range in.Endpoints {
		m := fadeMember{key: ep.Key, entries: uint32(ep.RingEntries)}
		if ep.Address == "" || ep.Key == "" || ep.RingEntries < 1 || ep.RingEntries > ringhash.MaxRingSizeLimit || float64(m.entries) != ep.RingEntries {
			return nil, fmt.Errorf("%s: endpoint %d: need an address, a key and a whole ring_entries of 1..%d", NameRingHash, i, ringhash.MaxRingSizeLimit)
		}
		if ep.FadeStart != "" {
			if m.start, err = time.Parse(time.RFC3339Nano, ep.FadeStart); err != nil {
				return nil, fmt.Errorf("%s: endpoint %d: fade_start: %w", NameRingHash, i, err)
			}
		}
		if _, dup := f.byAddr[ep.Address]; dup {
			return nil, fmt.Errorf("%s: endpoint %s listed twice", NameRingHash, ep.Address)
		}
		f.byAddr[ep.Address] = m
		f.order = append(f.order, ep.Address)
	}
	c.fade, c.raw = f, string(js)
	return c, nil
}
