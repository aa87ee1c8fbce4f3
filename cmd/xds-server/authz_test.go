package main

import (
	"io"
	"strings"
	"testing"
)

func TestAuthzFlags(t *testing.T) {
	tls := []string{"--tls-cert=c.pem", "--tls-key=k.pem", "--tls-client-ca=ca.pem"}
	for _, tc := range []struct {
		args   []string
		policy bool
		err    string
	}{
		{nil, false, ""},
		{tls, false, ""}, // mTLS alone changes nothing
		{append(tls, "--authz=namespace"), true, ""},
		{append(tls, "--authz=namespace", "--authz-cluster-readers=spiffe://td/ns/ops/sa/dash, audit"), true, ""},
		{[]string{"--authz=namespace"}, false, "--tls-client-ca"},
		{[]string{"--tls-cert=c.pem", "--tls-key=k.pem", "--authz=namespace"}, false, "--tls-client-ca"},
		{append(tls, "--authz=everyone"), false, "want off or namespace"},
		{append(tls, "--authz-cluster-readers=audit"), false, "needs --authz=namespace"},
		{append(tls, "--authz=namespace", "--authz-cluster-readers=Not_A_Name"), false, "--authz-cluster-readers"},
	} {
		c, err := parseFlags(tc.args, io.Discard)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one mentioning %q", tc.args, err, tc.err)
		case err == nil && (c.authzPolicy != nil) != tc.policy:
			t.Errorf("%q: policy %v, want set %v", tc.args, c.authzPolicy, tc.policy)
		}
	}
}
