// Package fadeschedule reads the fade-in schedule ringxds publishes to gRPC
// clients as the config of its ringxds.ring_hash policy, and builds the
// N-ring a client runs from it.
//
// clientlib/grpcbalancer runs that N-ring inside grpc-go, and /debug/pick
// predicts it from the published Cluster. Both go through this package, so
// the prediction cannot drift from what the client does; the server cannot
// import grpcbalancer itself, whose init registers gRPC balancers globally.
package fadeschedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/ringhash"
)

// PolicyName is the name of the policy whose config a Schedule is: the last
// path segment of the TypedStruct type_url ringxds publishes it under.
const PolicyName = "ringxds.ring_hash"

// ErrNoneInEDS is returned by Build when no member of the schedule is
// among the endpoints the client holds.
var ErrNoneInEDS = errors.New("no endpoint of the schedule is in EDS")

// Schedule is the config of a ringxds.ring_hash cluster: everything the
// client library reads from EDS metadata, which grpc-go does not hand to
// balancers.
type Schedule struct {
	// HashHeader is the request header hashed, as published.
	HashHeader string
	Curve      fadein.Curve
	// Members are the endpoints in the order the config lists them.
	Members []Member
}

// Member is one endpoint of a Schedule.
type Member struct {
	// Address is host:port, as EDS carries it; it matches the member to
	// the client's endpoint.
	Address string
	// Key is the endpoint's ring key.
	Key string
	// Entries is the ring_hash entries the endpoint holds once every fade
	// is over.
	Entries uint32
	// FadeStart is when the endpoint started fading in; zero: established.
	FadeStart time.Time
}

// scheduleJSON is the TypedStruct value internal/snapshot publishes.
type scheduleJSON struct {
	HashHeader   string  `json:"hash_header"`
	FadeDuration string  `json:"fade_duration"`
	FadeExponent float64 `json:"fade_exponent"`
	Endpoints    []struct {
		Address     string  `json:"address"`
		Key         string  `json:"key"`
		RingEntries float64 `json:"ring_entries"`
		FadeStart   string  `json:"fade_start"`
	} `json:"endpoints"`
}

// Parse reads a schedule from the JSON grpc-go hands the balancer (the
// TypedStruct's value).
func Parse(js []byte) (*Schedule, error) {
	var in scheduleJSON
	if err := json.Unmarshal(js, &in); err != nil {
		return nil, fmt.Errorf("%s: bad config %s: %w", PolicyName, js, err)
	}
	s := &Schedule{HashHeader: in.HashHeader, Members: make([]Member, 0, len(in.Endpoints))}
	var err error
	if s.Curve.Duration, err = time.ParseDuration(in.FadeDuration); err != nil {
		return nil, fmt.Errorf("%s: fade_duration: %w", PolicyName, err)
	}
	s.Curve.Exponent = in.FadeExponent
	if len(in.Endpoints) == 0 {
		return nil, fmt.Errorf("%s: no endpoints", PolicyName)
	}
	seen := make(map[string]bool, len(in.Endpoints))
	for i, ep := range in.Endpoints {
		m := Member{Address: ep.Address, Key: ep.Key, Entries: uint32(ep.RingEntries)}
		if ep.Address == "" || ep.Key == "" || ep.RingEntries < 1 || ep.RingEntries > ringhash.MaxRingSizeLimit || float64(m.Entries) != ep.RingEntries {
			return nil, fmt.Errorf("%s: endpoint %d: need an address, a key and a whole ring_entries of 1..%d", PolicyName, i, ringhash.MaxRingSizeLimit)
		}
		if ep.FadeStart != "" {
			if m.FadeStart, err = time.Parse(time.RFC3339Nano, ep.FadeStart); err != nil {
				return nil, fmt.Errorf("%s: endpoint %d: fade_start: %w", PolicyName, i, err)
			}
		}
		if seen[ep.Address] {
			return nil, fmt.Errorf("%s: endpoint %s listed twice", PolicyName, ep.Address)
		}
		seen[ep.Address] = true
		s.Members = append(s.Members, m)
	}
	return s, nil
}

// Equal reports whether two schedules build the same rings and hash the
// same header.
func (s *Schedule) Equal(t *Schedule) bool {
	if s == nil || t == nil {
		return s == t
	}
	return s.HashHeader == t.HashHeader && s.Curve == t.Curve && slices.EqualFunc(s.Members, t.Members, func(a, b Member) bool {
		return a.Address == b.Address && a.Key == b.Key && a.Entries == b.Entries && a.FadeStart.Equal(b.FadeStart)
	})
}

// Build returns the N-ring a client builds from the schedule at now: one
// ring per fade-in event over the members whose address has reports
// present, in the schedule's order, each holding its final entries
// (CountRing). The second result maps the N-ring's member indices to
// indices of s.Members. Pick from it at fadein.StepTime of the clock, as
// the ring's fade shares are stepped.
//
// CDS (the schedule) and EDS (the client's endpoints) reach a client
// separately, so for a moment they can disagree: only members in both are
// on the ring. An endpoint about to join has no connection yet, one about
// to leave has left the schedule, and because ring_hash entries stay where
// they are whatever else is on the ring, leaving either out moves only its
// own keys, as its arrival or departure will.
func (s *Schedule) Build(has func(addr string) bool, now time.Time) (*fadein.NRing, []int, error) {
	members := make([]fadein.Member, 0, len(s.Members))
	index := make([]int, 0, len(s.Members))
	for i, m := range s.Members {
		if !has(m.Address) {
			continue
		}
		members = append(members, fadein.Member{
			Key:       ringhash.Endpoint{Key: m.Key, Weight: m.Entries},
			FadeStart: m.FadeStart,
			Curve:     s.Curve,
		})
		index = append(index, i)
	}
	if len(members) == 0 {
		return nil, nil, ErrNoneInEDS
	}
	n := fadein.NewNRing(CountRing)
	// Update folds a fade that is over at the instant it is given into the
	// established ring. Given the step in force, which picks are made at,
	// it folds only fades whose share is 1 at every later pick, so the
	// ring picks alike whenever it was built: a client that built it at
	// the last schedule change and /debug/pick building it now agree. Given
	// the clock, a ring built mid-step would fold a fade whose duration is
	// not whole seconds a step before picks see its share reach 1.
	if err := n.Update(members, fadein.StepTime(now)); err != nil {
		return nil, nil, err
	}
	return n, index, nil
}

// CountRing is the ring_hash ring Envoy and grpc-go build for a laid-out
// cluster once every member holds its final entries (fadein.NewCountRing):
// with every member of a fade, the ring the fade ends in.
func CountRing(eps []ringhash.Endpoint) (ringhash.Ring, error) {
	r, err := fadein.NewCountRing(eps, ringhash.XXHash)
	if err != nil {
		return nil, err
	}
	return r, nil
}
