// Command xds-loadgen measures an xds-server at scale: it writes the
// endpoints file the server watches, connects many simulated Envoy-like and
// gRPC-like xDS clients, changes endpoints and times how long each change
// takes to reach every subscriber. It can also restart the server under its
// clients (a reconnect storm), add clients that stop reading (slow
// consumers), and spread the clients over several spawned replicas.
//
// It ends with one summary line (key=value pairs) on stdout and exits 1 if
// any client failed to converge or ever saw stale content, or if replicas
// sent different versions for the same content. Progress goes to
// stderr. See docs/benchmarks.md for the figures and hack/bench-scale.sh for
// the matrix.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ringxds/ringxds/internal/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "xds-loadgen:", err)
	}
	stop()
	os.Exit(code)
}

type options struct {
	cfg       loadgen.Config
	spawn     bool
	serverBin string
	debounce  time.Duration
	logLevel  string
	serverLog string
	seed      uint64
	keepFile  bool
	serverEnv envFlag
	replicas  int
}

// envFlag collects repeated KEY=VALUE flags.
type envFlag []string

func (e *envFlag) String() string { return strings.Join(*e, " ") }

func (e *envFlag) Set(v string) error {
	if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE", v)
	}
	*e = append(*e, v)
	return nil
}

func parseFlags(args []string, out io.Writer) (options, error) {
	var o options
	c := &o.cfg
	fs := flag.NewFlagSet("xds-loadgen", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.Server, "server", "", "xDS address of a running xds-server that watches --file")
	fs.StringVar(&c.Debug, "debug", "", "debug address of that server, for RSS and bytes from /metrics (optional)")
	fs.StringVar(&c.File, "file", "", "endpoints file to write (default: a temporary file with --spawn-server)")
	fs.BoolVar(&o.spawn, "spawn-server", false, "start xds-server as a child on free loopback ports (needed for --storm)")
	fs.StringVar(&o.serverBin, "server-bin", "", "xds-server binary for --spawn-server (default: next to this binary, then bin/xds-server, then $PATH)")
	fs.DurationVar(&o.debounce, "debounce", 0, "--debounce passed to the spawned server (0: its default)")
	fs.Var(&o.serverEnv, "server-env", "KEY=VALUE added to the spawned server's environment, such as GOMEMLIMIT=256MiB (repeatable)")
	fs.StringVar(&o.serverLog, "server-log", "", "file receiving the spawned server's output (default: beside --file; replica N > 0 adds .N)")
	fs.IntVar(&o.replicas, "replicas", 1, "with --spawn-server, servers to spawn on the same file; clients go round-robin over them and must see identical versions")
	fs.IntVar(&c.Clients, "clients", 100, "simulated xDS clients")
	fs.IntVar(&c.Clusters, "clusters", 10, "clusters in the file")
	fs.IntVar(&c.Endpoints, "endpoints", 100, "endpoints in the file, spread over the clusters")
	fs.IntVar(&c.Changes, "changes", 10, "endpoint changes to measure (one file write each)")
	fs.DurationVar(&c.ChangeInterval, "change-interval", 500*time.Millisecond, "time between changes")
	fs.Float64Var(&c.GRPCFraction, "grpc-fraction", 0.2, "fraction of clients that are gRPC-like (LDS, RDS, CDS, EDS for a few clusters)")
	fs.Float64Var(&c.DeltaFraction, "delta-fraction", 0.5, "fraction of the Envoy-like clients that use delta xDS")
	fs.IntVar(&c.GRPCClusters, "grpc-clusters", 1, "clusters each gRPC-like client dials")
	fs.IntVar(&c.Conns, "conns", 0, "gRPC connections shared by all clients (0: one per client, as real proxies have)")
	fs.DurationVar(&c.Timeout, "timeout", 60*time.Second, "bound on each wait (connect, converge, resync)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed for the client mix and the changes")
	fs.DurationVar(&c.ReconnectJitter, "reconnect-jitter", 100*time.Millisecond, "random delay before a client reopens a failed stream")
	fs.IntVar(&c.SlowConsumers, "slow-consumers", 0, "extra clients that stop reading their socket after the main phase")
	fs.DurationVar(&c.SlowWait, "slow-wait", 60*time.Second, "how long to wait for the server to disconnect slow consumers")
	fs.BoolVar(&c.Storm, "storm", false, "after the main phase, restart the server and measure every client's resync (needs --spawn-server)")
	fs.StringVar(&c.CPUProfile, "cpu-profile", "", "save a server CPU profile over the change phase here (needs /debug/pprof on the debug address)")
	fs.DurationVar(&c.Settle, "settle", 5*time.Second, "wait after forcing the server's GC before reading its memory")
	fs.StringVar(&c.HeapProfile, "heap-profile", "", "save the server's heap profile here once every client converged (needs /debug/pprof)")
	fs.StringVar(&c.ToolCPUProfile, "loadgen-cpu-profile", "", "save this tool's own CPU profile over the change phase here")
	fs.StringVar(&c.GoroutineProfile, "goroutine-profile", "", "save the server's goroutine profile here once every client converged (needs /debug/pprof)")
	fs.StringVar(&o.logLevel, "log-level", "info", "progress log level on stderr: debug, info, warn or error")
	fs.BoolVar(&o.keepFile, "keep-file", false, "keep the temporary endpoints file and server log")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: xds-loadgen [flags]\n\nDrives an xds-server with simulated xDS clients and measures change propagation.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q (flags only; see --help)", fs.Args())
	}
	c.Seed = o.seed
	switch {
	case o.spawn && c.Server != "":
		return o, errors.New("--server and --spawn-server exclude each other")
	case !o.spawn && c.Server == "":
		return o, errors.New("give --server (and --file it watches) or --spawn-server")
	case !o.spawn && c.File == "":
		return o, errors.New("--file: the file the server at --server watches")
	case o.replicas < 1:
		return o, fmt.Errorf("--replicas %d: at least one", o.replicas)
	case o.replicas > 1 && !o.spawn:
		return o, errors.New("--replicas starts the servers: use it with --spawn-server")
	case o.replicas > 1 && c.SlowConsumers > 0:
		return o, errors.New("--slow-consumers are measured against one server: leave out --replicas")
	}
	return o, nil
}

