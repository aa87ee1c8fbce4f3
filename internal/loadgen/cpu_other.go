//go:build !unix

package loadgen

import "time"

// selfCPU is unknown outside Unix.
func selfCPU() time.Duration { return -1 }
