//go:build !linux

package watch

import "time"

// fileWriters would follow whether a process is writing the file; only
// Linux (inotify's IN_CLOSE_WRITE) reports when a writer closes a file,
// so elsewhere none is followed and an in-place write is read once the
// debounce has passed (docs/file-source.md).
type fileWriters struct{}

// fileWatchWriters returns nil: writers are not followed here.
func fileWatchWriters(dir, base string) (*fileWriters, error) { return nil, nil }

// Writing is always false.
func (w *fileWriters) Writing() (last time.Time, writing bool) { return time.Time{}, false }

// Closed never receives.
func (w *fileWriters) Closed() <-chan struct{} { return nil }

// Close does nothing.
func (w *fileWriters) Close() error { return nil }
