package watch

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ringxds/ringxds/internal/fadein"
	"github.com/ringxds/ringxds/internal/model"
)

// DefaultFileDebounce is how long FileSource waits after the last change
// event before reloading. Editors, atomic writers and the kubelet's ConfigMap
// update each emit a handful of events within a few milliseconds; 50 ms
// folds them into one reload. It is a direct share of change-to-push
// latency, which docs/benchmarks.md measured at 1,000 clients: p99 334 ms
// with 100 ms, 229 ms with 50 ms.
const DefaultFileDebounce = 50 * time.Millisecond

// fileMaxDelayFactor bounds how long a continuous stream of events can defer
// a reload, in multiples of the debounce, so that a busy writer cannot starve
// the control plane of updates.
const fileMaxDelayFactor = 10

// DefaultFileWriterWait is how long FileSource waits, after the last write
// to a file written in place, for the writer to close it before reading
// it anyway (Linux only; docs/file-source.md, "Files written in place").
// A writer that pauses mid-file, to compute or fetch the rest, must not
// have its first half published: the clusters missing from it would be
// withdrawn from every client, and their endpoints would fade in again
// when they came back. 30 s outlasts the pauses of a writer that is merely
// slow (a script printing as it queries an API, behind retries); one that
// holds the file open and idle longer still (none of the usual tools do)
// gets its file read as it stands, with a warning, rather than never.
const DefaultFileWriterWait = 30 * time.Second

// fileConfigMapData is the symlink the kubelet swaps atomically when a
// mounted ConfigMap changes; the file itself is a symlink through it and
// sees no event of its own.
const fileConfigMapData = "..data"

const fileSourceName = "file"

// DefaultFileMaxSize is the largest endpoints file FileSource reads. Parsing
// holds some 50 bytes of memory per byte of file: a 16 MiB file of 246,000
// endpoints took 1.8 s and 800 MB, a 64 MiB one 8.6 s and 3 GB, more than a
// control plane's container is usually given. 16 MiB is 25 times the
// 10,000-endpoint file BenchmarkFileParseLarge parses; a larger file is far
// more likely a mistake (a log, a dump) than a deployment, and reading it
// whole could take the server down with it.
const DefaultFileMaxSize = 16 << 20

// FileOptions configures a FileSource. The zero value is usable.
type FileOptions struct {
	// Logger receives reload results and input errors. Nil discards them.
	Logger *zap.Logger
	// Registerer receives the source's metrics. Nil registers none.
	Registerer prometheus.Registerer
	// Debounce is the quiet time after the last change event before a
	// reload. Zero means DefaultFileDebounce.
	Debounce time.Duration
	// MaxSize is the largest content, in bytes, the source accepts; a
	// larger file is refused without being read whole. Zero means
	// DefaultFileMaxSize.
	MaxSize int64
	// Now is the clock that dates changes (an endpoint's FirstSeen, a
	// departure); nil means time.Now. A server whose fade-in clock is
	// not the wall clock passes the same one, so that the two agree on
	// when a fade started and whether it is over.
	Now func() time.Time
}

// FileSource is the Source that reads clusters from an endpoints file (see
// docs/file-source.md) and reloads it when it changes, or that serves fixed
// in-memory content such as the embedded example.
//
// Endpoints present when the first valid content is loaded are established
// (zero FirstSeen); an endpoint added by a later reload gets FirstSeen set to
// the time of the change, so that fade-in ramps it up. An endpoint removed
// while a fade is under way is listed in its cluster's Departed until the
// first reload after that cluster's last fade is over.
type FileSource struct {
	// name is the file as the user named it, used in messages and Problems.
	name string
	// path is name made absolute, so the directory watch survives a later
	// change of working directory; empty for in-memory content.
	path     string
	data     []byte
	log      *zap.Logger
	debounce time.Duration
	maxSize  int64
	// writerWait is DefaultFileWriterWait, shorter in tests.
	writerWait time.Duration
	// now dates changes (FileOptions.Now).
	now func() time.Time
	// cpu counts the CPU time reloads take (sourceCPUName).
	cpu      prometheus.Counter
	reloads  *prometheus.CounterVec
	problems prometheus.Gauge
	// items keeps the clusters of the last file read, so that a reload
	// parses only the clusters that changed.
	items fileItems

	mu sync.Mutex
	// good is the last valid state, FirstSeen assigned; nil until the first
	// successful load. goodSum is the XXH64 of the content it was read from.
	good    *model.State
	goodSum uint64
	current []Problem
}

