package e2e_test

import (
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"testing"

	"github.com/ringxds/ringxds/internal/testcp"
)

// endpointsYAML renders one cluster served by the given backends.
func endpointsYAML(name, policy, header, extra string, backends []*testcp.Backend, weights []int) string {
	return testcp.ClusterYAML(name, policy, header, extra, testcp.Addrs(backends), weights)
}

// dialXDS opens a TestService client through grpc-go's own xDS client.
func dialXDS(t *testing.T, xdsAddr, target string) testgrpc.TestServiceClient {
	return testgrpc.NewTestServiceClient(testcp.DialXDS(t, xdsAddr, target))
}
