package clientlib

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector exports a Client's state at scrape time. Balancers count in
// plain atomics on their call path (Do); the collector reads them, so the
// hot path never touches a Prometheus structure. Pick, the bare lookup,
// counts nothing: a shared counter there would be the one contended write
// in an otherwise read-only path.
type collector struct{ c *Client }

var (
	descCalls = prometheus.NewDesc("ringxds_clientlib_calls_total",
		"Calls made through Balancer.Do and Transport (each attempt counts), by cluster and result: error when the endpoint failed (Balancer.Do says which calls fail), ok for every other attempt (answered, the caller's fault, canceled).", []string{"cluster", "result"}, nil)
	descRetries = prometheus.NewDesc("ringxds_clientlib_retries_total",
		"Retries on a different endpoint.", []string{"cluster"}, nil)
	descSheds = prometheus.NewDesc("ringxds_clientlib_shed_total",
		"Calls refused with an OverloadError: in-flight cap reached and wait queue full.", []string{"cluster"}, nil)
	descFreezes = prometheus.NewDesc("ringxds_clientlib_freezes_total",
		"Times an endpoint was found frozen: requests outstanding, none completing.", []string{"cluster"}, nil)
	descEjections = prometheus.NewDesc("ringxds_clientlib_ejections_total",
		"Times an endpoint was taken out of picks after consecutive failed calls.", []string{"cluster"}, nil)
	descRetriesDenied = prometheus.NewDesc("ringxds_clientlib_retries_denied_total",
		"Retries the retry budget refused.", []string{"cluster"}, nil)
	descStale = prometheus.NewDesc("ringxds_clientlib_cluster_stale",
		"1 while the management server no longer publishes the cluster and its last ring is in use.", []string{"cluster"}, nil)
	descWalk = prometheus.NewDesc("ringxds_clientlib_walk_distance",
		"Bounded-load walk distance of each Do: 0 is the key's owner, n the n-th next endpoint in ring order.", []string{"cluster"}, nil)
	descInFlight = prometheus.NewDesc("ringxds_clientlib_in_flight",
		"Calls in flight through Do.", []string{"cluster"}, nil)
	descQueued = prometheus.NewDesc("ringxds_clientlib_queued",
		"Calls waiting for a slot under the in-flight cap.", []string{"cluster"}, nil)
	descEndpoints = prometheus.NewDesc("ringxds_clientlib_endpoints",
		"Endpoints on the cluster's ring, by state (frozen, ejected, fading, all).", []string{"cluster", "state"}, nil)
	descConnected = prometheus.NewDesc("ringxds_clientlib_xds_connected",
		"1 while the ADS stream to the management server is up.", nil, nil)
	descResponses = prometheus.NewDesc("ringxds_clientlib_xds_responses_total",
		"xDS responses handled, by type and outcome (ack or nack).", []string{"type", "outcome"}, nil)
	descReconnects = prometheus.NewDesc("ringxds_clientlib_xds_stream_losses_total",
		"Times an established ADS stream was lost.", nil, nil)
	descOverBudget = prometheus.NewDesc("ringxds_clientlib_xds_over_budget_total",
		"Resources NACKed because their rings would exceed a budget (fade_events, cluster_ring_entries, ring_entries); the cluster kept its last good ring.", []string{"budget"}, nil)
	descUnsolicited = prometheus.NewDesc("ringxds_clientlib_xds_unsolicited_total",
		"What the server sent unasked, dropped without being stored: responses of a type never subscribed to (type), resources not subscribed to (resource).", []string{"what"}, nil)
)

func (*collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCalls, descRetries, descSheds, descFreezes, descEjections, descRetriesDenied, descStale,
		descWalk, descInFlight, descQueued, descEndpoints, descConnected, descResponses, descReconnects, descOverBudget, descUnsolicited} {
		ch <- d
	}
}

func (col *collector) Collect(ch chan<- prometheus.Metric) {
	c := col.c
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	connected := 0.0
	if c.connected.Load() {
		connected = 1
	}
	gauge(descConnected, connected)
	counter(descReconnects, c.reconnects.Load())
	for i, name := range budgetNames {
		counter(descOverBudget, c.overBudgets[i].Load(), name)
	}
	counter(descUnsolicited, c.ads.Ignored(), "type")
	counter(descUnsolicited, c.unsolicited.Load(), "resource")
	for ti, t := range []string{"cds", "eds"} {
		counter(descResponses, c.acks[ti].Load(), t, "ack")
		counter(descResponses, c.nacks[ti].Load(), t, "nack")
	}

	c.mu.Lock()
	bals := make([]*balancer, 0, len(c.balancers))
	for _, b := range c.balancers {
		bals = append(bals, b)
	}
	c.mu.Unlock()
	for _, b := range bals {
		name := b.cluster
		st := b.Stats()
		counter(descCalls, st.Calls-st.Failures, name, "ok")
		counter(descCalls, st.Failures, name, "error")
		counter(descRetries, st.Retries, name)
		counter(descSheds, st.Sheds, name)
		counter(descFreezes, st.Freezes, name)
		counter(descEjections, st.Ejections, name)
		counter(descRetriesDenied, st.RetriesDenied, name)
		stale := 0.0
		if !st.StaleSince.IsZero() {
			stale = 1
		}
		gauge(descStale, stale, name)
		buckets := make(map[float64]uint64, MaxWalk)
		var total, sum uint64
		for h, n := range st.WalkDistance {
			total += n
			sum += uint64(h) * n
			buckets[float64(h)] = total
		}
		ch <- prometheus.MustNewConstHistogram(descWalk, total, float64(sum), buckets, name)
		gauge(descInFlight, float64(st.InFlight), name)
		gauge(descQueued, float64(st.Queued), name)
		gauge(descEndpoints, float64(st.Endpoints), name, "all")
		gauge(descEndpoints, float64(st.Frozen), name, "frozen")
		gauge(descEndpoints, float64(st.Ejected), name, "ejected")
		gauge(descEndpoints, float64(st.Fading), name, "fading")
	}
}
