package loadgen

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"go.uber.org/zap"
)

// slowPhase stops the slow consumers reading, repeats the changes and
// compares the other clients' p99 with baseline. It then waits for the
// server to disconnect the slow consumers, sampling its memory meanwhile.
func (r *runner) slowPhase(ctx context.Context, baseline float64) (*SlowResult, error) {
	res := &SlowResult{Consumers: len(r.slow), BaselineP99: baseline, MaxRSSMB: -1, DisconnectSeconds: -1, P99ChangePct: math.NaN()}
	for _, g := range r.gates {
		g.stop()
	}
	stopped := time.Now()
	r.log.Info("slow consumers stopped reading", zap.Int("slow", len(r.slow)))

	sampleCtx, stopSampling := context.WithCancel(ctx)
	rssDone := make(chan float64, 1)
	go func() { rssDone <- r.maxRSS(sampleCtx) }()

	phase, err := r.changes(ctx, r.cfg.Changes)
	if err != nil {
		stopSampling()
		return nil, err
	}
	convErr := r.waitConverged(ctx, r.clients, "the other clients to receive every change with slow consumers present")
	lat := r.latencies(phase, r.clients)
	res.SlowP99 = percentile(lat, 99)
	if baseline > 0 && res.SlowP99 >= 0 {
		res.P99ChangePct = (res.SlowP99 - baseline) / baseline * 100
	}

	// The server gives up on a client that does not read only through its
	// transport keepalive (no ping ACK) or the maximum connection age.
	if r.dbg != nil {
		deadline := stopped.Add(r.cfg.SlowWait)
		for time.Now().Before(deadline) {
			n, err := r.dbg.connectedNodes(ctx, "loadgen-slow-")
			if err == nil && n == 0 {
				res.Disconnected = len(r.slow)
				res.DisconnectSeconds = time.Since(stopped).Seconds()
				break
			}
			if err == nil {
				res.Disconnected = len(r.slow) - n
			}
			select {
			case <-ctx.Done():
				stopSampling()
				return nil, ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
	stopSampling()
	res.MaxRSSMB = <-rssDone
	r.log.Info("slow consumer phase done", zap.Float64("baseline_p99_ms", baseline), zap.Float64("p99_ms", res.SlowP99),
		zap.Int("disconnected", res.Disconnected), zap.Float64("max_rss_mb", res.MaxRSSMB))
	if convErr != nil {
		r.log.Error("clients did not converge with slow consumers present", zap.Error(convErr))
	}
	return res, nil
}

// maxRSS samples the server's RSS every second until ctx ends.
func (r *runner) maxRSS(ctx context.Context) float64 {
	best := -1.0
	if r.dbg == nil {
		return best
	}
	for {
		if m, err := r.dbg.metrics(ctx); err == nil {
			best = max(best, m.sum("process_resident_memory_bytes")/(1<<20))
		}
		select {
		case <-ctx.Done():
			return best
		case <-time.After(time.Second):
		}
	}
}

// storm restarts the server with one change written while it is down, so
// every client must move forward on reconnect, and measures how long each
// takes to hold the file's final content again.
func (r *runner) storm(ctx context.Context) (*StormResult, error) {
	lcs := r.cfg.lifecycles()
	r.log.Info("reconnect storm: stopping the servers", zap.Int("servers", len(lcs)), zap.Int("clients", len(r.clients)))
	for _, lc := range lcs {
		if err := lc.Stop(ctx); err != nil {
			return nil, fmt.Errorf("loadgen: stop server: %w", err)
		}
	}
	if _, err := r.changes(ctx, 1); err != nil {
		return nil, err
	}
	restart := time.Now()
	for _, lc := range lcs {
		if _, _, err := lc.Start(ctx); err != nil {
			return nil, fmt.Errorf("loadgen: restart server: %w", err)
		}
	}
	r.log.Info("reconnect storm: server restarted", zap.Duration("start_took", time.Since(restart)))
	target := r.sh.topo.latest()
	// A client has resynced when it holds the final content and has
	// received EDS from the new server. Every client gets some: the change
	// written during the downtime touches a cluster every Envoy-like client
	// watches, and SotW clients are sent their clusters afresh on a new
	// stream. (A stream's opening is no evidence: gRPC transparently
	// retries a stream created on a dying connection, so it may have
	// "opened" before the restart.)
	resynced := func(c *client) (time.Time, bool) {
		if !c.converged(target) {
			return time.Time{}, false
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.lastEDSAt, c.lastEDSAt.After(restart)
	}
	if err := r.waitFor(ctx, r.clients, "every client to resync after the restart", func(c *client) bool {
		_, ok := resynced(c)
		return ok
	}); err != nil {
		r.log.Error("storm", zap.Error(err))
		for _, c := range r.clients {
			if _, ok := resynced(c); !ok {
				c.mu.Lock()
				r.log.Warn("client did not resync", zap.String("node", c.node.GetId()), zap.Bool("converged", c.convergedLocked(target)),
					zap.Int("streams", c.streams), zap.Time("live_at", c.liveAt), zap.Time("last_eds_at", c.lastEDSAt))
				c.mu.Unlock()
			}
		}
	}
	res := &StormResult{ResyncP50: -1, ResyncP99: -1, ResyncMax: -1}
	var took []float64
	for _, c := range r.clients {
		if at, ok := resynced(c); ok {
			res.Resynced++
			took = append(took, float64(at.Sub(restart))/float64(time.Millisecond))
		}
	}
	slices.Sort(took)
	res.ResyncP50, res.ResyncP99, res.ResyncMax = percentile(took, 50), percentile(took, 99), percentile(took, 100)
	return res, nil
}
