package ads

import (
	"testing"
	"time"
)

// The delay doubles from base up to the cap, with full jitter: never zero,
// never above the bound of its attempt.
func TestBackoffBounds(t *testing.T) {
	base, maxDelay := 100*time.Millisecond, 2*time.Second
	for attempt := range 40 {
		bound := maxDelay
		if attempt < 5 {
			bound = base << attempt
		}
		var top time.Duration
		for range 200 {
			d := backoff(base, maxDelay, attempt)
			if d <= 0 || d > bound {
				t.Fatalf("attempt %d: delay %v outside (0, %v]", attempt, d, bound)
			}
			top = max(top, d)
		}
		if top < bound/2 {
			t.Fatalf("attempt %d: 200 delays all below %v: no jitter over the range (bound %v)", attempt, top, bound)
		}
	}
}

// Long bases and many attempts must not overflow into a negative delay,
// which would panic inside rand.Int64N and with it the Dial goroutine.
func TestBackoffNeverOverflows(t *testing.T) {
	for _, tc := range []struct {
		base, maxDelay time.Duration
	}{
		{20 * time.Second, time.Hour},
		{17200 * time.Millisecond, 100 * time.Hour},
		{time.Duration(1 << 62), time.Duration(1<<63 - 1)},
		{0, 0},
		{time.Second, 0},
	} {
		for _, attempt := range []int{0, 1, 29, 30, 63, 64, 1000} {
			d := backoff(tc.base, tc.maxDelay, attempt)
			if d <= 0 || d > max(tc.maxDelay, time.Nanosecond) {
				t.Fatalf("base %v max %v attempt %d: delay %v", tc.base, tc.maxDelay, attempt, d)
			}
		}
	}
}
