package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// Result is what a run measured. Durations are in milliseconds; a negative
// server figure means the debug address was not available.
type Result struct {
	Clients, Clusters, Endpoints, Changes int
	Converged                             int
	P50, P99, Max                         float64
	Samples                               int
	ServerRSSMB                           float64
	RSSPerClientKB, HeapPerClientKB       float64
	StackPerClientKB                      float64
	// HeapIsLive is set when the heap figures were taken after forced
	// collections (the server has /debug/pprof), so they exclude garbage.
	HeapIsLive                          bool
	BytesPerChange                      float64
	SotWBytesPerPush, DeltaBytesPerPush float64
	Stale, Unknown                      int
	// Withdrawn counts resources the server told clients to drop although
	// the file still held them (see client.withdrawn).
	Withdrawn int
	// RateRefused counts streams the server refused over its new
	// connection rate, which clients retry: expected in a reconnect storm.
	RateRefused int
	// ChangeToPushMS is the server's mean time from the first file event
	// to its caches holding the change (ringxds_change_to_push_seconds:
	// debounce, reparse, build, diff and the caches' fan-out to watches);
	// the rest of the propagation time is delivery. BuildMS and PushMS
	// are the mean snapshot build and build+diff+cache update.
	ChangeToPushMS, BuildMS, PushMS float64
	// ServerCPUSeconds and ToolCPUSeconds are the CPU time the server and
	// this tool used during the change phase (the machine is shared).
	ServerCPUSeconds, ToolCPUSeconds float64
	// Responses counts the xDS responses the server sent in the change
	// phase; ServerCPUPerResponseUS is ServerCPUSeconds over it, a figure
	// of the server's work that the machine's load does not change.
	// SourceCPUSeconds is the part the source spent reading its input
	// (ringxds_source_cpu_seconds_total, measured on the source's own
	// thread), and SourceShare that part of ServerCPUSeconds.
	Responses              int
	ServerCPUPerResponseUS float64
	SourceCPUSeconds       float64
	SourceShare            float64
	// Unchanged counts EDS resources a client received, within one stream,
	// with the content it already held: work and bytes spent on a client
	// the change did not concern.
	Unchanged      int
	Errors         []string
	ConnectSeconds float64
	Load           float64

	// ToolMaxRSSMB is the peak resident memory of this process: the
	// simulated clients' share of the machine's memory.
	ToolMaxRSSMB float64

	Slow *SlowResult
	// Storm is set for a reconnect storm.
	Storm *StormResult

	// Replicas is set when the clients were spread over several servers.
	Replicas []ReplicaResult
	// VersionsCompared counts contents that clients on more than one
	// replica received, so that their versions were compared;
	// VersionMismatches those sent with different versions, and
	// VersionExamples the first few of them.
	VersionsCompared, VersionMismatches int
	VersionExamples                     []string
}

// SlowResult is the slow-consumer phase.
type SlowResult struct {
	Consumers            int
	BaselineP99, SlowP99 float64
	// P99ChangePct is how much the other clients' p99 moved.
	P99ChangePct float64
	MaxRSSMB     float64
	// Disconnected is how many slow consumers the server closed within
	// SlowWait, and DisconnectSeconds when the last one went.
	Disconnected      int
	DisconnectSeconds float64
}

// StormResult is the reconnect storm after a server restart.
type StormResult struct {
	Resynced             int
	ResyncP50, ResyncP99 float64
	ResyncMax            float64
}

// OK reports whether every client converged and none ever saw stale or
// unknown content, or was told to drop what the file still held, and
// whether replicas agreed on every version.
func (r *Result) OK() bool {
	ok := r.Converged == r.Clients && r.Stale == 0 && r.Unknown == 0 && r.Withdrawn == 0 && len(r.Errors) == 0 && r.VersionMismatches == 0
	if r.Storm != nil {
		ok = ok && r.Storm.Resynced == r.Clients
	}
	return ok
}

