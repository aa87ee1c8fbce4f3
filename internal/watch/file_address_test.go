package watch_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/watch"
)

// The file's spelling of an address must not reach a data plane: Envoy and
// C-core hash inet_ntop's text, grpc-go and grpc-js the text as published,
// so only the canonical spelling puts a pod at one place on every ring.
func TestFileAddressesArePublishedCanonicalEndToEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, `clusters:
  - name: products
    fade_in: {duration: 10s}
    endpoints:
      - {address: "FD00:0:0::0001", port: 80}
      - {address: 10.0.0.1, port: 80}
`)
	r := fileStart(t, path, fileTestDebounce)
	st := r.next(t)
	if got := st.Clusters[0].Endpoints[0].Address; got != "fd00::1" {
		t.Fatalf("the source published the address as %q, want fd00::1", got)
	}

	snap, err := snapshot.Build(st, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range snapshot.AllKinds() {
		cla := snap.Kinds[kind][resourcev3.EndpointType]["products"].(*endpointv3.ClusterLoadAssignment)
		var got []string
		for _, lle := range cla.GetEndpoints() {
			for _, lbe := range lle.GetLbEndpoints() {
				got = append(got, lbe.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
		if strings.Join(got, " ") != "10.0.0.1 fd00::1" && strings.Join(got, " ") != "fd00::1 10.0.0.1" {
			t.Errorf("%s is served the addresses %q, want fd00::1 and 10.0.0.1", kind, got)
		}
	}

	// Respelling the address is no change: the endpoint stays established
	// (no fade restarts), and only the endpoint added is new.
	fileWrite(t, path, `clusters:
  - name: products
    fade_in: {duration: 10s}
    endpoints:
      - {address: "fd00:0::1", port: 80}
      - {address: 10.0.0.1, port: 80}
      - {address: 10.0.0.2, port: 80}
`)
	st = r.next(t)
	for _, ep := range st.Clusters[0].Endpoints {
		if fresh := !ep.FirstSeen.IsZero(); fresh != (ep.Address == "10.0.0.2") {
			t.Errorf("endpoint %s has FirstSeen %v; only 10.0.0.2 is new", ep.HostPort(), ep.FirstSeen)
		}
	}
}

func TestFileTwoSpellingsOfOneAddressAreRefusedNamingBothLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	fileWrite(t, path, fileYAML(80))
	r := fileStart(t, path, fileTestDebounce)
	fileExpectPorts(t, r.next(t), 80)

	fileWrite(t, path, `clusters:
  - name: products
    endpoints:
      - {address: "fd00::1", port: 80}
      - {address: 10.0.0.1, port: 80}
      - {address: "FD00:0:0::0001", port: 80}
`)
	ps := r.waitProblems(t, func(ps []watch.Problem) bool { return len(ps) > 0 })
	want := `cluster "products": duplicates endpoints[0] ([fd00::1]:80) on line 4: "FD00:0:0::0001" here and "fd00::1" there are one address, published as fd00::1`
	if len(ps) != 1 || ps[0].Field != "line 6, clusters[0].endpoints[2]" || ps[0].Message != want {
		t.Errorf("problems %+v, want one on line 6 saying %s", ps, want)
	}
	// The duplicate was never served: the next state is the fix.
	fileWrite(t, path, fileYAML(80, 81))
	fileExpectPorts(t, r.next(t), 80, 81)
}
