package loadgen

import "syscall"

// childAttr makes the kernel kill the server if the tool dies without
// cleaning up (SIGKILL, a crash), so no orphan keeps the ports.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
