package watch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// fileWriters follows, through its own inotify instance on the file's
// directory, whether some process has written to the file and not yet
// closed it: a file rewritten in place is complete only once its writer
// closes it, however long the writer pauses in between. fsnotify does not
// report closes, hence the second instance.
type fileWriters struct {
	f    *os.File
	base string
	// closed receives, without blocking, when the file stops being
	// written: a writer closed it, or it was replaced or removed.
	closed chan struct{}
	done   chan struct{}

	mu      sync.Mutex
	writing bool
	// last is when the file was last written to.
	last time.Time
}

// fileWatchWriters starts following the writers of the file named base in
// dir.
func fileWatchWriters(dir, base string) (*fileWriters, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	const mask = syscall.IN_MODIFY | syscall.IN_CLOSE_WRITE | syscall.IN_MOVED_TO | syscall.IN_MOVED_FROM | syscall.IN_DELETE
	if _, err := syscall.InotifyAddWatch(fd, dir, mask); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("inotify watch %s: %w", dir, err)
	}
	// A non-blocking descriptor goes through the runtime's poller, so
	// that Close wakes the pending Read.
	w := &fileWriters{
		f:      os.NewFile(uintptr(fd), "inotify"),
		base:   base,
		closed: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	go w.read()
	return w, nil
}

func (w *fileWriters) read() {
	defer close(w.done)
	buf := make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			// Closed, or the instance failed: either way nobody is
			// waiting on a writer any more.
			w.set(false)
			return
		}
		// Each event is a fixed header (wd, mask, cookie, len) followed by
		// len bytes of NUL-padded name; the kernel never splits one.
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			start := off + syscall.SizeofInotifyEvent
			off = start + nameLen
			if off > n {
				break
			}
			w.event(mask, strings.TrimRight(string(buf[start:off]), "\x00"))
		}
	}
}

func (w *fileWriters) event(mask uint32, name string) {
	switch {
	case mask&(syscall.IN_Q_OVERFLOW|syscall.IN_IGNORED) != 0:
		// Events were lost, or the directory is gone: what is known of
		// the writers is stale, and waiting on it could last for good.
		w.set(false)
	case name != w.base:
	case mask&syscall.IN_MODIFY != 0:
		w.set(true)
	default:
		// A close after writing, or the name now holds another file (a
		// rename into place) or none: what the name holds is complete.
		w.set(false)
	}
}

func (w *fileWriters) set(writing bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if writing {
		w.last = time.Now()
	}
	if !writing && w.writing {
		select {
		case w.closed <- struct{}{}:
		default:
		}
	}
	w.writing = writing
}

// Writing reports whether the file has been written to and not closed
// since, and when it was last written to. It is false on a nil
// *fileWriters.
func (w *fileWriters) Writing() (last time.Time, writing bool) {
	if w == nil {
		return time.Time{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.writing
}

// Closed receives when the file stops being written. It is nil, and so
// never receives, on a nil *fileWriters.
func (w *fileWriters) Closed() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.closed
}

// Close stops following the writers.
func (w *fileWriters) Close() error {
	if w == nil {
		return nil
	}
	err := w.f.Close()
	<-w.done
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}
