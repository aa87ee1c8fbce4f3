package dataplane

import "github.com/ringxds/ringxds/internal/snapshot"

// Dialect returns how the client builds rings, adjusted for its version,
// and false when ringxds does not know (an unrecognised gRPC
// implementation). Versions before each change, from the implementations'
// release notes and sources (docs/grpc-clients.md):
//
//   - grpc-go: gRFC A52 (load_balancing_policy) on by default from v1.56;
//     the 4096 ring cap from v1.53; A113 fixed-point weights from v1.79;
//     hash_key (A76) by default from v1.80.
//   - C-core: A52 from 1.55; the ring cap from 1.52.
//   - grpc-java: A52 from 1.47; the ring cap from 1.52; A113 from 1.79.
//   - grpc-js-xds: A52 from 1.10; older releases read lb_policy only.
func (c Client) Dialect() (snapshot.Dialect, bool) {
	var d snapshot.Dialect
	v := c.Version
	switch c.Implementation {
	case Envoy:
		return snapshot.DialectEnvoy, true
	case Clientlib:
		return snapshot.DialectClientlib, true
	case GRPCGo:
		d = snapshot.DialectGRPCGo
		d.LoadBalancingPolicy = !v.Before(1, 56)
		if v.Before(1, 53) {
			d.RingCap = 0
		}
		if v.Before(1, 79) {
			d.Weights = snapshot.WeightsLocalityProduct
		}
		d.HashKey = !v.Before(1, 80)
		// clientlib/grpcbalancer runs the ringxds.skipper entry, so a
		// skipper cluster is judged by the Skipper ring it builds.
		d.Skipper = c.GRPCBalancer
	case GRPCJS:
		d = snapshot.DialectGRPCJS
		d.LoadBalancingPolicy = !v.Before(1, 10)
	case CCore:
		d = snapshot.DialectCCore
		d.LoadBalancingPolicy = !v.Before(1, 55)
		if v.Before(1, 52) {
			d.RingCap = 0
		}
	case GRPCJava:
		d = snapshot.DialectGRPCJava
		d.LoadBalancingPolicy = !v.Before(1, 47)
		if v.Before(1, 52) {
			d.RingCap = 0
		}
		if v.Before(1, 79) {
			d.Weights = snapshot.WeightsLocalityProduct
		}
	default:
		return snapshot.Dialect{}, false
	}
	return d, true
}

// Implementation is one data plane /debug/pick answers for: its name, the
// kind it is served and the dialect it builds rings in, at the versions
// ringxds recommends.
type Implementation struct {
	Name    string
	Kind    snapshot.Kind
	Dialect snapshot.Dialect
	// FadeSchedule is set for a client that runs the ringxds.ring_hash
	// entry ringxds publishes ahead of ring_hash on a cluster laid out for
	// fade-in (grpc-go with clientlib/grpcbalancer). On such a cluster it
	// picks from the N-ring of that entry's schedule at the fade step in
	// force (internal/fadeschedule), not from the ring Dialect decodes.
	FadeSchedule bool
}

// Predicted lists the implementations whose picks follow from the
// published resources, in the order /debug/pick and the page show them.
// grpc-java is not among them: it walks endpoints in hash map order.
func Predicted() []Implementation {
	// The dialect the verdicts judge such a client in, so the two agree
	// wherever no fade schedule applies.
	balancer, _ := Client{Implementation: GRPCGo, GRPCBalancer: true}.Dialect()
	return []Implementation{
		{Name: Envoy, Kind: snapshot.KindEnvoy, Dialect: snapshot.DialectEnvoy},
		{Name: GRPCGo, Kind: snapshot.KindGRPC, Dialect: snapshot.DialectGRPCGo},
		{Name: GRPCGoBalancer, Kind: snapshot.KindGRPC, Dialect: balancer, FadeSchedule: true},
		{Name: GRPCJS, Kind: snapshot.KindGRPCLegacy, Dialect: snapshot.DialectGRPCJS},
		{Name: CCore, Kind: snapshot.KindGRPC, Dialect: snapshot.DialectCCore},
		{Name: Clientlib, Kind: snapshot.KindClientlib, Dialect: snapshot.DialectClientlib},
	}
}

// Unpredicted names the implementations /debug/pick cannot answer for, and
// why.
func Unpredicted() map[string]string {
	return map[string]string{
		GRPCJava: "grpc-java hashes each endpoint as \"/ip:port\" (Java's address text, with a leading slash) and walks endpoints in hash map order: " +
			"its ring is never Envoy's and cannot be predicted exactly",
	}
}
