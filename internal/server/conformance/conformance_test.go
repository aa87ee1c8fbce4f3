package conformance_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/testcp"
)

// endpointsFile is one ring_hash cluster "products" of n endpoints, with
// extra cluster-level lines, and optionally a second cluster "other".
func endpointsFile(n int, extra string, other bool) string {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", 9100+i)
	}
	out := testcp.ClusterYAML("products", "ring_hash", "x-product-id", extra, addrs, nil)
	if other {
		out += "  - name: other\n    endpoints:\n      - {address: 127.0.0.2, port: 9000}\n"
	}
	return out
}

// quiet is how long a test waits to be sure nothing more arrives, and
// settle how long the fade test waits for the rest of a step's pushes,
// which are on their way when the step is published.
const (
	quiet  = 1500 * time.Millisecond
	settle = 400 * time.Millisecond
)

// subscribeAll brings a peer to a steady state holding products, as its
// data plane does: Envoy asks CDS as a wildcard and then EDS for each
// cluster; a gRPC client asks LDS, RDS, CDS and EDS by name. Every
// response is acknowledged. It returns the last response per type.
func subscribeAll(t *testing.T, p *peer, grpcShaped bool) map[string]message {
	t.Helper()
	last := map[string]message{}
	types := []string{resource.ClusterType, resource.EndpointType}
	if grpcShaped {
		types = []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType}
	}
	for _, typeURL := range types {
		names := []string{"products"}
		if typeURL == resource.ClusterType && !grpcShaped {
			names = nil // Envoy: CDS wildcard
		}
		at := p.count()
		if p.delta {
			p.deltaRequest(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names})
		} else {
			p.request(typeURL, names, "", "", "")
		}
		m, _ := p.next(at, 5*time.Second, short(typeURL)+" response", ofType(typeURL))
		p.ack(m, names)
		last[typeURL] = m
	}
	return last
}

// Each client kind and protocol, as the data planes connect.
var kinds = []struct {
	name       string
	node       func(string) *core.Node
	delta      bool
	grpcShaped bool
}{
	{"envoy sotw", envoyNode, false, false},
	{"envoy delta", envoyNode, true, false},
	{"grpc-go sotw", grpcGoNode, false, true},
	{"grpc-js sotw", func(id string) *core.Node { return node(id, "gRPC Node Pure JS", "1.14.1", "") }, false, true},
	{"clientlib sotw", func(id string) *core.Node { return node(id, "ringxds-clientlib", "", "clientlib") }, false, true},
}

// A Cluster change must be followed by its ClusterLoadAssignment, even when
// the endpoints did not change: Envoy keeps an updated cluster warming until
// a CLA arrives after the Cluster. Under SotW Envoy re-requests EDS with the
// version and nonce it already acknowledged; under delta it sends nothing.
func TestClusterChangeIsFollowedByItsEndpoints(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			cp := testcp.Start(t, testcp.TempFile(t, endpointsFile(3, "    minimum_ring_size: 1024\n    maximum_ring_size: 1024\n", false)))
			p := dial(t, cp.XDSAddr, k.node("warm-"+strings.ReplaceAll(k.name, " ", "-")), k.delta)
			last := subscribeAll(t, p, k.grpcShaped)
			before := p.count()

			// Only the ring size changes: a CDS-only change.
			testcp.WriteFile(t, cp.File, endpointsFile(3, "    minimum_ring_size: 2048\n    maximum_ring_size: 2048\n", false))
			cds, i := p.next(before, 5*time.Second, "the changed Cluster", ofType(resource.ClusterType))
			p.ack(cds, map[bool][]string{true: {"products"}, false: nil}[k.grpcShaped])
			if !p.delta && !k.grpcShaped {
				// Envoy (SotW) re-requests the endpoints of the warming
				// cluster, exactly as its last ACK.
				eds := last[resource.EndpointType]
				p.request(resource.EndpointType, []string{"products"}, eds.version, eds.nonce, "")
			}
			eds, _ := p.next(i+1, 3*time.Second, "the cluster's endpoints after its Cluster", func(m message) bool {
				_, ok := m.resources["products"]
				return m.typeURL == resource.EndpointType && ok
			})
			if got := assignment(t, eds.resources["products"]); len(got.GetEndpoints()[0].GetLbEndpoints()) != 3 {
				t.Fatalf("CLA has %d endpoints, want 3", len(got.GetEndpoints()[0].GetLbEndpoints()))
			}
		})
	}
}