var _ Source = (*FileSource)(nil)

// NewFileSource returns a source that watches the file at path. It does not
// read the file: call Load to check it before serving, or let Run load it.
func NewFileSource(path string, opts FileOptions) (*FileSource, error) {
	if path == "" {
		return nil, errors.New("file source: the endpoints file path is empty")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("file source: resolve %q: %w", path, err)
	}
	s, err := fileNewSource(path, opts)
	if err != nil {
		return nil, err
	}
	s.path = abs
	s.log = s.log.With(zap.String("file", path))
	return s, nil
}

// NewFileSourceFromBytes returns a source that serves fixed content, such as
// the endpoints file embedded in the binary. name identifies the content in
// errors. There is nothing to watch: Run publishes once and waits.
func NewFileSourceFromBytes(name string, data []byte, opts FileOptions) (*FileSource, error) {
	if name == "" {
		return nil, errors.New("file source: in-memory content needs a name for its errors")
	}
	s, err := fileNewSource(name, opts)
	if err != nil {
		return nil, err
	}
	s.data = slices.Clone(data)
	// Not "file": the content is a copy built into the program, and
	// editing the file it was copied from changes nothing until a rebuild.
	s.log = s.log.With(zap.String("embedded", name))
	return s, nil
}

func fileNewSource(name string, opts FileOptions) (*FileSource, error) {
	if opts.Debounce < 0 {
		return nil, fmt.Errorf("file source: debounce %v is negative", opts.Debounce)
	}
	if opts.MaxSize < 0 {
		return nil, fmt.Errorf("file source: maximum size %d is negative", opts.MaxSize)
	}
	s := &FileSource{
		name:       name,
		log:        opts.Logger,
		debounce:   opts.Debounce,
		maxSize:    cmp.Or(opts.MaxSize, DefaultFileMaxSize),
		writerWait: DefaultFileWriterWait,
		now:        opts.Now,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = s.log.With(zap.String("source", fileSourceName))
	if s.debounce == 0 {
		s.debounce = DefaultFileDebounce
	}
	labels := prometheus.Labels{"source": fileSourceName}
	s.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "ringxds_source_reloads_total",
		Help:        "Reloads of a source's input, by result.",
		ConstLabels: labels,
	}, []string{"result"})
	s.problems = prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "ringxds_source_problems",
		Help:        "Input problems a source currently reports.",
		ConstLabels: labels,
	})
	s.cpu = newSourceCPU(fileSourceName)
	if opts.Registerer != nil {
		var err error
		if s.cpu, err = fileRegister(opts.Registerer, s.cpu); err != nil {
			return nil, err
		}
		if s.reloads, err = fileRegister(opts.Registerer, s.reloads); err != nil {
			return nil, err
		}
		if s.problems, err = fileRegister(opts.Registerer, s.problems); err != nil {
			return nil, err
		}
	}
	// Both outcomes exist from the start, so that rate() and alerts on
	// errors work before the first failure.
	s.reloads.WithLabelValues("ok")
	s.reloads.WithLabelValues("error")
	return s, nil
}

// fileRegister registers c, or reuses the collector already registered under
// the same descriptor, so that a process may restart a source on one
// registry.
func fileRegister[C prometheus.Collector](r prometheus.Registerer, c C) (C, error) {
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("file source: register metrics: %w", err)
	}
	return c, nil
}

// Load reads and validates the content now, so that a server can refuse to
// start on an invalid file with a clear message. The error lists every
// problem with its file, line and field (see FileErrors). A successful Load
// becomes the state Run publishes first.
func (s *FileSource) Load() (model.State, error) {
	st, err := s.reload(s.now())
	return st, err
}

