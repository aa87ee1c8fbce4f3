package server

import (
	"net"
	"testing"
	"time"
)

// A connection over the rate that waits for its token reaches gRPC as the
// TCP connection it is: gRPC reads a bare TCP connection through pooled
// buffers and gives any wrapper a 32 KB read buffer of its own for life.
// It is handed on once its token is due, not before.
func TestWaitingConnectionsAreHandedOnUnwrapped(t *testing.T) {
	lim := noLimits()
	lim.ConnectionsPerSecond, lim.ConnectionBurst = 10, 1
	s := New(t.Context(), Options{Limits: &lim})
	l, addr := rateLimitedLoopback(t, s)
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	start := time.Now()
	var at []time.Duration
	for i := range 3 {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, ok := c.(*net.TCPConn); !ok {
			t.Errorf("connection %d reached gRPC as a %T", i, c)
		}
		at = append(at, time.Since(start))
	}
	// Burst 1 at 10 a second: the second and third wait about 100 and
	// 200 ms for their tokens.
	if at[1] < 80*time.Millisecond || at[2] < 180*time.Millisecond || at[2] > 2*time.Second {
		t.Errorf("accepted after %v, want the second after about 100 ms and the third after about 200 ms", at)
	}
}

// Closing the listener closes the connections still waiting for a token
// and ends Accept.
func TestClosingTheListenerClosesWaitingConnections(t *testing.T) {
	lim := noLimits()
	lim.ConnectionsPerSecond, lim.ConnectionBurst = 1.5, 1
	s := New(t.Context(), Options{Limits: &lim})
	l, addr := rateLimitedLoopback(t, s)
	var clients []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	first, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// The second waits about 670 ms for its token; close before then.
	time.Sleep(100 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Accept(); err == nil {
		t.Fatal("Accept succeeded on a closed listener")
	}
	_ = clients[1].SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = clients[1].Read(make([]byte, 1))
	if ne, ok := err.(net.Error); err == nil || ok && ne.Timeout() {
		t.Fatalf("the waiting connection was not closed with the listener: %v", err)
	}
}

// Burst, then the rate: at 50 a second with a burst of 5, 40 connections
// at once are all admitted unwrapped (35 wait at most 0.7 s, within
// connWait), the i-th waiting one about i/50 s after the storm, and none
// before its token.
func TestBurstThenRate(t *testing.T) {
	lim := noLimits()
	lim.ConnectionsPerSecond, lim.ConnectionBurst = 50, 5
	s := New(t.Context(), Options{Limits: &lim})
	l, addr := rateLimitedLoopback(t, s)
	start := time.Now()
	for range 40 {
		c, err := net.Dial("tcp", addr)
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
