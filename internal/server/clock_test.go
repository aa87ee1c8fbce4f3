package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// stepClock is a server clock a test sets by hand.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = at
}

// fadeState is a ring_hash cluster of four established endpoints and one
// more per start in starts, fading in over 10 s, linearly; zone marks a
// change that moves no key.
func fadeState(t *testing.T, zone string, starts ...time.Time) model.State {
	t.Helper()
	c := model.Cluster{Name: "products", Policy: model.PolicyRingHash, FadeIn: &model.FadeIn{Duration: 10 * time.Second, Exponent: 1}}
	for i := range 4 {
		c.Endpoints = append(c.Endpoints, model.Endpoint{Address: fmt.Sprintf("10.0.0.%d", i+1), Port: 8080, Zone: zone})
	}
	for i, at := range starts {
		c.Endpoints = append(c.Endpoints, model.Endpoint{Address: fmt.Sprintf("10.0.1.%d", i+1), Port: 8080, FirstSeen: at})
	}
	st := model.State{Clusters: []model.Cluster{c}}
	if err := st.Normalize(); err != nil {
		t.Fatal(err)
	}
	return st
}

// fadeOf returns the published fade status of the endpoint, or nil once
// it is in for good.
func fadeOf(s *Server, endpoint string) *snapshot.FadeStatus {
	for _, st := range s.Current().Fading["products"] {
		if st.Endpoint == endpoint {
			return &st
		}
	}
	return nil
}

// A clock stepped back mid-fade must not take back ring entries already
// published: neither the step timer nor an input change rebuilds at the
// earlier instant. The fade resumes within a second of the clock being
// back, and once nothing would fade at the clock's instant, builds follow
// the clock again, so a later fade starts from its own beginning.
func TestClockSteppedBackHoldsThePublishedStep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clk := &stepClock{now: t0.Add(5500 * time.Millisecond)}
	s := New(ctx, Options{Now: clk.Now})
	if err := s.Apply(fadeState(t, "", t0)); err != nil {
		t.Fatal(err)
	}
	const fading = "10.0.1.1:8080"
	held := fadeOf(s, fading)
	if held == nil || held.Share != 0.5 || held.Entries == 0 {
		t.Fatalf("at 5.5 s: fade status %+v, want share 0.5 with entries", held)
	}

	clk.Set(t0.Add(5500*time.Millisecond - time.Hour))
	published := s.Current()
	time.Sleep(1500 * time.Millisecond) // the step timer armed at 5.5 s fires
	if s.Current() != published {
		t.Errorf("an hour back: the step timer rebuilt (share %v)", fadeOf(s, fading))
	}
	if err := s.Apply(fadeState(t, "zone-b", t0)); err != nil {
		t.Fatal(err)
	}
	if got := fadeOf(s, fading); got == nil || got.Share != held.Share || got.Entries != held.Entries {
		t.Fatalf("an hour back, after an input change: fade status %+v, want %+v", got, held)
	}

	clk.Set(t0.Add(7500 * time.Millisecond))
	waitFor(t, "the fade to resume with the clock", func() bool {
		got := fadeOf(s, fading)
		return got != nil && got.Share == 0.7
	}, func() string { return fmt.Sprintf("%+v", fadeOf(s, fading)) })

	// Past the fade, then back before it, with nothing fading then: the
	// clock is followed again, and a new endpoint fades from its start.
	clk.Set(t0.Add(time.Hour))
	if err := s.Apply(fadeState(t, "zone-b")); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(2 * time.Second))
	if err := s.Apply(fadeState(t, "zone-b", t0)); err != nil {
		t.Fatal(err)
	}
	if got := fadeOf(s, fading); got == nil || got.Share != 0.2 {
		t.Fatalf("a new fade after the clock went back: fade status %+v, want share 0.2", got)
	}
}
