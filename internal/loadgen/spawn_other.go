//go:build !linux

package loadgen

import "syscall"

// childAttr has no parent-death signal outside Linux; the tool's deferred
// Stop and signal handling remain.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
