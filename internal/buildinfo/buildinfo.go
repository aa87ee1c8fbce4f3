// Package buildinfo says which build of ringxds a process runs and which
// replica it is, so an operator can tell replicas and rollouts apart:
// xds-server --version, the ringxds_build_info metric, the debug page
// header, /debug/clients and ringxdsctl status all show the same.
//
// Everything comes from the Go toolchain's own stamp
// (runtime/debug.ReadBuildInfo): go build in a git checkout records the
// module version (the tag, vX.Y.Z, when the commit has one; a pseudo-version
// otherwise), the commit and whether the tree had local changes. A build
// without the repository's .git (a container build whose context leaves it
// out, or GOFLAGS=-buildvcs=false) has none of that; pass it with -ldflags
// there:
//
//	go build -ldflags "-X github.com/ringxds/ringxds/internal/buildinfo.version=v1.2.3 \
//	  -X github.com/ringxds/ringxds/internal/buildinfo.revision=$(git rev-parse HEAD)" ./cmd/xds-server
package buildinfo

import (
	"cmp"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// version and revision are set by -ldflags -X where the toolchain cannot
// stamp them. When set they win over the toolchain's stamp, so a release
// build names its tag even when made from a copy of the tree without it.
var (
	version  string
	revision string
)

// Unknown is what a field shows when the build recorded nothing for it.
const Unknown = "unknown"

// Info is one build.
type Info struct {
	// Version is the module version: vX.Y.Z for a tagged release, a
	// pseudo-version (v0.0.0-<time>-<commit>, +dirty with local changes)
	// for any other commit, "devel" when the build recorded none.
	Version string `json:"version"`
	// Revision is the commit the build was made from, "unknown" if not
	// recorded; Modified is set when the tree had uncommitted changes.
	Revision  string `json:"revision"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version"`
}

// Read returns the running binary's build.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return FromBuildInfo(bi, version, revision)
}

// FromBuildInfo reads a build from the toolchain's stamp bi (nil when
// there is none) and the -ldflags values, which win when set.
func FromBuildInfo(bi *debug.BuildInfo, ldVersion, ldRevision string) Info {
	info := Info{Version: "devel", Revision: Unknown, GoVersion: Unknown}
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			info.Version = v
		}
		info.GoVersion = cmp.Or(bi.GoVersion, Unknown)
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	info.Version = cmp.Or(ldVersion, info.Version)
	info.Revision = cmp.Or(ldRevision, info.Revision)
	return info
}

// ShortRevision is the commit abbreviated as git does, with "+modified"
// for a tree with local changes.
func (i Info) ShortRevision() string {
	r := i.Revision
	if len(r) > 12 {
		r = r[:12]
	}
	if i.Modified {
		r += "+modified"
	}
	return r
}

// String is the build on one line: "v1.2.3 (452cb529997b, go1.26.8)".
func (i Info) String() string {
	return fmt.Sprintf("%s (%s, %s)", i.Version, i.ShortRevision(), i.GoVersion)
}

// Text is the build as --version prints it, one field a line.
func (i Info) Text(program string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", program, i.Version)
	fmt.Fprintf(&b, "revision: %s", i.Revision)
	if i.Modified {
		b.WriteString(" (modified)")
	}
	fmt.Fprintf(&b, "\ngo: %s\n", i.GoVersion)
	return b.String()
}

// Collector is the ringxds_build_info gauge: 1, labelled with the build,
// so a dashboard can count the replicas of each build during a rollout.
func (i Info) Collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ringxds_build_info",
		Help: "Always 1; its labels name the build the process runs: module version, commit (+modified with local changes) and Go version.",
		ConstLabels: prometheus.Labels{
			"version": i.Version, "revision": i.ShortRevision(), "go_version": i.GoVersion,
		},
	})
	g.Set(1)
	return g
}

// Replica is one running server: which pod (or host) it is and the build it
// runs. Every client it lists carries it, so views gathered from several
// replicas say which client is on which.
type Replica struct {
	// Name is the POD_NAME environment variable (the downward API's
	// metadata.name) if set, else the host name, which in a pod is the
	// pod's name too.
	Name  string `json:"name"`
	Build Info   `json:"build"`
}

// Local is this process's replica.
func Local() Replica {
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	return Replica{Name: cmp.Or(name, Unknown), Build: Read()}
}

// String is the replica on one line: "xds-0 running v1.2.3 (...)".
func (r Replica) String() string { return r.Name + " running " + r.Build.String() }
