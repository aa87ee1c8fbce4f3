package clientlib

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Errors returned by the client and its balancers. Match them with errors.Is.
var (
	// ErrClosed is returned after Client.Close.
	ErrClosed = errors.New("clientlib: client closed")
	// ErrNotReady is wrapped when a balancer has no ring yet: the
	// management server has not delivered the cluster and its endpoints
	// before the context ended.
	ErrNotReady = errors.New("clientlib: cluster not ready")
	// ErrNoTransportSecurity is returned by Dial when neither WithTLS nor
	// WithInsecure was given: the choice is the caller's to make.
	ErrNoTransportSecurity = errors.New("clientlib: no transport security configured (use WithTLS or WithInsecure)")
	// ErrUnknownCluster is wrapped in ErrNotReady when the management
	// server answered without the cluster, or, reachable, sent nothing for
	// it for a second or more before the wait ended (a server sends nothing
	// for a name it lacks): a misspelled name, or one it does not publish.
	ErrUnknownCluster = errors.New("the management server does not publish this cluster")
	// ErrRejected is wrapped in ErrNotReady when the cluster or its
	// endpoints arrived but could not be used (the client NACKed them); the
	// error says why.
	ErrRejected = errors.New("rejected")
	// ErrOverBudget is wrapped in ErrRejected when the cluster or its
	// endpoints were NACKed because their rings would exceed a budget
	// (WithFadeBudget, WithRingBudget).
	ErrOverBudget = errors.New("over budget")
	// ErrNoServer is wrapped in ErrNotReady while no stream to the
	// management server works: it cannot be reached, or it fails the
	// stream (not an xDS server, refused credentials). The error carries
	// the last stream error.
	ErrNoServer = errors.New("no working stream to the management server")
	// ErrNoEndpoints is returned by Pick and Do for a cluster published
	// with no endpoint.
	ErrNoEndpoints = errors.New("clientlib: cluster has no endpoints")
	// ErrBalancerOptions is returned by Client.Balancer when options are
	// given for a cluster whose balancer already exists: options apply
	// when the balancer is created.
	ErrBalancerOptions = errors.New("clientlib: balancer options apply when the balancer is created; this cluster's balancer exists")
)

// OverloadError is returned when a balancer sheds a call: its in-flight cap
// is reached and its wait queue is full. Map it to 503 with a Retry-After
// header (see WriteOverload).
type OverloadError struct {
	Cluster string
	// InFlight and Queued are the balancer's counts when the call was shed.
	InFlight, Queued int
	// RetryAfter estimates when capacity frees up: the queue's length in
	// units of the cap, times the cluster's mean latency.
	RetryAfter time.Duration
}

func (e *OverloadError) Error() string {
	return fmt.Sprintf("clientlib: cluster %q overloaded: %d in flight, %d queued, retry after %v",
		e.Cluster, e.InFlight, e.Queued, e.RetryAfter)
}

// WriteOverload writes 503 Service Unavailable with a Retry-After header
// (whole seconds, rounded up) if err is or wraps an *OverloadError, and
// reports whether it did. Servers fanning out through a Balancer call it
// first in their error path.
func WriteOverload(w http.ResponseWriter, err error) bool {
	var oe *OverloadError
	if !errors.As(err, &oe) {
		return false
	}
	secs := int(math.Ceil(oe.RetryAfter.Seconds()))
	w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	http.Error(w, oe.Error(), http.StatusServiceUnavailable)
	return true
}

// The budgets a response can exceed, as counted by the over-budget metric.
const (
	budgetFadeEvents = iota
	budgetClusterEntries
	budgetEntries
	numBudgets
)

var budgetNames = [numBudgets]string{"fade_events", "cluster_ring_entries", "ring_entries"}

// budgetError is a rejection for exceeding a budget; it wraps ErrOverBudget.
type budgetError struct {
	budget int
	msg    string
}

func (e *budgetError) Error() string { return e.msg }
func (e *budgetError) Unwrap() error { return ErrOverBudget }
