package server

import (
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/ringxds/ringxds/internal/snapshot"
)

// ClientKindMetadataKey is the node metadata field a client sets to name its
// kind explicitly ("envoy", "grpc" or "clientlib"). clientlib always sets it.
const ClientKindMetadataKey = "ringxds.io/client"

// ClassifyNode decides which translation a client receives. An explicit
// metadata field wins; otherwise grpc-go announces itself with the user agent
// "gRPC Go" (and other gRPC languages with "gRPC ..."), and everything else is
// treated as Envoy, the most capable data plane.
func ClassifyNode(n *core.Node) snapshot.Kind {
	if n == nil {
		return snapshot.KindEnvoy
	}
	if md := n.GetMetadata().GetFields()[ClientKindMetadataKey]; md != nil {
		switch k := snapshot.Kind(md.GetStringValue()); k {
		case snapshot.KindEnvoy, snapshot.KindGRPC, snapshot.KindClientlib:
			return k
		}
	}
	ua := strings.ToLower(n.GetUserAgentName())
	switch {
	case strings.HasPrefix(ua, "ringxds-clientlib"):
		return snapshot.KindClientlib
	case strings.HasPrefix(ua, "grpc"):
		return snapshot.KindGRPC
	}
	return snapshot.KindEnvoy
}