// Line is the one-line summary the command ends with.
func (r *Result) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "clients=%d clusters=%d endpoints=%d changes=%d converged=%d/%d propagation_p50_ms=%s propagation_p99_ms=%s propagation_max_ms=%s server_rss_mb=%s bytes_per_change=%s",
		r.Clients, r.Clusters, r.Endpoints, r.Changes, r.Converged, r.Clients,
		num(r.P50, 1), num(r.P99, 1), num(r.Max, 1), num(r.ServerRSSMB, 1), num(r.BytesPerChange, 0))
	heap := "heap_per_client_kb"
	if r.HeapIsLive {
		heap = "live_heap_per_client_kb"
	}
	fmt.Fprintf(&b, " rss_per_client_kb=%s %s=%s stack_per_client_kb=%s sotw_eds_bytes_per_push=%s delta_eds_bytes_per_push=%s stale=%d unknown=%d withdrawn=%d unchanged_resources=%d server_change_to_push_ms=%s server_build_ms=%s server_push_ms=%s server_cpu_s=%s loadgen_cpu_s=%s errors=%d rate_refused=%d connect_s=%s load1=%s",
		num(r.RSSPerClientKB, 1), heap, num(r.HeapPerClientKB, 1), num(r.StackPerClientKB, 1), num(r.SotWBytesPerPush, 0), num(r.DeltaBytesPerPush, 0),
		r.Stale, r.Unknown, r.Withdrawn, r.Unchanged, num(r.ChangeToPushMS, 1), num(r.BuildMS, 1), num(r.PushMS, 1), num(r.ServerCPUSeconds, 1), num(r.ToolCPUSeconds, 1), len(r.Errors), r.RateRefused, num(r.ConnectSeconds, 1), num(r.Load, 2))
	fmt.Fprintf(&b, " responses=%d server_cpu_us_per_response=%s source_cpu_s=%s source_share=%s server_cpu_us_per_response_without_source=%s loadgen_cpu_us_per_response=%s loadgen_max_rss_mb=%s",
		r.Responses, num(r.ServerCPUPerResponseUS, 1), num(r.SourceCPUSeconds, 2), num(r.SourceShare, 2), num(r.cpuPerResponseWithoutSource(), 1),
		num(r.toolCPUPerResponse(), 1), num(r.ToolMaxRSSMB, 0))
	if s := r.Slow; s != nil {
		fmt.Fprintf(&b, " slow_consumers=%d baseline_p99_ms=%s slow_p99_ms=%s slow_p99_change_pct=%s slow_max_rss_mb=%s slow_disconnected=%d/%d slow_disconnect_s=%s",
			s.Consumers, num(s.BaselineP99, 1), num(s.SlowP99, 1), signed(s.P99ChangePct, 1), num(s.MaxRSSMB, 1),
			s.Disconnected, s.Consumers, num(s.DisconnectSeconds, 1))
	}
	if s := r.Storm; s != nil {
		fmt.Fprintf(&b, " storm_resynced=%d/%d storm_resync_p50_ms=%s storm_resync_p99_ms=%s storm_resync_max_ms=%s",
			s.Resynced, r.Clients, num(s.ResyncP50, 1), num(s.ResyncP99, 1), num(s.ResyncMax, 1))
	}
	b.WriteString(r.replicaLine())
	return b.String()
}

// cpuPerResponseWithoutSource is the server's CPU per response once the
// source's reading of its input is taken out: the fan-out's own cost.
func (r *Result) cpuPerResponseWithoutSource() float64 {
	if r.Responses <= 0 || r.SourceShare < 0 {
		return -1
	}
	return (r.ServerCPUSeconds - r.SourceCPUSeconds) * 1e6 / float64(r.Responses)
}

// toolCPUPerResponse is this tool's CPU per response its clients received
// in the change phase: beside the server's figure, it tells whether the
// simulator or the server used more of the shared machine.
func (r *Result) toolCPUPerResponse() float64 {
	if r.Responses <= 0 || r.ToolCPUSeconds < 0 {
		return -1
	}
	return r.ToolCPUSeconds * 1e6 / float64(r.Responses)
}

// meanMS is the mean of a histogram in seconds between two scrapes, in
// milliseconds; -1 without observations.
func meanMS(before, after promText, name string) float64 {
	n := after.sum(name+"_count") - before.sum(name+"_count")
	if n <= 0 {
		return -1
	}
	return (after.sum(name+"_sum") - before.sum(name+"_sum")) / n * 1000
}

