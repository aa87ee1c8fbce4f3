//go:build !linux

package watch

import "time"

// threadCPUTime is not available here: the source's CPU reads 0.
func threadCPUTime() (time.Duration, bool) { return 0, false }
