package loadgen

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Lifecycle starts and stops the server under test, for runs that own it
// (the spawned binary, or an in-process server in tests). Without one the
// run measures a server that already watches Config.File.
type Lifecycle interface {
	// Start starts the server on the file and returns its xDS and debug
	// addresses once it serves. A second Start after Stop reuses them, so
	// clients reconnect to the same address, as after a pod restart
	// behind a Service.
	Start(ctx context.Context) (xdsAddr, debugAddr string, err error)
	// Stop stops the server and waits for it to exit.
	Stop(ctx context.Context) error
}

// Config describes one run.
type Config struct {
	// Server is the xDS address; Debug the debug address serving /metrics
	// and /debug/clients (optional: without it no server-side figures).
	// Both are ignored when Lifecycle is set.
	Server, Debug string
	// File is the endpoints file the server watches. The run overwrites it.
	File string
	// Lifecycle, if set, owns the server (required for Storm).
	Lifecycle Lifecycle
	// Replicas, set instead of Lifecycle, are several servers on File, as
	// a Deployment runs them: the run starts every one and spreads the
	// clients round-robin over them, to show that clients on different
	// replicas receive identical versions for identical content and see
	// the same propagation. Server figures are summed over the replicas;
	// profiles come from the first one.
	Replicas []Lifecycle

	// Clients, Clusters and Endpoints size the run; Endpoints is the total
	// across all clusters.
	Clients, Clusters, Endpoints int
	// Changes is the number of endpoint changes whose propagation is
	// measured, one file write each.
	Changes int
	// ChangeInterval separates the writes.
	ChangeInterval time.Duration
	// GRPCFraction of the clients are gRPC-like; DeltaFraction of the
	// Envoy-like rest use delta xDS.
	GRPCFraction, DeltaFraction float64
	// GRPCClusters is how many clusters each gRPC-like client dials.
	GRPCClusters int
	// Conns is the number of gRPC connections the clients share; 0 gives
	// every client its own, as separate proxies have.
	Conns int
	// Timeout bounds every wait: connecting, converging, resyncing.
	Timeout time.Duration
	// Seed makes the client mix and the changes reproducible.
	Seed uint64
	// ReconnectJitter bounds the random delay before a client reopens a
	// failed stream.
	ReconnectJitter time.Duration

	// SlowConsumers extra Envoy-like clients stop reading their socket
	// after the main phase; the changes are then repeated to see whether
	// they slow the others down. SlowWait bounds the wait for the server
	// to disconnect them.
	SlowConsumers int
	SlowWait      time.Duration

	// Storm restarts the server after the main phase (with one change
	// written while it is down) and measures how fast every client resyncs.
	Storm bool

	// CPUProfile, if set, saves a server CPU profile taken over the change
	// phase (needs /debug/pprof on the debug address).
	CPUProfile string
	// ToolCPUProfile, if set, saves this process's CPU profile over the
	// same phase: the simulator shares the machine with the server, and a
	// row it bounds must show where its time went.
	ToolCPUProfile string
	// Settle is how long the memory figures wait after forcing the
	// server's garbage collections, for the runtime to return freed pages
	// to the kernel (its scavenger works in the background). Zero: 5 s.
	Settle time.Duration
	// HeapProfile, if set, saves the server's heap profile once every
	// client has converged, after forced collections.
	HeapProfile string
	// GoroutineProfile, if set, saves the server's goroutine profile at
	// the same moment as HeapProfile: what each client costs in stacks is
	// read from which goroutines it adds.
	GoroutineProfile string

	// Logger receives progress; nil discards it.
	Logger *zap.Logger

	// OnConverged, if set, is called once every client holds the initial
	// content, before the change phase: an in-process run takes its heap
	// profile there, when the server holds every client at rest.
	OnConverged func()
}

func (c *Config) defaults() error {
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.ChangeInterval <= 0 {
		c.ChangeInterval = 500 * time.Millisecond
	}
	if c.Timeout <= 0 {
		c.Timeout = 60 * time.Second
	}
	if c.GRPCClusters <= 0 {
		c.GRPCClusters = 1
	}
	if c.Settle <= 0 {
		c.Settle = 5 * time.Second
	}
	if c.SlowWait <= 0 {
		c.SlowWait = 60 * time.Second
	}
	if c.ReconnectJitter < 0 {
		return fmt.Errorf("reconnect jitter %v is negative", c.ReconnectJitter)
	}
	switch {
	case c.File == "":
		return errors.New("the endpoints file path is empty")
	case c.Lifecycle == nil && len(c.Replicas) == 0 && c.Server == "":
		return errors.New("no server: give its xDS address, or let the run start one")
	case c.Clients < 1:
		return fmt.Errorf("clients=%d: need at least one", c.Clients)
	case c.Changes < 0 || c.SlowConsumers < 0 || c.Conns < 0:
		return errors.New("changes, slow consumers and connections must not be negative")
	case c.GRPCFraction < 0 || c.GRPCFraction > 1 || c.DeltaFraction < 0 || c.DeltaFraction > 1:
		return errors.New("fractions must be within [0, 1]")
	case c.Storm && c.Lifecycle == nil && len(c.Replicas) == 0:
		return errors.New("the reconnect storm restarts the server: start it from the run (--spawn-server)")
	case c.GRPCClusters > c.Clusters:
		return fmt.Errorf("gRPC clients dial %d clusters but there are %d", c.GRPCClusters, c.Clusters)
	}
	return c.checkReplicas()
}

// maxReplicas bounds Replicas: the version comparison keeps one bit per
// replica.
const maxReplicas = 64

func (c *Config) checkReplicas() error {
	n := len(c.Replicas)
	switch {
	case n == 0:
		return nil
	case c.Lifecycle != nil:
		return errors.New("give either one Lifecycle or Replicas, not both")
	case n > maxReplicas:
		return fmt.Errorf("%d replicas: at most %d", n, maxReplicas)
	case c.Clients < n:
		return fmt.Errorf("%d clients cannot be spread over %d replicas", c.Clients, n)
	case c.Conns > 0 && c.Conns < n:
		return fmt.Errorf("%d shared connections cannot reach %d replicas", c.Conns, n)
	case n > 1 && c.SlowConsumers > 0:
		return errors.New("slow consumers are measured against one server: run them without replicas")
	}
	return nil
}

// lifecycles returns the servers the run owns: the replicas, the one
// Lifecycle, or none.
func (c *Config) lifecycles() []Lifecycle {
	if len(c.Replicas) > 0 {
		return c.Replicas
	}
	if c.Lifecycle != nil {
		return []Lifecycle{c.Lifecycle}
	}
	return nil
}