// envoyModel follows one cluster as Envoy does: an updated Cluster is
// warmed, and only replaces the one in use when a ClusterLoadAssignment
// arrives after it; a CLA arriving while nothing warms updates the cluster
// in use.
type envoyModel struct {
	active, warming *clusterv3.Cluster
	cla             *endpointv3.ClusterLoadAssignment
}

func (e *envoyModel) onCluster(c *clusterv3.Cluster) {
	if e.active == nil || !proto.Equal(c, e.active) {
		e.warming = c
	}
}

func (e *envoyModel) onAssignment(cla *endpointv3.ClusterLoadAssignment) {
	e.cla = cla
	if e.warming != nil {
		e.active, e.warming = e.warming, nil
	}
}

// During a fade each step changes the weights (EDS) and, where no minimum
// ring size serves both neighbouring steps, the Cluster's minimum ring size
// too. An Envoy that warms each updated cluster must never use a Cluster
// with weights that do not build their step's ring under it. The fade
// (10 -> 11 over 8 s) adds more entries per step than one minimum can
// serve, so the minimum moves and several Clusters come into use.
func TestFadeNeverPutsALaggedPairInUse(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(map[bool]string{false: "sotw", true: "delta"}[delta], func(t *testing.T) {
			clk := &clock{}
			const fade = "    fade_in: {duration: 8s, exponent: 1}\n"
			cp := testcp.Start(t, testcp.TempFile(t, endpointsFile(10, fade, false)), testcp.WithClock(clk.Now))
			p := dial(t, cp.XDSAddr, envoyNode("fade"), delta)
			last := subscribeAll(t, p, false)
			model := &envoyModel{}
			model.onCluster(cluster(t, last[resource.ClusterType].resources["products"]))
			model.onAssignment(assignment(t, last[resource.EndpointType].resources["products"]))

			// The scale-up's pushes are followed (and acknowledged) with the
			// first step's.
			seen, steps, inUse := p.count(), 0, map[uint64]bool{}
			testcp.WriteFile(t, cp.File, endpointsFile(11, fade, false))
			var start time.Time
			testcp.WaitFor(t, 5*time.Second, "the fade to start", func() bool {
				if st := cp.Server.Current().Fading["products"]; len(st) == 1 {
					start = st[0].Start
					return true
				}
				return false
			})
			lastEDS := last[resource.EndpointType]
			for step := 1; step <= 9; step++ {
				// Hold the fade mid-way through step k; the server's step
				// timer rebuilds at the held instant.
				clk.Set(start.Add(time.Duration(step)*time.Second + 500*time.Millisecond))
				testcp.WaitFor(t, 5*time.Second, fmt.Sprintf("fade step %d", step), func() bool {
					st := cp.Server.Current().Fading["products"]
					return len(st) == 0 || st[0].Share >= (float64(step)-0.5)/8-1e-9
				})
				// Follow this step's pushes until nothing more arrives.
				for {
					m, i, ok := p.await(seen, settle, func(message) bool { return true })
					if !ok {
						break
					}
					seen = i + 1
					res, has := m.resources["products"]
					switch {
					case m.typeURL == resource.ClusterType && has:
						model.onCluster(cluster(t, res))
						p.ack(m, nil)
						if !delta && model.warming != nil {
							p.request(resource.EndpointType, []string{"products"}, lastEDS.version, lastEDS.nonce, "")
						}
					case m.typeURL == resource.EndpointType && has:
						model.onAssignment(assignment(t, res))
						lastEDS = m
						p.ack(m, []string{"products"})
					default:
						p.ack(m, map[string][]string{resource.EndpointType: {"products"}}[m.typeURL])
					}
					if !snapshot.PairConsistent(model.active, model.cla) {
						t.Fatalf("step %d: Envoy uses a Cluster (minimum ring size %d) with weights that do not build their step's ring under it", step, minRingSize(model.active))
					}
					inUse[minRingSize(model.active)] = true
				}
				if model.warming != nil {
					t.Fatalf("step %d: a Cluster is still warming: no CLA followed it", step)
				}
				steps++
			}
			if len(inUse) < 3 {
				t.Fatalf("only %d ring sizes were in use over the fade: the test did not follow its steps", len(inUse))
			}
			t.Logf("%d steps followed, %d ring sizes in use, each with its own step's weights", steps, len(inUse))
		})
	}
}

