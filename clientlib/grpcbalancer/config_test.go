package grpcbalancer

import (
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		in, err     string
		header, pol string
	}{
		{in: ``, header: "x-hash-key", pol: "skipper"},
		{in: `{}`, header: "x-hash-key", pol: "skipper"},
		{in: `{"hash_header":"X-Product-ID"}`, header: "x-product-id", pol: "skipper"},
		{in: `{"policy":"maglev","table_size":65537}`, header: "x-hash-key", pol: "maglev"},
		{in: `{"policy":"round_robin"}`, err: "unknown policy"},
		{in: `{"scheme":"ftp"}`, err: "unknown scheme"},
		{in: `{"hash_header":"x-key-bin"}`, err: "binary"},
		{in: `[1]`, err: "bad config"},
	} {
		c, err := parseConfig([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one mentioning %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if c.HashHeader != tc.header || c.Policy != tc.pol {
			t.Errorf("%s: header %q policy %q, want %q %q", tc.in, c.HashHeader, c.Policy, tc.header, tc.pol)
		}
	}
}
