package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestUsageErrorsExitTwoAndHelpExitsZero(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--help"}, 0, ""},
		{nil, 2, "give --server"},
		{[]string{"--server", "127.0.0.1:1"}, 2, "--file"},
		{[]string{"--server", "127.0.0.1:1", "--spawn-server"}, 2, "exclude each other"},
		{[]string{"--spawn-server", "--server-env", "NOEQUALS"}, 2, "KEY=VALUE"},
		{[]string{"--spawn-server", "extra"}, 2, "unexpected arguments"},
		{[]string{"--spawn-server", "--replicas", "0"}, 2, "at least one"},
		{[]string{"--server", "127.0.0.1:1", "--file", "f", "--replicas", "2"}, 2, "with --spawn-server"},
		{[]string{"--spawn-server", "--replicas", "2", "--slow-consumers", "5"}, 2, "leave out --replicas"},
	} {
		var stdout, stderr bytes.Buffer
		code, err := run(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d (err %v)", tc.args, code, tc.code, err)
		}
		if tc.msg != "" && (err == nil || !strings.Contains(err.Error()+stderr.String(), tc.msg)) {
			t.Errorf("%q: error %v does not say %q", tc.args, err, tc.msg)
		}
		if stdout.Len() != 0 {
			t.Errorf("%q: wrote %q to stdout, which is reserved for the summary line", tc.args, stdout.String())
		}
	}
}