// Run publishes the current state, then, for a file, every valid change to
// it until ctx is done; it returns nil then. On Linux, a file written in
// place is read only once its writer has closed it (see
// DefaultFileWriterWait). While the file is invalid or missing it keeps
// the last good state and reports the problem in Problems, the log and the
// metrics. Run fails only if the file's directory cannot be
// watched, or if in-memory content is invalid (waiting cannot fix it).
func (s *FileSource) Run(ctx context.Context, publish func(model.State)) error {
	if s.path == "" {
		// Fixed content that Load already read is not read again: it
		// cannot have changed, and a second read would count as a reload.
		st, ok := s.goodState()
		if !ok {
			var err error
			if st, err = s.reload(s.now()); err != nil {
				// Fixed content cannot be fixed by waiting.
				return fmt.Errorf("file source: %w", err)
			}
		}
		publish(st)
		<-ctx.Done()
		return nil
	}

	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("file source: start watcher for %s: %w", s.name, err)
	}
	defer w.Close()
	// The directory is watched, not the file: an atomic rename or a
	// ConfigMap symlink swap replaces the file's inode, and a watch on the
	// old inode would go silent.
	dir := filepath.Dir(s.path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("file source: watch directory %s: %w", dir, err)
	}
	writers, err := fileWatchWriters(dir, filepath.Base(s.path))
	if err != nil {
		// Reloads still work; only a writer's pauses go unseen.
		s.log.Warn("cannot follow the file's writers; a file written in place may be read before its writer is done",
			zap.Error(err))
	}
	defer writers.Close()

	// The watch is in place before this read, so no change after it is
	// missed; a change between Load and now is picked up here. Content
	// that Load already read is no reload: one start counts one.
	var last *model.State
	data, rerr := s.content()
	if good, ok := s.unchanged(data, rerr); ok {
		last = &good
	} else if st, err := s.apply(s.now(), data, rerr); err == nil {
		last = &st
	} else if good, ok := s.goodState(); ok {
		// The file went bad after a successful Load: serve what Load saw.
		last = &good
	}
	if last != nil {
		publish(*last)
	}

	l := &fileLoop{s: s, writers: writers, publish: publish, last: last, timer: time.NewTimer(time.Hour)}
	l.timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("file source: watcher closed unexpectedly")
			}
			if ev.Name == dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				// The kernel drops the watch with the directory; nothing
				// short of a restart brings it back, so say so loudly.
				s.log.Error("the endpoints file's directory was removed; the file is no longer watched and the last state stays in service",
					zap.String("directory", dir))
				continue
			}
			if s.relevant(ev) {
				l.changed(time.Now())
			}
		case <-writers.Closed():
			// The file a reload was waiting on is complete.
			if l.pending {
				l.debounce(time.Now())
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("file source: watcher closed unexpectedly")
			}
			// An overflowed event queue means changes may have been lost;
			// rereading the file is the only way to be sure.
			s.log.Warn("file watcher error; rereading the file", zap.Error(err))
			if !l.pending {
				l.pending, l.first, l.firstAt = true, time.Now(), s.now()
			}
			l.timer.Reset(s.debounce)
		case <-l.timer.C:
			l.quiet()
		}
	}
}

// fileLoop is the state of Run's loop between file events: a burst of
// changes is read once it has been quiet for the debounce period.
type fileLoop struct {
	s       *FileSource
	writers *fileWriters
	publish func(model.State)
	last    *model.State
	timer   *time.Timer
	// pending: a change is not read yet, first seen at first (by the
	// wall clock, for the debounce) and firstAt (by the source's clock,
	// which dates the change); waiting: the read waits for an in-place
	// writer, which has been logged.
	pending, waiting bool
	first, firstAt   time.Time
}

func (l *fileLoop) changed(now time.Time) {
	if !l.pending {
		l.pending, l.first, l.firstAt = true, now, l.s.now()
	}
	l.debounce(now)
}

// debounce (re)arms the timer for a quiet period, but never beyond the cap
// after the first event of the burst.
func (l *fileLoop) debounce(now time.Time) {
	wait := min(l.s.debounce, l.first.Add(fileMaxDelayFactor*l.s.debounce).Sub(now))
	l.timer.Reset(max(wait, 0))
}

// quiet reads the file once the burst is over, unless a writer still holds
// it open, and publishes what changed.
func (l *fileLoop) quiet() {
	s := l.s
	if last, writing := l.writers.Writing(); writing {
		// Written in place and not yet closed: the file may stop half-way,
		// and a half that parses would be published.
		if wait := time.Until(last.Add(s.writerWait)); wait > 0 {
			if !l.waiting {
				l.waiting = true
				s.log.Info("the endpoints file is being written in place; waiting for the writer to close it",
					zap.Time("last_write", last))
			}
			l.timer.Reset(wait)
			return
		}
		s.log.Warn("the endpoints file is held open for writing but idle for too long; reading it as it stands, possibly half-written: write the file elsewhere and rename it into place",
			zap.Time("last_write", last), zap.Duration("wait", s.writerWait))
	}
	l.pending, l.waiting = false, false
	st, err := s.reload(l.firstAt)
	if err != nil {
		return
	}
	if l.last != nil && fileStatesEqual(*l.last, st) {
		s.log.Debug("endpoints file changed but its clusters did not; nothing to publish")
		return
	}
	l.publish(st)
	l.last = &st
}

