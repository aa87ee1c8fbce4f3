package main

import (
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/ringxds/ringxds/internal/buildinfo"
)

// --version prints the build on stdout and exits 0 without serving: the
// real main, in a child process (TestMain runs main there).
func TestVersionFlag(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "--version")
	cmd.Env = append(os.Environ(), serveEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("xds-server --version: %v; stderr:\n%s", err, stderr.String())
	}
	info := buildinfo.Read()
	want := "xds-server " + info.Version + "\nrevision: " + info.Revision
	if !strings.HasPrefix(string(out), want) || !strings.HasSuffix(string(out), "go: "+runtime.Version()+"\n") {
		t.Fatalf("stdout %q, want %q... ending in the Go version %s", out, want, runtime.Version())
	}
	if stderr.Len() > 0 {
		t.Errorf("--version wrote to stderr: %s", stderr.String())
	}
}

// The running server exports the same build as ringxds_build_info and says
// it in its banner.
func TestBuildInfoMetric(t *testing.T) {
	t.Setenv("POD_NAME", "xds-under-test")
	lis := &listeners{xds: loopback(t), debug: loopback(t)}
	base := "http://" + lis.debug.Addr().String()
	out := startRun(t, nil, lis, base)
	info := buildinfo.Read()
	_, body := fetch(t, base, "/metrics", "")
	re := regexp.MustCompile(`(?m)^ringxds_build_info\{go_version="([^"]*)",revision="([^"]*)",version="([^"]*)"\} 1$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics has no ringxds_build_info series at 1:\n%s", grepLines(body, "build_info"))
	}
	if m[1] != runtime.Version() || m[2] != info.ShortRevision() || m[3] != info.Version {
		t.Errorf("ringxds_build_info labels %q, want go_version %s, revision %s, version %s", m[1:], runtime.Version(), info.ShortRevision(), info.Version)
	}
	if banner := out.String(); !strings.Contains(banner, "xds-under-test") || !strings.Contains(banner, info.Version) {
		t.Errorf("banner does not name the replica and version:\n%s", banner)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
