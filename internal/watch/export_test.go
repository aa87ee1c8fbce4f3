package watch

import "time"

// SetFileWriterWait shortens how long s waits for a writer to close the
// file, so that tests can see the wait end. Call it before Run.
func SetFileWriterWait(s *FileSource, d time.Duration) { s.writerWait = d }
