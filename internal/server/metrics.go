package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringxds/ringxds/internal/authz"
)

// metrics are the server-side figures a platform team graphs and alerts on.
// Every decision that changes what clients receive is counted here.
type metrics struct {
	pushes          *prometheus.CounterVec
	bytesSent       *prometheus.CounterVec
	nacks           *prometheus.CounterVec
	acks            *prometheus.CounterVec
	connected       *prometheus.GaugeVec
	compatibility   *prometheus.GaugeVec
	resources       *prometheus.GaugeVec
	buildSeconds    prometheus.Histogram
	applySeconds    prometheus.Histogram
	changeToPush    prometheus.Histogram
	buildErrors     prometheus.Counter
	snapshotChanges *prometheus.CounterVec
	fading          *prometheus.GaugeVec
	failedClusters  *prometheus.GaugeVec
	// clusterWait and clusterWaitTimeouts: pushes holding CLAs back until
	// the Clusters they belong to are sent (order.go).
	clusterWait         prometheus.Histogram
	clusterWaitTimeouts prometheus.Counter
	// limitHits: refusals of clients over a limit (limits.go).
	limitHits *prometheus.CounterVec
	// authzRefused: resources withheld from clients not authorized to
	// read them (authz.go).
	authzRefused *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringxds_xds_pushes_total",
			Help: "xDS responses sent, by client kind, resource type and protocol (sotw or delta).",
		}, []string{"kind", "type", "protocol"}),
		bytesSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringxds_xds_bytes_sent_total",
			Help: "Serialized bytes of xDS responses sent, by client kind, resource type and protocol.",
		}, []string{"kind", "type", "protocol"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringxds_xds_nacks_total",
			Help: "xDS responses rejected by clients (requests carrying error_detail).",
		}, []string{"kind", "type"}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringxds_xds_acks_total",
			Help: "xDS responses accepted by clients.",
		}, []string{"kind", "type"}),
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringxds_xds_connected_clients",
			Help: "Open xDS streams whose node has been identified, by client kind and protocol.",
		}, []string{"kind", "protocol"}),
		compatibility: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringxds_xds_client_compatibility",
			Help: "Identified xDS streams by data plane implementation and the worst verdict on the clusters they hold: ok, unverified, ring_differs (keys go to other pods than on Envoy) or incompatible (no ring: round_robin, a rejected cluster or a client known to crash). See /debug/clients.",
		}, []string{"implementation", "state"}),
		resources: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringxds_snapshot_resources",
			Help: "Resources currently published, by client kind and resource type.",
		}, []string{"kind", "type"}),
		buildSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringxds_snapshot_build_seconds",
			Help:    "Time to translate a model state into xDS resources.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringxds_xds_push_seconds",
			Help:    "Time to build a snapshot, diff it against the published one and notify the affected watches.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		changeToPush: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringxds_change_to_push_seconds",
			Help:    "Time from the first input change a source saw to the caches holding the new resources (includes the source's coalescing).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		buildErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringxds_snapshot_build_errors_total",
			Help: "Model states the snapshot builder rejected; the previous snapshot stayed published.",
		}),
		failedClusters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringxds_snapshot_cluster_failed",
			Help: "1 for each cluster the last build could not translate; it keeps its last good resources, or is not published if it had none (/debug/snapshot failed).",
		}, []string{"cluster"}),
		snapshotChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringxds_snapshot_resource_changes_total",
			Help: "Resources added, updated or removed in the caches, by resource type and operation.",
		}, []string{"type", "op"}),
		fading: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringxds_fading_endpoints",
			Help: "Endpoints currently fading in, by cluster.",
		}, []string{"cluster"}),
		clusterWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ringxds_xds_cluster_wait_seconds",
			Help:    "Time a push held its ClusterLoadAssignments back until every client holding a changed cluster was sent the new Cluster (so no CLA overtakes its Cluster). Observed only for pushes that had clients to wait for.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		clusterWaitTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringxds_xds_cluster_wait_timeouts_total",
			Help: "Clients not sent their changed Clusters within a push's hold (250 ms); their ClusterLoadAssignments went out first, and they are not waited for until they answer CDS within 100 ms again.",
		}),
		limitHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringxds_xds_limit_hits_total",
			Help: "Streams, requests and connections refused because a client went over a limit, by limit: streams_per_connection, names_per_stream, names_per_connection, request_rate, message_size, connection_rate, name_length, unknown_type. See /debug/clients.",
		}, []string{"limit"}),
		authzRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringxds_xds_authz_refused_total",
			Help: "Resources withheld from xDS clients not authorized to read them (--authz), counted once per stream and resource, by resource type (cds, eds, lds, rds) and reason: anonymous (no verified client certificate) or not_reader (another namespace, and not among the cluster's readers). See /debug/clients.",
		}, []string{"type", "reason"}),
	}
	for _, name := range limitNames {
		m.limitHits.WithLabelValues(name)
	}
	for _, t := range []string{"cds", "eds", "lds", "rds"} {
		for _, reason := range authz.RefusalReasons {
			m.authzRefused.WithLabelValues(t, reason)
		}
	}
	if reg != nil {
		reg.MustRegister(m.pushes, m.bytesSent, m.nacks, m.acks, m.connected, m.compatibility, m.resources,
			m.buildSeconds, m.applySeconds, m.changeToPush, m.buildErrors, m.snapshotChanges, m.fading, m.failedClusters,
			m.clusterWait, m.clusterWaitTimeouts, m.limitHits, m.authzRefused)
	}
	return m
}
