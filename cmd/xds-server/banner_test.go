package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
)

// The banner links /debug/pick with a cluster the loaded file has, never
// with the example's name when the file has no such cluster.
func TestBannerLinksALoadedCluster(t *testing.T) {
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(file, []byte("clusters:\n  - name: orders\n    lb_policy: maglev\n    endpoints: [{address: 10.0.0.1, port: 80}]\n"+
		"  - name: users\n    endpoints: [{address: 10.0.0.2, port: 80}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lis := &listeners{xds: loopback(t), debug: loopback(t)}
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--log-level=warn", "--file", file}, out, lis) }()
	base := "http://" + lis.debug.Addr().String()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "where a key goes") {
		if time.Now().After(deadline) {
			t.Fatalf("no banner within 10 s:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	banner := out.String()
	// users is ring_hash, where every data plane picks alike.
	if !strings.Contains(banner, base+"/debug/pick?cluster=users&key=") || strings.Contains(banner, "products") {
		t.Errorf("banner does not link a loaded ring_hash cluster:\n%s", banner)
	}
	if strings.Contains(banner, "built into the binary") {
		t.Errorf("banner for --file talks of the embedded example:\n%s", banner)
	}
	var link string
	for _, line := range strings.Split(banner, "\n") {
		if i := strings.Index(line, base+"/debug/pick?"); i >= 0 {
			link = line[i:]
		}
	}
	for {
		resp, err := http.Get(link)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the banner's link %s does not answer 200 (last %v)", link, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
}

// A configuration mistake is logged at Error, once per problem: without a
// Go stack trace, which says nothing about the mistake. DPanic, which
// marks a bug in ringxds, keeps its trace.
func TestLoggerTracesOnlyBugs(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger("info", zapcore.AddSync(&buf))
	if err != nil {
		t.Fatal(err)
	}
	log.Error("endpoints file rejected")
	if strings.Contains(buf.String(), "stacktrace") {
		t.Errorf("an Error line carries a stack trace: %s", buf.String())
	}
	buf.Reset()
	log.DPanic("a bug")
	if !strings.Contains(buf.String(), `"stacktrace"`) {
		t.Errorf("a DPanic line has no stack trace: %s", buf.String())
	}
}
