// Package fadein owns the arithmetic of cache-aware fade-in: the share
// curve, the ring layout that lets Envoy, grpc-go and ringxds ramp a new
// endpoint's ring_hash entries identically, and the client-side N-ring state
// machine.
//
// Two paths fade a new endpoint in, and both only ever hand a fading
// endpoint keys it owns once the fade ends:
//
//   - The weight ramp (EntriesPerWeight, RampEntries, ExactWeights): the
//     control plane publishes EDS weights and a ring size per step so that
//     every established endpoint keeps its ring entries and the fading one
//     grows from one entry to its final count. Data planes that rebuild a
//     ring_hash ring from EDS (Envoy, grpc-go) follow it unchanged.
//   - The N-ring (NRing): a client that knows each member's fade start keeps
//     one ring per scale-up event and cuts each key over to a newer ring
//     exactly once, when a second hash of the key falls below the event's
//     share. It works for every ring dialect, Maglev and Skipper included.
//
// docs/fade-in.md explains why both hold and what they cost.
package fadein