// signed formats a figure that may be negative, or NA for NaN.
func signed(v float64, prec int) string {
	if math.IsNaN(v) {
		return "NA"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

// num formats a figure, or NA for one that was not measured.
func num(v float64, prec int) string {
	if v < 0 || math.IsNaN(v) {
		return "NA"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

type runner struct {
	cfg Config
	log *zap.Logger
	sh  *shared
	rng *rand.Rand
	// replicas are the servers, one unless Config.Replicas has several;
	// dbg is the first one's debug client (nil without one), which takes
	// the profiles and watches the slow consumers.
	replicas []*replica
	dbg      *debugClient

	clients []*client // measured clients
	slow    []*client
	gates   []*gate
	conns   []*grpc.ClientConn
}

// Run executes the configured scenario. It returns an error only when the
// run could not be carried out; a run whose clients failed to converge
// returns a Result whose OK is false.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	topo, err := newTopology(cfg.File, cfg.Clusters, cfg.Endpoints)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	r := &runner{
		cfg: cfg, log: cfg.Logger,
		sh:  &shared{topo: topo, decoder: newDecoder(), reconnectJitter: cfg.ReconnectJitter, log: cfg.Logger},
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x6c6f6164)),
	}
	if err := topo.write(topo.render()); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	if len(cfg.lifecycles()) > 1 {
		r.sh.book = newVersionBook()
	}
	if err := r.startReplicas(ctx); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	r.dbg = r.replicas[0].dbg

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		for _, g := range r.gates {
			g.release()
		}
		for _, cc := range r.conns {
			_ = cc.Close()
		}
		wg.Wait()
	}()
	return r.run(ctx, &wg)
}

func (r *runner) run(ctx context.Context, wg *sync.WaitGroup) (*Result, error) {
	cfg := r.cfg
	res := &Result{Clients: cfg.Clients, Clusters: cfg.Clusters, Endpoints: cfg.Endpoints, Changes: cfg.Changes,
		ServerRSSMB: -1, RSSPerClientKB: -1, HeapPerClientKB: -1, StackPerClientKB: -1, BytesPerChange: -1, P50: -1, P99: -1, Max: -1,
		SotWBytesPerPush: -1, DeltaBytesPerPush: -1, ChangeToPushMS: -1, BuildMS: -1, PushMS: -1, ServerCPUSeconds: -1, ToolCPUSeconds: -1}
	defer func() { res.ToolMaxRSSMB = selfMaxRSSMB() }()
	// The idle figure is taken with the file loaded and no client: what
	// each client adds is measured against it.
	idle, idleLive, _ := r.settledMetrics(ctx)

	if err := r.makeClients(); err != nil {
		return nil, err
	}
	start := time.Now()
	r.startClients(ctx, wg)
	all := append(slices.Clone(r.clients), r.slow...)
	if err := r.waitConverged(ctx, all, "clients to connect and receive every cluster"); err != nil {
		r.collect(res, nil)
		return res, nil
	}
	res.ConnectSeconds = time.Since(start).Seconds()
	r.log.Info("clients connected and converged", zap.Int("clients", len(all)), zap.Duration("took", time.Since(start)))
	r.memoryFigures(ctx, res, idle, idleLive, len(all))

	if cfg.HeapProfile != "" && r.dbg != nil {
		// Taken right after the forced collections above: live memory
		// with every client connected and at rest.
		if err := r.dbg.saveProfile(ctx, "/debug/pprof/heap", cfg.HeapProfile, 30*time.Second); err != nil {
			r.log.Warn("no server heap profile", zap.Error(err))
		}
	}
	if cfg.GoroutineProfile != "" && r.dbg != nil {
		if err := r.dbg.saveProfile(ctx, "/debug/pprof/goroutine", cfg.GoroutineProfile, 30*time.Second); err != nil {
			r.log.Warn("no server goroutine profile", zap.Error(err))
		}
	}
	if cfg.OnConverged != nil {
		cfg.OnConverged()
	}

	convErr, err := r.measure(ctx, res)
	if err != nil {
		return nil, err
	}
	if convErr != nil {
		r.collect(res, all)
		return res, nil
	}
	if cfg.SlowConsumers > 0 {
		s, err := r.slowPhase(ctx, res.P99)
		if err != nil {
			return nil, err
		}
		res.Slow = s
	}
	if cfg.Storm {
		s, err := r.storm(ctx)
		if err != nil {
			return nil, err
		}
		res.Storm = s
	}
	r.collect(res, r.clients)
	return res, nil
}

