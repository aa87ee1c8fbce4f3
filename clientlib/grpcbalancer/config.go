package grpcbalancer

import (
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/grpc/serviceconfig"

	"github.com/ringxds/ringxds/internal/fadeschedule"
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
	fade *fadeschedule.Schedule
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
	return a == b && c.fade.Equal(d.fade)
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
const NameRingHash = fadeschedule.PolicyName

// parseFadeConfig reads a ringxds.ring_hash config: a schedule
// (internal/fadeschedule, which /debug/pick reads the same way) hashing its
// header on grpc-go's ring.
func parseFadeConfig(js json.RawMessage) (*config, error) {
	f, err := fadeschedule.Parse(js)
	if err != nil {
		return nil, err
	}
	hdr, err := json.Marshal(map[string]string{"hash_header": f.HashHeader, "policy": ringhash.PolicyRingHash})
	if err != nil {
		return nil, err
	}
	c, err := parseConfig(hdr)
	if err != nil {
		return nil, err
	}
	c.fade, c.raw = f, string(js)
	return c, nil
}
