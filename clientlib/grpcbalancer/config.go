package grpcbalancer

import (
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/grpc/serviceconfig"

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