// memoryFigures fills in the server's memory per client, n clients over
// the idle figures, summed over the replicas.
func (r *runner) memoryFigures(ctx context.Context, res *Result, idle promText, idleLive bool, n int) {
	loaded, live, err := r.settledMetrics(ctx)
	if err != nil || idle == nil {
		return
	}
	res.HeapIsLive = live && idleLive
	per := func(metric string) float64 { return (loaded.sum(metric) - idle.sum(metric)) / float64(n) / 1024 }
	rss := loaded.sum("process_resident_memory_bytes")
	res.ServerRSSMB = rss / (1 << 20)
	res.RSSPerClientKB = per("process_resident_memory_bytes")
	res.HeapPerClientKB = per("go_memstats_heap_inuse_bytes")
	res.StackPerClientKB = per("go_memstats_stack_inuse_bytes")
	r.log.Info("server memory", zap.Float64("idle_rss_mb", idle.sum("process_resident_memory_bytes")/(1<<20)),
		zap.Float64("loaded_rss_mb", res.ServerRSSMB),
		zap.Float64("goroutines_per_client", (loaded.sum("go_goroutines")-idle.sum("go_goroutines"))/float64(n)))
}

// measure makes the measured changes, waits for every client to hold them
// and fills in propagation, CPU and bytes. convErr reports clients that
// did not converge; err, a run that could not go on.
func (r *runner) measure(ctx context.Context, res *Result) (convErr, err error) {
	cfg := r.cfg
	before := r.metricsOrNil(ctx)
	bytesBefore := r.clientBytes()
	cpuBefore := selfCPU()
	var profDone chan error
	if cfg.CPUProfile != "" && r.dbg != nil {
		secs := int(math.Ceil((time.Duration(cfg.Changes)*cfg.ChangeInterval + 2*time.Second).Seconds()))
		profDone = make(chan error, 1)
		go func() {
			profDone <- r.dbg.saveProfile(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), cfg.CPUProfile, time.Duration(secs+30)*time.Second)
		}()
	}
	stopToolProfile := r.startToolProfile()
	phase, err := r.changes(ctx, cfg.Changes)
	if err != nil {
		stopToolProfile()
		return nil, err
	}
	convErr = r.waitConverged(ctx, r.clients, "every client to receive every change")
	stopToolProfile()
	if profDone != nil {
		if err := <-profDone; err != nil {
			r.log.Warn("no server CPU profile", zap.Error(err))
		} else {
			r.log.Info("server CPU profile saved", zap.String("path", cfg.CPUProfile))
		}
	}
	if cpu := selfCPU(); cpu >= 0 && cpuBefore >= 0 {
		res.ToolCPUSeconds = (cpu - cpuBefore).Seconds()
	}
	lat := r.latencies(phase, r.clients)
	res.Samples = len(lat)
	res.P50, res.P99, res.Max = percentile(lat, 50), percentile(lat, 99), percentile(lat, 100)
	res.Replicas = r.replicaResults(phase)
	if after := r.metricsOrNil(ctx); before != nil && after != nil && cfg.Changes > 0 {
		serverFigures(res, before, after)
	}
	res.SotWBytesPerPush, res.DeltaBytesPerPush = r.clientBytes().since(bytesBefore)
	return convErr, nil
}

