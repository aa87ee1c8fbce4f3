package watch

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// kubeMetrics are the Kubernetes source's Prometheus metrics. They are per
// source, never package globals, so tests can run several sources at once.
type kubeMetrics struct {
	events         *prometheus.CounterVec
	rebuilds       prometheus.Counter
	rebuildSeconds prometheus.Histogram
	publishes      prometheus.Counter
	clusters       prometheus.Gauge
	// drainingClusters counts clusters served from terminating endpoints.
	drainingClusters prometheus.Gauge
	problems         *prometheus.CounterVec
	activeProblems   prometheus.Gauge
	watchErrors      prometheus.Counter
	// cached counts the objects in the informer caches, by kind: each add
	// and delete notification is one object in or out of a cache.
	cached *prometheus.GaugeVec
	// cpu is the CPU time rebuilds take (sourceCPUName).
	cpu prometheus.Counter
}

func kubeNewMetrics(reg prometheus.Registerer) (*kubeMetrics, error) {
	m := &kubeMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringxds_kube_events_total",
			Help: "Informer events received, by resource and type, before filtering and coalescing.",
		}, []string{"resource", "type"}),
		rebuilds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringxds_kube_rebuilds_total",
			Help: "States built from the informer caches after a burst of events was coalesced.",
		}),
		rebuildSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringxds_kube_rebuild_duration_seconds",
			Help:    "Time to build a State from the informer caches.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		publishes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringxds_kube_publishes_total",
			Help: "States published because they differed from the previous one.",
		}),
		clusters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringxds_kube_clusters",
			Help: "Clusters in the last published State.",
		}),
		drainingClusters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringxds_kube_draining_clusters",
			Help: "Clusters in the last build served from terminating endpoints, because no other endpoint of the Service was serving.",
		}),
		problems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringxds_kube_problems_total",
			Help: "Input problems first seen, by kind (annotation, endpointslice).",
		}, []string{"kind"}),
		// The same series as the file source's, so one query covers
		// whichever source a server runs.
		activeProblems: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "ringxds_source_problems",
			Help:        "Input problems a source currently reports.",
			ConstLabels: prometheus.Labels{"source": "kubernetes"},
		}),
		watchErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringxds_kube_watch_errors_total",
			Help: "Interrupted list or watch calls; the informers retry by themselves.",
		}),
		cached: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringxds_kube_cached_objects",
			Help: "Objects held in the informer caches, by kind (service, endpointslice); what the watch selectors let through, opted in or not.",
		}, []string{"kind"}),
		cpu: newSourceCPU("kubernetes"),
	}
	// Both series exist from the start, so that an empty cache reads 0.
	m.cached.WithLabelValues("service")
	m.cached.WithLabelValues("endpointslice")
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.events, m.rebuilds, m.rebuildSeconds, m.publishes, m.clusters, m.drainingClusters, m.problems, m.activeProblems, m.watchErrors, m.cached, m.cpu} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}
