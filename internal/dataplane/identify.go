package dataplane

import (
	"fmt"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/ringxds/ringxds/internal/snapshot"
)

// KindMetadataKey is the node metadata field a client sets to choose its
// kind (translation) explicitly: "envoy", "grpc", "grpc-legacy",
// "grpc-round-robin" or "clientlib". The client library always sets it.
const KindMetadataKey = "ringxds.io/client"

// GRPCBalancerMetadataKey is the node metadata field (true) a grpc-go
// client sets in its bootstrap when it imports clientlib/grpcbalancer. The
// package changes what the client runs (the ringxds.skipper and
// ringxds.ring_hash entries ringxds publishes ahead of ring_hash), and
// nothing else on the xDS stream shows it: without the field the client
// is judged by the ring_hash fallback.
const GRPCBalancerMetadataKey = "ringxds.io/grpcbalancer"

// Implementation names, as /debug/clients and the metrics show them.
const (
	Envoy     = "envoy"
	Clientlib = "clientlib"
	GRPCGo    = "grpc-go"
	GRPCJS    = "grpc-js"
	CCore     = "c-core"
	GRPCJava  = "grpc-java"
	// GRPCOther is a gRPC implementation ringxds does not recognise.
	GRPCOther = "grpc"
)

// GRPCGoBalancer names grpc-go running clientlib/grpcbalancer where
// /debug/pick and the debug page list what each implementation picks; it
// picks apart from plain grpc-go while endpoints fade in. /debug/clients
// shows such a client as grpc-go with Client.GRPCBalancer set. The name has
// no "+": a query string reads one as a space.
const GRPCGoBalancer = "grpc-go-grpcbalancer"

// Client is what a node's user agent and metadata say about the data plane
// behind an xDS stream.
type Client struct {
	// Implementation is one of the names above.
	Implementation string `json:"name"`
	// Version is the implementation's release (for C-core, the gRPC
	// release: the wrapped language's version, or the one the core
	// library's version maps to). Zero when the node does not say.
	Version Version `json:"version"`
	// Language is the language of a C-core client ("Python", "C++",
	// "Ruby", ...).
	Language string `json:"language,omitempty"`
	// Kind is the translation the client is served.
	Kind snapshot.Kind `json:"kind"`
	// KindFromMetadata is set when the node chose Kind itself
	// (KindMetadataKey) rather than ringxds from its user agent.
	KindFromMetadata bool `json:"kind_from_metadata,omitempty"`
	// GRPCBalancer is set for a grpc-go client whose node metadata says it
	// runs clientlib/grpcbalancer (GRPCBalancerMetadataKey).
	GRPCBalancer bool `json:"grpcbalancer,omitempty"`
}

// Version is a release number; the zero Version means unknown.
type Version struct{ Major, Minor, Patch int }

// Known reports whether the version was read from the node.
func (v Version) Known() bool { return v != Version{} }

// Before reports whether a known v is older than major.minor. An unknown
// version is taken to be current, so it is never before anything.
func (v Version) Before(major, minor int) bool {
	if !v.Known() {
		return false
	}
	return v.Major < major || v.Major == major && v.Minor < minor
}