// serverFigures fills in what the server's metrics say of the change
// phase, summed over the replicas.
func serverFigures(res *Result, before, after promText) {
	delta := func(metric string) float64 { return after.sum(metric) - before.sum(metric) }
	res.BytesPerChange = delta("ringxds_xds_bytes_sent_total") / float64(res.Changes)
	res.ServerCPUSeconds = delta("process_cpu_seconds_total")
	res.Responses = int(delta("ringxds_xds_pushes_total"))
	res.SourceCPUSeconds = delta("ringxds_source_cpu_seconds_total")
	res.ServerCPUPerResponseUS, res.SourceShare = -1, -1
	if res.Responses > 0 {
		res.ServerCPUPerResponseUS = res.ServerCPUSeconds * 1e6 / float64(res.Responses)
	}
	if res.ServerCPUSeconds > 0 {
		res.SourceShare = res.SourceCPUSeconds / res.ServerCPUSeconds
	}
	res.ChangeToPushMS = meanMS(before, after, "ringxds_change_to_push_seconds")
	res.BuildMS = meanMS(before, after, "ringxds_snapshot_build_seconds")
	res.PushMS = meanMS(before, after, "ringxds_xds_push_seconds")
}

// startToolProfile starts this process's CPU profile if one was asked for
// and returns what stops and saves it.
func (r *runner) startToolProfile() (stop func()) {
	path := r.cfg.ToolCPUProfile
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
		}
	}
	if err != nil {
		r.log.Warn("no loadgen CPU profile", zap.Error(err))
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			r.log.Warn("loadgen CPU profile", zap.Error(err))
			return
		}
		r.log.Info("loadgen CPU profile saved", zap.String("path", path))
	}
}

// collect fills in convergence and correctness over the measured clients,
// and checks (slow consumers aside) every client's history.
func (r *runner) collect(res *Result, _ []*client) {
	target := r.sh.topo.latest()
	res.Load = loadAverage()
	res.RateRefused = int(r.sh.rateRefused.Load())
	if r.sh.book != nil {
		res.VersionsCompared, res.VersionMismatches, res.VersionExamples = r.sh.book.result()
	}
	for _, c := range r.clients {
		if c.converged(target) {
			res.Converged++
		}
	}
	unchangedByKind := map[string]int{}
	defer func() {
		if res.Unchanged > 0 {
			r.log.Info("EDS resources re-sent unchanged within a stream, by client kind", zap.Any("counts", unchangedByKind))
		}
	}()
	for _, c := range append(slices.Clone(r.clients), r.slow...) {
		c.mu.Lock()
		res.Stale += c.stale
		res.Unknown += c.unknown
		res.Unchanged += c.redundant
		res.Withdrawn += c.withdrawn
		unchangedByKind[c.kind.String()] += c.redundant
		for _, err := range c.errs {
			if len(res.Errors) < 20 {
				res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", c.node.GetId(), err))
			}
		}
		c.mu.Unlock()
	}
}

// metricsOrNil scrapes every replica; the samples of all of them are
// concatenated, so that sums cover the whole deployment. It returns nil
// if any replica cannot be read.
func (r *runner) metricsOrNil(ctx context.Context) promText {
	dbgs := r.debugs()
	if len(dbgs) == 0 {
		return nil
	}
	var all promText
	for _, d := range dbgs {
		m, err := d.metrics(ctx)
		if err != nil {
			r.log.Warn("cannot scrape server metrics", zap.String("debug", d.addr), zap.Error(err))
			return nil
		}
		all = append(all, m...)
	}
	return all
}

// settledMetrics scrapes after a pause, so the figures are not caught in
// the middle of a burst of allocation. Where the server has pprof it forces
// collections and, once the runtime has had Settle to return the freed
// pages to the kernel, scrapes: live then reports that the heap figures
// count live memory only. RSS is what the kernel sees either way.
func (r *runner) settledMetrics(ctx context.Context) (m promText, live bool, err error) {
	if len(r.debugs()) == 0 {
		return nil, false, errors.New("no debug address")
	}
	pause := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	if err := pause(2 * time.Second); err != nil {
		return nil, false, err
	}
	live = true
	for _, d := range r.debugs() {
		live = d.collectGarbage(ctx) && live
	}
	if live {
		if err := pause(r.cfg.Settle); err != nil {
			return nil, false, err
		}
	}
	m = r.metricsOrNil(ctx)
	if m == nil || !m.has("process_resident_memory_bytes") {
		return nil, false, errors.New("the server exposes no process_resident_memory_bytes")
	}
	return m, live, nil
}