// run returns the exit code: 0 when every client converged, saw no stale
// content and, over replicas, identical versions; 1 otherwise, 2 for usage
// errors.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, err
		}
		return 2, err
	}
	lvl, err := zapcore.ParseLevel(o.logLevel)
	if err != nil {
		return 2, fmt.Errorf("--log-level: %w", err)
	}
	logCfg := zap.NewDevelopmentConfig()
	logCfg.Level = zap.NewAtomicLevelAt(lvl)
	logCfg.OutputPaths, logCfg.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	log, err := logCfg.Build()
	if err != nil {
		return 2, fmt.Errorf("logger: %w", err)
	}
	defer func() { _ = log.Sync() }()
	o.cfg.Logger = log

	if o.spawn {
		if o.cfg.File == "" {
			dir, err := os.MkdirTemp("", "xds-loadgen-")
			if err != nil {
				return 1, fmt.Errorf("temporary directory: %w", err)
			}
			if !o.keepFile {
				defer os.RemoveAll(dir)
			}
			o.cfg.File = filepath.Join(dir, "endpoints.yaml")
		}
		bin, err := findServer(o.serverBin)
		if err != nil {
			return 2, err
		}
		if o.serverLog == "" {
			o.serverLog = o.cfg.File + ".server.log"
		}
		for i := range o.replicas {
			logPath := o.serverLog
			if i > 0 {
				logPath = fmt.Sprintf("%s.%d", o.serverLog, i)
			}
			sp := &loadgen.Spawner{Bin: bin, File: o.cfg.File, Debounce: o.debounce, LogPath: logPath, Logger: log.With(zap.Int("replica", i)), Env: o.serverEnv}
			// Stop runs on every return, and SIGINT/SIGTERM cancel ctx,
			// which ends the run and reaches it too.
			defer func() { _ = sp.Stop(context.Background()) }()
			o.cfg.Replicas = append(o.cfg.Replicas, sp)
		}
	}

	res, err := loadgen.Run(ctx, o.cfg)
	if err != nil {
		return 1, err
	}
	for _, e := range res.Errors {
		log.Error("client error", zap.String("error", e))
	}
	for _, e := range res.VersionExamples {
		log.Error("replicas disagree", zap.String("version", e))
	}
	fmt.Fprintln(stdout, res.Line())
	if !res.OK() {
		return 1, errors.New("not every client converged on correct content, or replicas disagreed on versions (see the summary and the log)")
	}
	return 0, nil
}

// findServer locates the xds-server binary.
func findServer(flagged string) (string, error) {
	if flagged != "" {
		return flagged, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "xds-server")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if _, err := os.Stat(filepath.Join("bin", "xds-server")); err == nil {
		return filepath.Join("bin", "xds-server"), nil
	}
	if p, err := exec.LookPath("xds-server"); err == nil {
		return p, nil
	}
	return "", errors.New("no xds-server binary: build it (make build) or pass --server-bin")
}