// relevant reports whether an event may have changed the file's content.
func (s *FileSource) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		// Attribute-only changes are frequent (backup and indexing tools)
		// and never change the content.
		return false
	}
	base := filepath.Base(ev.Name)
	return base == filepath.Base(s.path) || base == fileConfigMapData
}

// goodState returns a copy of the last valid state, sharing nothing with
// the one kept for FirstSeen.
func (s *FileSource) goodState() (model.State, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.good == nil {
		return model.State{}, false
	}
	return fileCloneState(*s.good), true
}

// unchanged returns the last valid state if data, read without error, is
// the content it was loaded from.
func (s *FileSource) unchanged(data []byte, readErr error) (model.State, bool) {
	if readErr != nil {
		return model.State{}, false
	}
	s.mu.Lock()
	same := s.good != nil && s.goodSum == xxhash.Sum64(data)
	s.mu.Unlock()
	if !same {
		return model.State{}, false
	}
	return s.goodState()
}

// Problems returns the input errors currently in force, oldest first.
func (s *FileSource) Problems() []Problem {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.current)
}

// reload reads and parses the content. On success it assigns FirstSeen
// against the previous good state, makes the result the good state, and
// clears the problems. On failure the good state is kept and the problems
// recorded.
func (s *FileSource) reload(at time.Time) (model.State, error) {
	data, err := s.content()
	return s.apply(at, data, err)
}

// content reads the file, or returns the in-memory content.
func (s *FileSource) content() ([]byte, error) {
	if s.path != "" {
		return s.read()
	}
	if int64(len(s.data)) > s.maxSize {
		return nil, &FileError{Path: s.name, Err: fileTooLarge(int64(len(s.data)), s.maxSize)}
	}
	return s.data, nil
}

// apply parses content read at at (or the error reading it) and counts,
// records and logs the reload.
func (s *FileSource) apply(at time.Time, data []byte, err error) (model.State, error) {
	defer measureCPU(s.cpu)()
	var st model.State
	if err == nil {
		st, err = s.items.parse(s.name, data)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.reloads.WithLabelValues("error").Inc()
		s.setProblems(err, at)
		// Only a source that has loaded something keeps serving it: at
		// start-up there is nothing to keep, and saying so would suggest
		// the server runs on.
		msg := "endpoints file rejected; keeping the last good state"
		if s.good == nil {
			msg = "endpoints file rejected; there is no earlier state to keep, so nothing is served until it is fixed"
		}
		// One entry per problem, with its location as fields, so that log
		// queries can select by line or field.
		for _, fe := range FileErrors(err) {
			s.log.Error(msg,
				zap.Int("line", fe.Line), zap.Int("column", fe.Column),
				zap.String("field", fe.Field), zap.String("cluster", fe.Cluster),
				zap.String("problem", fe.Err.Error()),
				zap.Bool("have_good_state", s.good != nil))
		}
		return model.State{}, err
	}
	s.reloads.WithLabelValues("ok").Inc()
	s.setProblems(nil, at)
	st.ChangedAt = at
	if s.good != nil {
		fileAssignFirstSeen(&st, *s.good, at)
	}
	// The published State shares nothing with the one kept for FirstSeen,
	// so whatever a consumer does with it cannot alter later reloads.
	good, changed := fileKeepState(st, s.good)
	s.good, s.goodSum = &good, xxhash.Sum64(data)
	if s.path == "" {
		s.log.Info("embedded endpoints loaded; they are part of the binary and not watched", zap.Int("clusters", len(st.Clusters)))
	} else {
		s.log.Info("endpoints file loaded", zap.Int("clusters", len(st.Clusters)), zap.Bool("changed", changed))
	}
	return st, nil
}