func nackStatus(msg string) *status.Status { return &status.Status{Code: 3, Message: msg} }

// clock is real time until Set, then frozen there: a fade can be held at a
// step while a peer follows its pushes.
type clock struct {
	mu     sync.Mutex
	frozen time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen.IsZero() {
		return time.Now()
	}
	return c.frozen
}

func (c *clock) Set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = at
}

// minRingSize reads the minimum ring size of a Cluster's ring_hash policy,
// which a laid-out cluster moves during a fade (the maximum stays).
func minRingSize(c *clusterv3.Cluster) uint64 {
	for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
		rh := &ringhashv3.RingHash{}
		if p.GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(rh) == nil {
			return rh.GetMinimumRingSize().GetValue()
		}
	}
	return 0
}

// ringSize reads the published ring size of a Cluster.
func ringSize(c *clusterv3.Cluster) uint64 {
	for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
		if n := snapshot.PolicySize(p.GetTypedExtensionConfig().GetTypedConfig()); n > 0 {
			return n
		}
	}
	return 0
}

// A client that rejects the very first response sends an empty version, as
// the protocol says. It must not be sent the same rejected response again
// until the resource changes.
func TestNACKOfTheFirstResponseIsNotResent(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(map[bool]string{false: "sotw", true: "delta"}[delta], func(t *testing.T) {
			cp := testcp.Start(t, testcp.TempFile(t, endpointsFile(3, "", false)))
			p := dial(t, cp.XDSAddr, grpcGoNode("nack"), delta)
			for _, typeURL := range []string{resource.ClusterType, resource.ListenerType} {
				at := p.count()
				if delta {
					p.deltaRequest(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: []string{"products"}})
				} else {
					p.request(typeURL, []string{"products"}, "", "", "")
				}
				m, i := p.next(at, 5*time.Second, "the first "+short(typeURL), ofType(typeURL))
				if delta {
					p.deltaRequest(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: m.nonce, ErrorDetail: nackStatus("cannot parse")})
				} else {
					p.request(typeURL, []string{"products"}, "", m.nonce, "cannot parse")
				}
				if again, _, ok := p.await(i+1, quiet, ofType(typeURL)); ok {
					t.Fatalf("%s: the rejected response was sent again (%d responses in all): %+v", short(typeURL), p.count(), again.nonce)
				}
			}
			// A change to the resource is sent.
			at := p.count()
			testcp.WriteFile(t, cp.File, endpointsFile(3, "    minimum_ring_size: 2048\n    maximum_ring_size: 2048\n", false))
			p.next(at, 5*time.Second, "the changed Cluster after the NACK", ofType(resource.ClusterType))
			var nacks int
			for _, c := range cp.Server.Clients() {
				if ts := c.Types["cds"]; ts != nil {
					nacks += ts.Nacks
				}
			}
			if nacks != 1 {
				t.Fatalf("/debug/clients counts %d CDS NACKs, want 1", nacks)
			}
		})
	}
}

