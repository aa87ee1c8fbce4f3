package watch

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// sourceCPUName is the metric of the CPU time a source spends reading its
// input. The scale benchmark divides the server's CPU by what it sent and
// needs this part of it apart: reparsing a file and fanning a change out
// are cut by different work.
const sourceCPUName = "ringxds_source_cpu_seconds_total"

func newSourceCPU(source string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name:        sourceCPUName,
		Help:        "CPU time the source spent reading its input into a State (parsing, validating, building), measured on the thread that did it; 0 where the platform cannot tell.",
		ConstLabels: prometheus.Labels{"source": source},
	})
}

// measureCPU pins the calling goroutine to its OS thread and returns the
// function that ends the measurement, adding the thread's CPU time since
// to c. Pinning keeps the thread's clock the goroutine's own; work the
// runtime does on other threads meanwhile (garbage collection) is not
// counted.
func measureCPU(c prometheus.Counter) (done func()) {
	runtime.LockOSThread()
	start, ok := threadCPUTime()
	return func() {
		if end, ok2 := threadCPUTime(); ok && ok2 && end >= start {
			c.Add((end - start).Seconds())
		}
		runtime.UnlockOSThread()
	}
}