// String is "1.51.1", or "" when unknown.
func (v Version) String() string {
	if !v.Known() {
		return ""
	}
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// MarshalText writes the version as String does.
func (v Version) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (v *Version) UnmarshalText(b []byte) error {
	*v = ParseVersion(string(b))
	return nil
}

// ParseVersion reads the first "major.minor[.patch]" in s, ignoring a
// leading "v" and any suffix ("1.85.0-dev", "v1.14.1").
func ParseVersion(s string) Version {
	for _, field := range strings.Fields(s) {
		field = strings.TrimPrefix(field, "v")
		parts := strings.SplitN(field, ".", 3)
		if len(parts) < 2 {
			continue
		}
		var nums [3]int
		ok := true
		for i, p := range parts {
			end := 0
			for end < len(p) && p[end] >= '0' && p[end] <= '9' {
				end++
			}
			n, err := strconv.Atoi(p[:end])
			if err != nil || (end < len(p) && i < len(parts)-1) {
				ok = false
				break
			}
			nums[i] = n
		}
		if ok {
			return Version{nums[0], nums[1], nums[2]}
		}
	}
	return Version{}
}

// Identify reads a node's user agent and metadata. Known user agents:
//
//   - grpc-go: "gRPC Go" / "1.85.0"
//   - grpc-js-xds: "gRPC Node Pure JS" / "1.14.1" (the grpc-js-xds release)
//   - C-core: "gRPC C-core linux Python" / "C-core 29.0.0 Python 1.51.1";
//     C++ has no language suffix: "gRPC C-core linux" / "C-core 29.0.0"
//   - grpc-java: "gRPC Java" / "1.83.1"
//   - Envoy: "envoy"; the client library: "ringxds-clientlib"
//
// Anything else starting with "gRPC" is another gRPC implementation;
// anything else at all is treated as Envoy, the most capable data plane.
func Identify(n *core.Node) Client {
	name, version := n.GetUserAgentName(), n.GetUserAgentVersion()
	lower := strings.ToLower(name)
	var c Client
	switch {
	case strings.HasPrefix(lower, "ringxds-clientlib"):
		c = Client{Implementation: Clientlib, Version: ParseVersion(version)}
	case lower == "grpc go" || strings.HasPrefix(lower, "grpc go "):
		c = Client{Implementation: GRPCGo, Version: ParseVersion(version)}
	case strings.HasPrefix(lower, "grpc node"):
		c = Client{Implementation: GRPCJS, Version: ParseVersion(version)}
	case strings.HasPrefix(lower, "grpc c-core"):
		c = cCore(name, version)
	case lower == "grpc java" || strings.HasPrefix(lower, "grpc java "):
		c = Client{Implementation: GRPCJava, Version: ParseVersion(version)}
	case strings.HasPrefix(lower, "grpc"):
		c = Client{Implementation: GRPCOther, Version: ParseVersion(version)}
	default:
		c = Client{Implementation: Envoy, Version: envoyVersion(n)}
	}
	c.Kind = c.defaultKind()
	if md := n.GetMetadata().GetFields()[KindMetadataKey]; md != nil {
		if k := snapshot.Kind(md.GetStringValue()); validKind(k) {
			c.Kind, c.KindFromMetadata = k, true
		}
	}
	c.GRPCBalancer = c.Implementation == GRPCGo && n.GetMetadata().GetFields()[GRPCBalancerMetadataKey].GetBoolValue()
	return c
}

func validKind(k snapshot.Kind) bool {
	for _, known := range snapshot.AllKinds() {
		if k == known {
			return true
		}
	}
	return false
}

// cCore reads a C-core user agent. The gRPC release is the wrapped
// language's version when there is one ("C-core 29.0.0 Python 1.51.1");
// C++ sends only the core library's version, which maps to a release.
func cCore(name, version string) Client {
	c := Client{Implementation: CCore}
	fields := strings.Fields(version)
	if len(fields) >= 2 && fields[0] == "C-core" {
		if len(fields) >= 4 {
			c.Language = strings.Join(fields[2:len(fields)-1], " ")
			c.Version = ParseVersion(fields[len(fields)-1])
		} else {
			c.Language = "C++"
			c.Version = releaseOfCore(ParseVersion(fields[1]))
		}
	}
	if c.Language == "" {
		// The name carries the same suffix: "gRPC C-core linux Python".
		if f := strings.Fields(name); len(f) > 3 {
			c.Language = strings.Join(f[3:], " ")
		}
	}
	return c
}

// releaseOfCore maps a C-core library version to the gRPC release that
// ships it. Only the releases whose behaviour ringxds keys on are listed
// (include/grpc/grpc.h version history: core 28 is 1.50, core 29 is 1.51);
// a newer core is a release at least as new as the last listed one.
func releaseOfCore(core Version) Version {
	switch {
	case !core.Known():
		return Version{}
	case core.Major == 28:
		return Version{1, 50, 0}
	case core.Major == 29:
		return Version{1, 51, 0}
	case core.Major < 28:
		return Version{1, 49, 0}
	}
	return Version{1, 52, 0}
}

// envoyVersion reads Envoy's build version, sent as user_agent_build_version.
func envoyVersion(n *core.Node) Version {
	if bv := n.GetUserAgentBuildVersion().GetVersion(); bv != nil {
		return Version{int(bv.GetMajorNumber()), int(bv.GetMinorNumber()), int(bv.GetPatch())}
	}
	return ParseVersion(n.GetUserAgentVersion())
}

// defaultKind is the translation the implementation reads correctly
// (docs/grpc-clients.md).
func (c Client) defaultKind() snapshot.Kind {
	switch c.Implementation {
	case Envoy:
		return snapshot.KindEnvoy
	case Clientlib:
		return snapshot.KindClientlib
	case GRPCJS:
		return snapshot.KindGRPCLegacy
	case CCore:
		if c.crashesInRingHash() {
			return snapshot.KindGRPCRoundRobin
		}
	}
	return snapshot.KindGRPC
}

// crashesInRingHash reports gRPC C-core 1.50 and 1.51, which crash with
// SIGSEGV as soon as ring_hash replaces a picker (grpc/grpc#31766: a bad
// cast in ring_hash.cc's WorkSerializerRunner, fixed by grpc/grpc#32012).
// Every subchannel state change replaces the picker, so no ring_hash
// configuration avoids it.
func (c Client) crashesInRingHash() bool {
	return c.Implementation == CCore && c.Version.Major == 1 && (c.Version.Minor == 50 || c.Version.Minor == 51)
}

// UserAgent is how the page names the implementation: "grpc-js 1.14.1",
// "c-core 1.51.1 (Python)".
func (c Client) UserAgent() string {
	s := c.Implementation
	if c.Version.Known() {
		s += " " + c.Version.String()
	}
	if c.Language != "" {
		s += " (" + c.Language + ")"
	}
	if c.GRPCBalancer {
		s += " with grpcbalancer"
	}
	return s
}