// A client that reconnects with the state of its previous stream must learn
// of a resource deleted while it was away: grpc-go and the client library
// resubscribe with their last accepted version (SotW), Envoy with
// initial_resource_versions (delta).
func TestReconnectLearnsOfDeletions(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(map[bool]string{false: "sotw", true: "delta"}[delta], func(t *testing.T) {
			cp := testcp.Start(t, testcp.TempFile(t, endpointsFile(3, "", true)))
			p := dial(t, cp.XDSAddr, grpcGoNode("reconnect"), delta)
			held := subscribeAll(t, p, true)
			// The stream ends (a MaxConnectionAge, a rollout), products is
			// deleted meanwhile, and the client comes back.
			testcp.WriteFile(t, cp.File, strings.Replace(endpointsFile(3, "", true), "  - name: products", "  - name: gone", 1))
			testcp.WaitFor(t, 5*time.Second, "products to be withdrawn", func() bool {
				_, ok := cp.Server.Current().State.Cluster("products")
				return !ok
			})
			back := dial(t, cp.XDSAddr, grpcGoNode("reconnect"), delta)
			for _, typeURL := range []string{resource.ListenerType, resource.ClusterType} {
				at := back.count()
				if delta {
					back.deltaRequest(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: []string{"products"},
						InitialResourceVersions: map[string]string{"products": held[typeURL].versions["products"]}})
				} else {
					back.request(typeURL, []string{"products"}, held[typeURL].version, "", "")
				}
				m, _ := back.next(at, 3*time.Second, short(typeURL)+" telling products is gone", ofType(typeURL))
				if _, still := m.resources["products"]; still {
					t.Fatalf("%s: the reconnected client was sent products, which was deleted", short(typeURL))
				}
				if delta && !slices.Contains(m.removed, "products") {
					t.Fatalf("%s: delta response removes %q, want products", short(typeURL), m.removed)
				}
			}
		})
	}
}

// /debug/clients must tell the truth about each exchange: the version a
// NACK rejected, one ACK per acknowledged response, and which
// subscriptions are wildcards.
func TestClientStatusIsHonest(t *testing.T) {
	cp := testcp.Start(t, testcp.TempFile(t, endpointsFile(3, "", true)))
	status := func(id string) map[string]*server.TypeStatus {
		for _, c := range cp.Server.Clients() {
			if c.NodeID == id {
				return c.Types
			}
		}
		t.Fatalf("no client %s", id)
		return nil
	}

	// SotW: ACK, then a later response NACKed.
	p := dial(t, cp.XDSAddr, grpcGoNode("honest"), false)
	p.request(resource.ClusterType, []string{"products"}, "", "", "")
	first, i := p.next(0, 5*time.Second, "CDS", ofType(resource.ClusterType))
	p.ack(first, []string{"products"})
	// A subscription change repeating the acknowledged nonce is no new ACK,
	// and a request naming a stale nonce is ignored.
	p.request(resource.ClusterType, []string{"products", "other"}, first.version, first.nonce, "")
	second, _ := p.next(i+1, 5*time.Second, "CDS for both", ofType(resource.ClusterType))
	p.request(resource.ClusterType, []string{"products", "other"}, first.version, first.nonce, "")
	// A NACK names the version the client keeps and the rejected nonce.
	p.request(resource.ClusterType, []string{"products", "other"}, first.version, second.nonce, "bad cluster")
	testcp.WaitFor(t, 5*time.Second, "the NACK", func() bool { return status("honest")["cds"].Nacks == 1 })
	cds := status("honest")["cds"]
	if cds.LastNack.Version != second.version || cds.LastNack.Nonce != second.nonce || cds.LastNack.KeptVersion != first.version {
		t.Errorf("NACK recorded as version %q nonce %q kept %q; want the rejected %q %q, keeping %q",
			cds.LastNack.Version, cds.LastNack.Nonce, cds.LastNack.KeptVersion, second.version, second.nonce, first.version)
	}
	if cds.AckedNonce != first.nonce || cds.Subscribed != 2 {
		t.Errorf("acked nonce %q, subscribed %d; want %q and 2", cds.AckedNonce, cds.Subscribed, first.nonce)
	}
	if n := countACKs(t, cp, "grpc", "cds"); n != 1 {
		t.Errorf("ringxds_xds_acks_total{kind=grpc,type=cds} = %d, want 1", n)
	}
	// go-control-plane ignores other nonces only while a response is
	// unanswered: after the NACK was processed it takes a request naming
	// none, and so does the status.
	p.request(resource.ClusterType, []string{"products"}, "", "", "")
	testcp.WaitFor(t, 5*time.Second, "the request after the NACK applied", func() bool {
		return status("honest")["cds"].Subscribed == 1
	})

	// SotW EDS with no names is no wildcard (legacy wildcard is off for EDS).
	p.request(resource.EndpointType, nil, "", "", "")
	testcp.WaitFor(t, 5*time.Second, "the EDS request", func() bool { return status("honest")["eds"] != nil })
	if eds := status("honest")["eds"]; eds.Wildcard {
		t.Error("a SotW EDS request naming nothing is shown as a wildcard")
	}

	// Envoy's first delta CDS request names nothing and is a wildcard.
	d := dial(t, cp.XDSAddr, envoyNode("honest-delta"), true)
	d.deltaRequest(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType})
	d.next(0, 5*time.Second, "delta CDS", ofType(resource.ClusterType))
	if cds := status("honest-delta")["cds"]; !cds.Wildcard {
		t.Error("Envoy's first delta CDS request is not shown as a wildcard")
	}
	// Delta subscriptions change by difference: "*", a name subscribed
	// twice and a removal of a name never subscribed leave one name.
	d.deltaRequest(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{"products", "*"}})
	d.deltaRequest(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{"products"},
		ResourceNamesUnsubscribe: []string{"never", "*"}})
	testcp.WaitFor(t, 5*time.Second, "the delta EDS subscription", func() bool {
		eds := status("honest-delta")["eds"]
		return eds != nil && !eds.Wildcard && eds.Subscribed == 1
	})
}