// read returns the file's content. It refuses, with a *FileError, anything
// but a regular file: a named pipe put in the file's place would block the
// read, and so the source, until some process wrote to it, and a device
// such as /dev/zero would never end. It refuses a file larger than
// s.maxSize without reading it whole.
func (s *FileSource) read() ([]byte, error) {
	// Opening a named pipe for reading blocks until it has a writer,
	// unless non-blocking; on a regular file the flag changes nothing.
	f, err := os.OpenFile(s.path, os.O_RDONLY|fileOpenNonBlock, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &FileError{Path: s.name, Err: fmt.Errorf("the file does not exist (deleted, or not yet written): %w", err)}
	} else if err != nil {
		return nil, &FileError{Path: s.name, Err: fmt.Errorf("cannot read the file: %w", err)}
	}
	defer f.Close()
	// The open file is checked, not the path, so that nothing can be
	// swapped in between the check and the read.
	info, err := f.Stat()
	if err != nil {
		return nil, &FileError{Path: s.name, Err: fmt.Errorf("cannot read the file: %w", err)}
	}
	if !info.Mode().IsRegular() {
		return nil, &FileError{Path: s.name, Err: fmt.Errorf(
			"is %s, not a regular file: only regular files (or symlinks to them) are read, since a pipe or device can block the source or never end", fileDescribeMode(info.Mode()))}
	}
	if info.Size() > s.maxSize {
		return nil, &FileError{Path: s.name, Err: fileTooLarge(info.Size(), s.maxSize)}
	}
	// The size may have grown since Stat: read one byte more than the
	// limit to tell, never more. The buffer is sized from Stat, with room
	// to see the end, so that a large file is not copied as it grows.
	var buf bytes.Buffer
	buf.Grow(int(info.Size()) + bytes.MinRead)
	if _, err := buf.ReadFrom(io.LimitReader(f, s.maxSize+1)); err != nil {
		return nil, &FileError{Path: s.name, Err: fmt.Errorf("cannot read the file: %w", err)}
	}
	data := buf.Bytes()
	if int64(len(data)) > s.maxSize {
		return nil, &FileError{Path: s.name, Err: fmt.Errorf("the file grew past the limit of %s while being read", fileBytes(s.maxSize))}
	}
	return data, nil
}

// fileTooLarge says content of size bytes is over limit.
func fileTooLarge(size, limit int64) error {
	return fmt.Errorf("the file is %s, over the limit of %s: parsing holds some 50 times a file's size in memory, so a file this large is refused unread",
		fileBytes(size), fileBytes(limit))
}

func fileBytes(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
}

// fileDescribeMode names the kind of a file that is not a regular one.
func fileDescribeMode(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "of type " + m.Type().String()
}

// setProblems replaces the current problems with those in err, keeping the
// Since of a problem that was already reported. Callers hold s.mu.
func (s *FileSource) setProblems(err error, at time.Time) {
	var next []Problem
	count := 0
	for _, fe := range FileErrors(err) {
		// The gauge counts the problems left out of the list too.
		count++
		if more, ok := fe.Err.(fileMoreProblems); ok {
			count += int(more) - 1
		}
		p := Problem{Source: fileSourceName, Object: s.name, Message: fe.Err.Error(), Since: at}
		if fe.Line > 0 {
			p.Field = "line " + strconv.Itoa(fe.Line)
			if fe.Field != "" {
				p.Field += ", " + fe.Field
			}
		} else {
			p.Field = fe.Field
		}
		if fe.Cluster != "" {
			p.Message = fmt.Sprintf("cluster %q: %s", fe.Cluster, p.Message)
		}
		for _, old := range s.current {
			if old.Field == p.Field && old.Message == p.Message {
				p.Since = old.Since
				break
			}
		}
		next = append(next, p)
	}
	if err != nil && len(next) == 0 {
		next = append(next, Problem{Source: fileSourceName, Object: s.name, Message: err.Error(), Since: at})
		count = 1
	}
	slices.SortStableFunc(next, func(a, b Problem) int { return a.Since.Compare(b.Since) })
	s.current = next
	s.problems.Set(float64(count))
}

