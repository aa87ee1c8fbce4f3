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