// countACKs reads ringxds_xds_acks_total for a kind and type.
func countACKs(t *testing.T, cp *testcp.ControlPlane, kind, typ string) int {
	t.Helper()
	mfs, err := cp.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ringxds_xds_acks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == kind && labels["type"] == typ {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

// Every NACK is counted, but one client rejecting change after change is
// logged at most once every ten seconds per type, with the count since.
func TestNACKsAreCountedAndTheirLogLimited(t *testing.T) {
	cp := testcp.Start(t, testcp.TempFile(t, endpointsFile(3, "", false)))
	p := dial(t, cp.XDSAddr, grpcGoNode("rejecter"), false)
	p.request(resource.ClusterType, []string{"products"}, "", "", "")
	m, i := p.next(0, 5*time.Second, "CDS", ofType(resource.ClusterType))
	p.ack(m, []string{"products"})
	kept := m.version
	const changes = 12
	for n := range changes {
		size := 1024 << (n % 2)
		testcp.WriteFile(t, cp.File, endpointsFile(3, fmt.Sprintf("    minimum_ring_size: %d\n    maximum_ring_size: %d\n", size, size), false))
		m, i = p.next(i+1, 5*time.Second, fmt.Sprintf("change %d", n), ofType(resource.ClusterType))
		p.request(resource.ClusterType, []string{"products"}, kept, m.nonce, fmt.Sprintf("rejected change %d", n))
	}
	testcp.WaitFor(t, 5*time.Second, "every NACK counted", func() bool {
		for _, c := range cp.Server.Clients() {
			if c.NodeID == "rejecter" {
				return c.Types["cds"].Nacks == changes
			}
		}
		return false
	})
	if logged := cp.Logs.FilterMessageSnippet("rejected a response (NACK)").Len(); logged < 1 || logged > 2 {
		t.Fatalf("%d NACK log lines for %d NACKs, want 1 or 2 (once per 10 s)", logged, changes)
	}
}