// makeClients builds the mix: gRPC-like clients first in a shuffled order,
// each dialing GRPCClusters clusters spread over all of them.
func (r *runner) makeClients() error {
	cfg := r.cfg
	nGRPC := int(math.Round(float64(cfg.Clients) * cfg.GRPCFraction))
	nDelta := int(math.Round(float64(cfg.Clients-nGRPC) * cfg.DeltaFraction))
	kinds := make([]clientKind, cfg.Clients)
	for i := range kinds {
		switch {
		case i < nGRPC:
			kinds[i] = grpcSotW
		case i < nGRPC+nDelta:
			kinds[i] = envoyDelta
		default:
			kinds[i] = envoySotW
		}
	}
	r.rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	names := r.sh.topo.names()

	// Connections, and with them clients, go round-robin over the
	// replicas, as a Service spreads them.
	var shared []*grpc.ClientConn
	for j := range cfg.Conns {
		cc, err := r.dial(j%len(r.replicas), nil, grpcSotW)
		if err != nil {
			return err
		}
		shared = append(shared, cc)
	}
	g := 0
	for i, k := range kinds {
		var conn *grpc.ClientConn
		rep := i % len(r.replicas)
		if len(shared) > 0 {
			conn, rep = shared[i%len(shared)], i%len(shared)%len(r.replicas)
		} else {
			cc, err := r.dial(rep, nil, k)
			if err != nil {
				return err
			}
			conn = cc
		}
		var dialed []string
		if k == grpcSotW {
			// Spread the gRPC clients' clusters evenly, several per client
			// consecutive, so every cluster has proxyless subscribers.
			for j := range cfg.GRPCClusters {
				dialed = append(dialed, names[(g*cfg.GRPCClusters+j)%len(names)])
			}
			slices.Sort(dialed)
			dialed = slices.Compact(dialed)
			g++
		}
		c := newClient(i, k, conn, nil, r.sh, dialed, cfg.Seed)
		c.replica = rep
		r.clients = append(r.clients, c)
	}
	for i := range cfg.SlowConsumers {
		gt := newGate()
		cc, err := r.dial(0, gt, envoySotW)
		if err != nil {
			return err
		}
		r.gates = append(r.gates, gt)
		r.slow = append(r.slow, newClient(i, envoySotW, cc, gt, r.sh, nil, cfg.Seed))
	}
	return nil
}

// dial opens a client connection. Reconnect backoff is short so that a
// restarted server sees its clients back at once (the storm), as Envoy's
// 500 ms base backoff also brings them back within a second.
//
// Envoy-like clients' connections have Envoy's default HTTP/2 windows,
// which also keeps grpc-go from estimating the bandwidth-delay product:
// Envoy sends no such pings, and grpc-go's answer every response with one,
// which the server must read and acknowledge. gRPC-like clients keep grpc-go's behaviour. Shared
// connections, which carry every kind, dial as gRPC-like.
func (r *runner) dial(replica int, g *gate, kind clientKind) (*grpc.ClientConn, error) {
	addr := r.replicas[replica].xdsAddr
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256 << 20)),
		// Small transport buffers (write buffers are shared by default)
		// keep thousands of simulated clients from crowding the server out
		// of the machine's memory.
		grpc.WithReadBufferSize(8 << 10), grpc.WithWriteBufferSize(8 << 10),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	if kind != grpcSotW {
		opts = append(opts, grpc.WithInitialWindowSize(envoyStreamWindow), grpc.WithInitialConnWindowSize(envoyConnWindow))
	}
	if g != nil {
		opts = append(opts, grpc.WithContextDialer(g.dialer()))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("loadgen: dial %s: %w", addr, err)
	}
	r.conns = append(r.conns, cc)
	return cc, nil
}

// Envoy's default initial windows (Http2ProtocolOptions
// initial_stream_window_size and initial_connection_window_size).
const (
	envoyStreamWindow = 16 << 20
	envoyConnWindow   = 24 << 20
)

