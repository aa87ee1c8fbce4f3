package buildinfo

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The toolchain's stamp is read as go build writes it in a git checkout,
// and -ldflags values replace it only where given.
func TestFromBuildInfo(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/ringxds/ringxds", Version: "v0.0.0-20261201221458-452cb529997b+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "452cb529997be169207f9af28fa3f00da30d2e3f"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name       string
		bi         *debug.BuildInfo
		ldV, ldRev string
		want       Info
	}{
		{"stamped", stamped, "", "", Info{Version: "v0.0.0-20261201221458-452cb529997b+dirty", Revision: "452cb529997be169207f9af28fa3f00da30d2e3f", Modified: true, GoVersion: "go1.26.8"}},
		{"tagged release via ldflags", stamped, "v1.2.3", "", Info{Version: "v1.2.3", Revision: "452cb529997be169207f9af28fa3f00da30d2e3f", Modified: true, GoVersion: "go1.26.8"}},
		{"no vcs", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "", "", Info{Version: "devel", Revision: Unknown, GoVersion: "go1.26.8"}},
		{"no vcs, ldflags", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "v1.2.3", "abc", Info{Version: "v1.2.3", Revision: "abc", GoVersion: "go1.26.8"}},
		{"no build info", nil, "", "", Info{Version: "devel", Revision: Unknown, GoVersion: Unknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FromBuildInfo(tc.bi, tc.ldV, tc.ldRev); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The metric is one series at 1 whose labels are the build, abbreviated
// as the page shows it.
func TestCollector(t *testing.T) {
	info := Info{Version: "v1.2.3", Revision: "452cb529997be169207f9af28fa3f00da30d2e3f", Modified: true, GoVersion: "go1.26.8"}
	reg := prometheus.NewRegistry()
	reg.MustRegister(info.Collector())
	want := `
# HELP ringxds_build_info Always 1; its labels name the build the process runs: module version, commit (+modified with local changes) and Go version.
# TYPE ringxds_build_info gauge
ringxds_build_info{go_version="go1.26.8",revision="452cb529997b+modified",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ringxds_build_info"); err != nil {
		t.Fatal(err)
	}
	if got, want := info.Text("xds-server"), "xds-server v1.2.3\nrevision: 452cb529997be169207f9af28fa3f00da30d2e3f (modified)\ngo: go1.26.8\n"; got != want {
		t.Fatalf("Text = %q, want %q", got, want)
	}
}

// POD_NAME names the replica when the manifests set it; the host name
// otherwise.
func TestLocal(t *testing.T) {
	t.Setenv("POD_NAME", "ringxds-7d9f-abcde")
	if r := Local(); r.Name != "ringxds-7d9f-abcde" || r.Build.GoVersion == "" {
		t.Fatalf("Local() = %+v", r)
	}
	t.Setenv("POD_NAME", "")
	if r := Local(); r.Name == "" || r.Name == "ringxds-7d9f-abcde" {
		t.Fatalf("Local() without POD_NAME = %+v", r)
	}
}

// The -ldflags -X names the package documents are the ones that take
// effect: a misspelt one would be ignored by the linker without a word.
func TestLdflagsNames(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "printbuild")
	const pkg = "github.com/ringxds/ringxds/internal/buildinfo"
	// -buildvcs=false: in a checkout with local changes the stamp would
	// add "(modified)".
	cmd := exec.Command("go", "build", "-buildvcs=false", "-ldflags", "-X "+pkg+".version=v9.8.7 -X "+pkg+".revision=feedface", "-o", bin, "./testdata/printbuild")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "printbuild v9.8.7\nrevision: feedface\ngo: " + runtime.Version() + "\n"
	if string(out) != want {
		t.Fatalf("printbuild printed %q, want %q", out, want)
	}
}
