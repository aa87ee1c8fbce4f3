package dataplane

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ringxds/ringxds/internal/snapshot"
)

func node(name, version string) *core.Node {
	return &core.Node{Id: "n", UserAgentName: name, UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: version}}
}

// The user agents are the ones real clients sent to ringxds: grpc-go
// v1.85.0, grpc-js-xds 1.14.1 from npm, Debian's python3-grpcio 1.51.1,
// and grpc-java as BootstrapperImpl builds it.
func TestIdentify(t *testing.T) {
	md := func(kind string) *structpb.Struct {
		s, _ := structpb.NewStruct(map[string]any{KindMetadataKey: kind})
		return s
	}
	withMetadata := func(n *core.Node, kind string) *core.Node { n.Metadata = md(kind); return n }
	for _, tc := range []struct {
		name string
		node *core.Node
		want Client
	}{
		{"nil node", nil, Client{Implementation: Envoy, Kind: snapshot.KindEnvoy}},
		{"envoy", &core.Node{Id: "sidecar", UserAgentName: "envoy", UserAgentVersionType: &core.Node_UserAgentBuildVersion{
			UserAgentBuildVersion: &core.BuildVersion{Version: &typev3.SemanticVersion{MajorNumber: 1, MinorNumber: 37, Patch: 2}}}}, Client{Implementation: Envoy, Version: Version{1, 37, 2}, Kind: snapshot.KindEnvoy}},
		{"grpc-go", node("gRPC Go", "1.85.0"), Client{Implementation: GRPCGo, Version: Version{1, 85, 0}, Kind: snapshot.KindGRPC}},
		{"grpc-go with grpcbalancer", func() *core.Node {
			n := node("gRPC Go", "1.85.0")
			n.Metadata, _ = structpb.NewStruct(map[string]any{GRPCBalancerMetadataKey: true})
			return n
		}(), Client{Implementation: GRPCGo, Version: Version{1, 85, 0}, Kind: snapshot.KindGRPC, GRPCBalancer: true}},
		{"grpc-go dev build", node("gRPC Go", "1.86.0-dev"), Client{Implementation: GRPCGo, Version: Version{1, 86, 0}, Kind: snapshot.KindGRPC}},
		{"grpc-js", node("gRPC Node Pure JS", "1.14.1"), Client{Implementation: GRPCJS, Version: Version{1, 14, 1}, Kind: snapshot.KindGRPCLegacy}},
		{"python 1.51", node("gRPC C-core linux Python", "C-core 29.0.0 Python 1.51.1"),
			Client{Implementation: CCore, Version: Version{1, 51, 1}, Language: "Python", Kind: snapshot.KindGRPCRoundRobin}},
		{"python 1.53", node("gRPC C-core linux Python", "C-core 31.0.0 Python 1.53.0"),
			Client{Implementation: CCore, Version: Version{1, 53, 0}, Language: "Python", Kind: snapshot.KindGRPC}},
		{"c++ core 29", node("gRPC C-core linux", "C-core 29.0.0"),
			Client{Implementation: CCore, Version: Version{1, 51, 0}, Language: "C++", Kind: snapshot.KindGRPCRoundRobin}},
		{"c++ core 45", node("gRPC C-core linux", "C-core 45.0.0"),
			Client{Implementation: CCore, Version: Version{1, 52, 0}, Language: "C++", Kind: snapshot.KindGRPC}},
		{"grpc-java", node("gRPC Java", "1.83.1"), Client{Implementation: GRPCJava, Version: Version{1, 83, 1}, Kind: snapshot.KindGRPC}},
		{"another gRPC", node("gRPC Rust", "0.9.0"), Client{Implementation: GRPCOther, Version: Version{0, 9, 0}, Kind: snapshot.KindGRPC}},
		{"clientlib", node("ringxds-clientlib", ""), Client{Implementation: Clientlib, Kind: snapshot.KindClientlib}},
		{"metadata wins over user agent", withMetadata(node("gRPC Go", "1.85.0"), "clientlib"),
			Client{Implementation: GRPCGo, Version: Version{1, 85, 0}, Kind: snapshot.KindClientlib, KindFromMetadata: true}},
		{"metadata can ask ring_hash of a client that crashes in it", withMetadata(node("gRPC C-core linux Python", "C-core 29.0.0 Python 1.51.1"), "grpc"),
			Client{Implementation: CCore, Version: Version{1, 51, 1}, Language: "Python", Kind: snapshot.KindGRPC, KindFromMetadata: true}},
		{"unknown metadata kind falls back", withMetadata(node("gRPC Go", "1.85.0"), "nginx"),
			Client{Implementation: GRPCGo, Version: Version{1, 85, 0}, Kind: snapshot.KindGRPC}},
		{"no user agent", &core.Node{Id: "x"}, Client{Implementation: Envoy, Kind: snapshot.KindEnvoy}},
	} {
		if got := Identify(tc.node); got != tc.want {
			t.Errorf("%s: Identify = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{
		"1.85.0": {1, 85, 0}, "v1.14.1": {1, 14, 1}, "1.86.0-dev": {1, 86, 0}, "1.51": {1, 51, 0},
		"": {}, "latest": {}, "x1.2": {}, "1.x": {},
	} {
		if got := ParseVersion(in); got != want {
			t.Errorf("ParseVersion(%q) = %v, want %v", in, got, want)
		}
	}
	if (Version{}).Before(1, 56) {
		t.Error("an unknown version counts as old")
	}
	if !(Version{1, 55, 9}).Before(1, 56) || (Version{1, 56, 0}).Before(1, 56) || (Version{2, 0, 0}).Before(1, 56) {
		t.Error("Before compares wrongly")
	}
}
