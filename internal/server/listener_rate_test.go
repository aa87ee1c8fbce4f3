package server

import (
	"net"
	"testing"
	"time"
)

// Burst, then the rate: at 50 a second with a burst of 5, 40 connections
// at once are all admitted unwrapped (35 wait at most 0.7 s, within
// connWait), the i-th waiting one about i/50 s after the storm, and none
// before its token.
func TestBurstThenRate(t *testing.T) {
	lim := noLimits()
	lim.ConnectionsPerSecond, lim.ConnectionBurst = 50, 5
	s := New(t.Context(), Options{Limits: &lim})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := s.Listen(inner)
	defer l.Close()
	start := time.Now()
	for range 40 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	var wrapped int
	var at []time.Duration
	for range 40 {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, ok := c.(*net.TCPConn); !ok {
			wrapped++
		}
		at = append(at, time.Since(start))
	}
	if wrapped > 0 {
		t.Errorf("%d of 40 refused or wrapped, want none", wrapped)
	}
	for i := 5; i < 40; i++ {
		due := time.Duration(i-4) * time.Second / 50
		if at[i] < due-15*time.Millisecond || at[i] > due+300*time.Millisecond {
			t.Errorf("connection %d handed at %v, due about %v", i, at[i], due)
		}
	}
}
