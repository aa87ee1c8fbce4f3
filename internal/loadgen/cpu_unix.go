//go:build unix

package loadgen

import (
	"syscall"
	"time"
)

// selfCPU is the CPU time this process has used, or -1 where unknown. The
// tool shares the machine with the server; its own share is reported so a
// reader can tell how much of the machine the server had.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