// fileAssignFirstSeen carries FirstSeen over from prev for endpoints that
// stay, keyed by cluster name and host:port, and stamps the rest with at.
// It also carries and records the departures of fade-in clusters
// (fileTrackDepartures).
func fileAssignFirstSeen(st *model.State, prev model.State, at time.Time) {
	for ci := range st.Clusters {
		c := &st.Clusters[ci]
		pc, ok := prev.Cluster(c.Name)
		if !ok {
			for ei := range c.Endpoints {
				c.Endpoints[ei].FirstSeen = at
			}
			continue
		}
		// Most endpoints of most clusters keep their place from one
		// version of a file to the next, and are matched there; the map
		// of the others is built only when one is not.
		var old map[fileHostPort]time.Time
		for ei := range c.Endpoints {
			ep := &c.Endpoints[ei]
			if ei < len(pc.Endpoints) && fileSameHostPort(ep, &pc.Endpoints[ei]) {
				ep.FirstSeen = pc.Endpoints[ei].FirstSeen
				continue
			}
			if old == nil {
				old = make(map[fileHostPort]time.Time, len(pc.Endpoints))
				for _, p := range pc.Endpoints {
					old[fileHostPort{p.Address, p.Port}] = p.FirstSeen
				}
			}
			if seen, ok := old[fileHostPort{ep.Address, ep.Port}]; ok {
				ep.FirstSeen = seen
			} else {
				ep.FirstSeen = at
			}
		}
		fileTrackDepartures(c, pc, at)
	}
}

// fileHostPort is an endpoint's identity across reloads: its host:port,
// kept as the pair it is built from, since the file's addresses are
// canonical and the strings need not be built.
type fileHostPort struct {
	address string
	port    uint32
}

func fileSameHostPort(a, b *model.Endpoint) bool { return a.Address == b.Address && a.Port == b.Port }

// fileTrackDepartures sets c.Departed from the previous version of the
// cluster, prev, for a reload at time at. The fade-in plan replays the ring
// of the current chain of fades as it was before each endpoint left, so an
// endpoint that leaves while a fade is under way is remembered until the
// cluster's last fade is over; one that leaves a steady cluster is not, as
// no replay reaches back past it.
//
// The file source has no timer for the end of a fade, so whether the
// previous fades are over is judged first, from prev alone: a reload after
// they ended starts from no departures, as if the cluster had been rebuilt
// when they did, and a fade that begins with this reload does not keep
// departures of an older one alive.
func fileTrackDepartures(c, prev *model.Cluster, at time.Time) {
	c.Departed = nil
	if c.FadeIn == nil {
		return
	}
	curve := fadein.Curve{Duration: c.FadeIn.Duration}
	fadingAt := func(first time.Time) bool { return !first.IsZero() && curve.EndStep(first).After(at) }

	prevFading := false
	for _, ep := range prev.Endpoints {
		prevFading = prevFading || fadingAt(ep.FirstSeen)
	}
	for _, d := range prev.Departed {
		prevFading = prevFading || fadingAt(d.Endpoint.FirstSeen)
	}
	fading := prevFading
	for _, ep := range c.Endpoints {
		fading = fading || fadingAt(ep.FirstSeen)
	}
	if !fading {
		return
	}
	if prevFading {
		c.Departed = slices.Clone(prev.Departed)
	}
	stay := make(map[fileHostPort]bool, len(c.Endpoints))
	for _, ep := range c.Endpoints {
		stay[fileHostPort{ep.Address, ep.Port}] = true
	}
	for _, ep := range prev.Endpoints {
		if !stay[fileHostPort{ep.Address, ep.Port}] {
			c.Departed = append(c.Departed, model.Departure{Endpoint: ep, Gone: at})
		}
	}
	sortDepartures(c.Departed)
}

func fileCloneState(st model.State) model.State {
	st.Clusters = slices.Clone(st.Clusters)
	for i := range st.Clusters {
		st.Clusters[i] = st.Clusters[i].Clone()
	}
	return st
}

// fileKeepState returns a copy of st that shares nothing with it, to keep
// as the good state after prev (nil for none), and whether st differs
// from prev. A cluster equal to prev's is taken from prev rather than
// copied again: a kept state is never changed, and most clusters are the
// same from one reload to the next.
func fileKeepState(st model.State, prev *model.State) (kept model.State, changed bool) {
	kept = st
	kept.Clusters = make([]model.Cluster, len(st.Clusters))
	changed = prev == nil || len(prev.Clusters) != len(st.Clusters)
	for i := range st.Clusters {
		c := &st.Clusters[i]
		if prev != nil && i < len(prev.Clusters) && prev.Clusters[i].Equal(c) {
			kept.Clusters[i] = prev.Clusters[i]
			continue
		}
		changed = true
		kept.Clusters[i] = c.Clone()
	}
	return kept, changed
}

// fileStatesEqual compares the clusters of two states, ignoring ChangedAt,
// which differs on every reload.
func fileStatesEqual(a, b model.State) bool {
	return slices.EqualFunc(a.Clusters, b.Clusters, func(x, y model.Cluster) bool { return x.Equal(&y) })
}
