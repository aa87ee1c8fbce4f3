//go:build unix

package watch

import "syscall"

// fileOpenNonBlock makes opening a named pipe return at once instead of
// waiting for a writer, so that the source can see what it opened and
// refuse it.
const fileOpenNonBlock = syscall.O_NONBLOCK