// startClients starts the clients in batches, so the listen backlog is
// not what is measured.
func (r *runner) startClients(ctx context.Context, wg *sync.WaitGroup) {
	all := append(slices.Clone(r.clients), r.slow...)
	for i, c := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.run(ctx)
		}()
		if i%250 == 249 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(25 * time.Millisecond):
			}
		}
	}
}

// waitConverged waits until every client in cs holds the latest generation
// of every cluster it watches.
func (r *runner) waitConverged(ctx context.Context, cs []*client, what string) error {
	target := r.sh.topo.latest()
	return r.waitFor(ctx, cs, what, func(c *client) bool { return c.converged(target) })
}

// waitFor waits until ok holds for every client in cs, or the timeout.
// ok must stay true once true: a client it held for is not asked again, so
// that at 10,000 clients the polling, which shares the cores with the
// server, costs what the clients still missing cost.
func (r *runner) waitFor(ctx context.Context, cs []*client, what string, ok func(*client) bool) error {
	deadline := time.Now().Add(r.cfg.Timeout)
	pending := slices.Clone(cs)
	for {
		pending = slices.DeleteFunc(pending, ok)
		n := len(cs) - len(pending)
		if len(pending) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			r.log.Error("timed out waiting", zap.String("for", what), zap.Int("converged", n), zap.Int("clients", len(cs)),
				zap.Duration("timeout", r.cfg.Timeout))
			return fmt.Errorf("timed out after %v waiting for %s: %d/%d", r.cfg.Timeout, what, n, len(cs))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// phaseChange is one write of the file.
type phaseChange struct{ cluster, gen int }

// changes writes k changes, ChangeInterval apart.
func (r *runner) changes(ctx context.Context, k int) ([]phaseChange, error) {
	var out []phaseChange
	tick := time.NewTicker(r.cfg.ChangeInterval)
	defer tick.Stop()
	for i := range k {
		if i > 0 {
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case <-tick.C:
			}
		}
		ci, gen, err := r.sh.topo.change(r.rng)
		if err != nil {
			return out, fmt.Errorf("loadgen: %w", err)
		}
		out = append(out, phaseChange{ci, gen})
	}
	return out, nil
}

// latencies returns, in milliseconds, the time from each change's write to
// its arrival at each client of cs that holds the cluster.
func (r *runner) latencies(phase []phaseChange, cs []*client) []float64 {
	want := make(map[phaseChange]time.Time, len(phase))
	for _, p := range phase {
		want[p] = r.sh.topo.writtenAt(p.cluster, p.gen)
	}
	var out []float64
	for _, c := range cs {
		c.mu.Lock()
		for _, s := range c.samples {
			if at, ok := want[phaseChange{s.cluster, s.gen}]; ok {
				out = append(out, float64(s.at.Sub(at))/float64(time.Millisecond))
			}
		}
		c.mu.Unlock()
	}
	slices.Sort(out)
	return out
}

// percentile is nearest-rank over sorted values; -1 when there are none.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return -1
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// edsTotals are the EDS bytes and pushes the measured clients received, by
// protocol.
type edsTotals struct{ sotwBytes, sotwPushes, deltaBytes, deltaPushes int64 }

func (r *runner) clientBytes() edsTotals {
	var t edsTotals
	for _, c := range r.clients {
		c.mu.Lock()
		if c.kind == envoyDelta {
			t.deltaBytes += c.edsBytes
			t.deltaPushes += int64(c.edsPushes)
		} else {
			t.sotwBytes += c.edsBytes
			t.sotwPushes += int64(c.edsPushes)
		}
		c.mu.Unlock()
	}
	return t
}

// since returns the mean EDS response size per protocol since b.
func (t edsTotals) since(b edsTotals) (sotw, delta float64) {
	sotw, delta = -1, -1
	if n := t.sotwPushes - b.sotwPushes; n > 0 {
		sotw = float64(t.sotwBytes-b.sotwBytes) / float64(n)
	}
	if n := t.deltaPushes - b.deltaPushes; n > 0 {
		delta = float64(t.deltaBytes-b.deltaBytes) / float64(n)
	}
	return sotw, delta
}
