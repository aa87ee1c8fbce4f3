package watch

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A reload's CPU time is counted on the source's own series, so that the
// scale benchmark can tell parsing from fanning out.
func TestFileSourceCountsItsCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the thread's CPU time is read on Linux only")
	}
	var sb strings.Builder
	sb.WriteString("clusters:\n")
	for c := range 20 {
		fmt.Fprintf(&sb, "  - name: svc-%02d\n    endpoints:\n", c)
		for e := range 100 {
			fmt.Fprintf(&sb, "      - {address: 10.%d.%d.1, port: 8080}\n", c, e)
		}
	}
	reg := prometheus.NewRegistry()
	src, err := NewFileSourceFromBytes("endpoints.yaml", []byte(sb.String()), FileOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := src.Load(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := testutil.GatherAndCount(reg, sourceCPUName); err != nil || n != 1 {
		t.Fatalf("%d series of %s (%v)", n, sourceCPUName, err)
	}
	if got := testutil.ToFloat64(src.cpu); got <= 0 {
		t.Fatalf("%s = %v after five parses of 2,000 endpoints", sourceCPUName, got)
	}
}
