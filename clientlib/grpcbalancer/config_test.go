package grpcbalancer

import (
	"strings"
	"testing"
	"time"
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

func TestParseFadeConfig(t *testing.T) {
	const good = `{"hash_header":"X-Product-ID","fade_duration":"10s","fade_exponent":2.5,"endpoints":[` +
		`{"address":"10.0.0.1:80","key":"a","ring_entries":32},` +
		`{"address":"10.0.0.2:80","key":"b","ring_entries":32,"fade_start":"2026-01-01T00:00:00.5Z"}]}`
	c, err := parseFadeConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if c.HashHeader != "x-product-id" || c.fade.Curve.Duration != 10*time.Second || len(c.fade.Members) != 2 || c.fade.Members[1].FadeStart.IsZero() {
		t.Fatalf("parsed %+v %+v", c, c.fade)
	}
	// grpc-go marshals parsed configs and parses them again.
	js, err := c.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	again, err := parseFadeConfig(js)
	if err != nil || !again.equal(c) {
		t.Fatalf("round trip: %v, equal %v", err, again.equal(c))
	}
	// The schedule's own checks are internal/fadeschedule's; they reach
	// grpc-go as a config error.
	if _, err := parseFadeConfig([]byte(`{"fade_duration":"10s","endpoints":[]}`)); err == nil {
		t.Error("a schedule without endpoints parsed")
	}
}
