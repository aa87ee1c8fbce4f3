// Command xds-server is the ringxds control plane: it watches an endpoint
// source (a YAML file, or Kubernetes EndpointSlices), translates it into xDS
// resources for Envoy, proxyless gRPC and clientlib, serves them over ADS,
// and serves a debug page, debug JSON and Prometheus metrics.
//
// With no flags it serves the embedded examples/endpoints.yaml on loopback.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ringxds/ringxds/examples"
	"github.com/ringxds/ringxds/internal/authz"
	"github.com/ringxds/ringxds/internal/buildinfo"
	"github.com/ringxds/ringxds/internal/debug"
	"github.com/ringxds/ringxds/internal/model"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/tlsreload"
	"github.com/ringxds/ringxds/internal/watch"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		if errors.Is(err, errVersion) {
			fmt.Print(buildinfo.Read().Text("xds-server"))
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "xds-server:", err)
		os.Exit(1)
	}
}

// errVersion is how parseFlags reports --version: main prints the build
// on stdout, where scripts read it, and exits.
var errVersion = errors.New("--version")

// config is the parsed command line.
type config struct {
	source            string
	file              string
	xdsAddr           string
	debugAddr         string
	metricsAddr       string
	debugRemote       bool
	debugHosts        []string
	logLevel          string
	tlsCert           string
	tlsKey            string
	tlsClientCA       string
	tlsReloadInterval time.Duration
	kubeconfig        string
	namespace         string
	serviceSelector   string
	kubeMaxRingSize   int64
	debounce          time.Duration
	maxConnAge        time.Duration
	limits            server.Limits
	showVersion       bool

	// --authz and --authz-cluster-readers, and the policy they make.
	authz               string
	authzClusterReaders []string
	authzPolicy         *authz.Policy
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("xds-server", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.source, "source", "file", "endpoint source: file or kubernetes")
	fs.StringVar(&c.file, "file", "", "endpoints YAML/JSON file to serve and watch (default: the embedded "+examples.DefaultEndpointsName+")")
	fs.StringVar(&c.xdsAddr, "xds-addr", "127.0.0.1:18000", "address of the xDS gRPC server (ADS, SotW and delta)")
	fs.StringVar(&c.debugAddr, "debug-addr", "127.0.0.1:18080", "address of the debug page, /debug/* JSON and pprof, and of /metrics and the health probes unless --metrics-addr moves them; must be loopback unless --debug-remote")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "address of /metrics, /healthz and /readyz alone, for a scraper and the kubelet on the pod network (default: served on --debug-addr)")
	fs.BoolVar(&c.debugRemote, "debug-remote", false, "allow a non-loopback --debug-addr: /debug/* (every cluster's endpoints) and pprof then answer whoever reaches it, whatever --tls-client-ca says")
	fs.Func("debug-allowed-hosts", "comma-separated host names (or *.domain, or IP addresses) the debug listener answers to besides loopback, localhost and this host's own addresses and name; other Host headers get 403 (DNS rebinding)", func(v string) error {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				c.debugHosts = append(c.debugHosts, h)
			}
		}
		return nil
	})
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM certificate for TLS on the xDS port (reloaded when it changes on disk)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM private key for --tls-cert (reloaded with it)")
	fs.StringVar(&c.tlsClientCA, "tls-client-ca", "", "PEM CA bundle; when set, xDS clients must present a certificate it signed (mTLS; reloaded when it changes on disk)")
	fs.DurationVar(&c.tlsReloadInterval, "tls-reload-interval", tlsreload.DefaultInterval, "how often the --tls-* files are checked for changes (handshakes never read them)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig for --source=kubernetes (default: in-cluster config)")
	fs.StringVar(&c.namespace, "namespace", "", "with --source=kubernetes, watch only this namespace (default: all)")
	fs.StringVar(&c.serviceSelector, "service-selector", "", "with --source=kubernetes, label selector narrowing the Services considered, and their EndpointSlices (which carry the Service labels)")
	fs.Int64Var(&c.kubeMaxRingSize, watch.KubeMaxRingSizeFlag, watch.DefaultKubeMaxRingSize, fmt.Sprintf(
		"with --source=kubernetes, the largest ring size, in entries, a Service's ringxds.io/ring-size, min-ring-size or max-ring-size annotation gets: "+
			"annotations are tenant input, so a larger value is lowered to this and reported, and the Service is still served. "+
			"65536 is the largest ring whose fade-in is ordered exactly, 16 times the 4096 gRPC clients cap rings at anyway, and about 1.5 MiB per cluster in each Envoy. "+
			"1..%d (%d, Envoy's limit, caps nothing); the file source is never capped", model.MaxRingSize, model.MaxRingSize))
	fs.DurationVar(&c.debounce, "debounce", 0, "quiet time that coalesces bursts of input changes into one push (0: the source's default)")
	fs.DurationVar(&c.maxConnAge, "max-connection-age", 30*time.Minute, "close xDS connections after this age so clients rebalance across replicas")
	fs.BoolVar(&c.showVersion, "version", false, "print the module version, commit and Go version, and exit")
	addLimitFlags(fs, &c.limits)
	addAuthzFlags(fs, &c)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: xds-server [flags]\n\nServes consistent-hash clusters to Envoy, proxyless gRPC and clientlib over xDS.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.showVersion {
		return c, errVersion
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q (flags only; see --help)", fs.Args())
	}
	switch c.source {
	case "file":
	case "kubernetes":
		if c.file != "" {
			return c, errors.New("--file applies to --source=file only")
		}
	default:
		return c, fmt.Errorf("--source %q: want file or kubernetes", c.source)
	}
	if c.kubeMaxRingSize < 1 || c.kubeMaxRingSize > model.MaxRingSize {
		// 0 is refused rather than read as "no cap" (as the xDS limits
		// read it) or as the default (as --debounce does): this cap guards
		// against tenants, and a template that renders an unset value as 0
		// must not lift it without a word.
		return c, fmt.Errorf("--%s %d: want 1..%d (%d, Envoy's limit, caps nothing)",
			watch.KubeMaxRingSizeFlag, c.kubeMaxRingSize, model.MaxRingSize, model.MaxRingSize)
	}
	if c.debounce < 0 {
		return c, fmt.Errorf("--debounce %v must not be negative", c.debounce)
	}
	if err := checkLimits(c.limits); err != nil {
		return c, err
	}
	switch {
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return c, errors.New("--tls-cert and --tls-key must be given together")
	case c.tlsClientCA != "" && c.tlsCert == "":
		return c, errors.New("--tls-client-ca needs --tls-cert and --tls-key")
	case c.tlsReloadInterval <= 0:
		return c, fmt.Errorf("--tls-reload-interval %v must be positive", c.tlsReloadInterval)
	}
	var err error
	c.authzPolicy, err = authzPolicy(c)
	return c, err
}

// newLogger returns the JSON logger at level, writing to sink.
func newLogger(level string, sink zapcore.WriteSyncer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), sink, zap.NewAtomicLevelAt(lvl))
	// A stack trace says where in ringxds a line was logged: useful for a
	// bug in ringxds, noise for anything else. zap's production default
	// adds one to every Error, which gave each problem of a bad endpoints
	// file its own trace; only DPanic and above, which mark bugs, get one.
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.DPanicLevel), zap.ErrorOutput(sink)), nil
}

// listeners lets tests pass pre-bound sockets; nil means bind the flags'
// addresses (metrics: only with --metrics-addr).
type listeners struct{ xds, debug, metrics net.Listener }

func (l *listeners) close() {
	for _, c := range []net.Listener{l.xds, l.debug, l.metrics} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// run starts the server and blocks until ctx is done or a component fails.
// openListeners binds what lis does not already hold, refusing a debug
// address off loopback unless --debug-remote says so.
func openListeners(cfg config, lis *listeners) (*listeners, error) {
	if lis == nil {
		lis = &listeners{}
	}
	var err error
	if lis.xds == nil {
		if lis.xds, err = net.Listen("tcp", cfg.xdsAddr); err != nil {
			return nil, fmt.Errorf("listen --xds-addr: %w", err)
		}
	}
	if lis.debug == nil {
		// Refuse what is plainly not loopback before binding it at all.
		if host, _, err := net.SplitHostPort(cfg.debugAddr); err == nil && !cfg.debugRemote {
			if ip := net.ParseIP(host); host == "" || ip != nil && !ip.IsLoopback() {
				_ = lis.xds.Close()
				return nil, debugAddrError(cfg.debugAddr)
			}
		}
		if lis.debug, err = net.Listen("tcp", cfg.debugAddr); err != nil {
			_ = lis.xds.Close()
			return nil, fmt.Errorf("listen --debug-addr: %w", err)
		}
	}
	if lis.metrics == nil && cfg.metricsAddr != "" {
		if lis.metrics, err = net.Listen("tcp", cfg.metricsAddr); err != nil {
			_ = lis.xds.Close()
			_ = lis.debug.Close()
			return nil, fmt.Errorf("listen --metrics-addr: %w", err)
		}
	}
	if !isLoopback(lis.debug.Addr()) && !cfg.debugRemote {
		lis.close()
		return nil, debugAddrError(lis.debug.Addr().String())
	}
	return lis, nil
}

func tlsModeOf(cfg config) string {
	switch {
	case cfg.tlsClientCA != "":
		return "mTLS"
	case cfg.tlsCert != "":
		return "TLS"
	}
	return "plaintext"
}

// warnExposure logs what the listeners expose to whoever reaches them.
func warnExposure(log *zap.Logger, cfg config, lis *listeners, tlsMode string) {
	if tlsMode == "plaintext" && !isLoopback(lis.xds.Addr()) {
		log.Warn("xDS is served in plaintext on a non-loopback address; anyone who can reach it can read the topology and impersonate the control plane: pass --tls-cert/--tls-key (and --tls-client-ca for mTLS)",
			zap.String("addr", lis.xds.Addr().String()))
	}
	if cfg.debugRemote && !isLoopback(lis.debug.Addr()) {
		log.Warn("the debug listener is not on loopback (--debug-remote): the debug page, /debug/* and pprof answer anyone who reaches it and sends an admitted Host header",
			zap.String("addr", lis.debug.Addr().String()))
	}
}

// httpServersFor serves the Host-checked debug handler on the debug
// listener and, when there is one, probes and /metrics on the metrics
// listener; it returns the servers and their listeners in that order.
func httpServersFor(cfg config, lis *listeners, dbg *debug.Handler, log *zap.Logger) ([]*http.Server, []net.Listener, error) {
	hosts := cfg.debugHosts
	if h, _, err := net.SplitHostPort(cfg.debugAddr); err == nil && h != "" && net.ParseIP(h) == nil {
		hosts = append(hosts, h) // the name --debug-addr was given as
	}
	guarded, err := debug.CheckHost(dbg, debug.HostOptions{Allowed: hosts, Logger: log.Named("debug")})
	if err != nil {
		return nil, nil, fmt.Errorf("--debug-allowed-hosts: %w", err)
	}
	newHTTP := func(h http.Handler) *http.Server {
		return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 2 * time.Minute}
	}
	servers := []*http.Server{newHTTP(guarded)}
	listeners := []net.Listener{lis.debug}
	if lis.metrics != nil {
		servers = append(servers, newHTTP(dbg.Probes()))
		listeners = append(listeners, lis.metrics)
	}
	return servers, listeners, nil
}

// printBanner tells the user where everything is. pickCluster is a cluster
// of the loaded state to show /debug/pick with, "" when none is known yet.
func printBanner(out io.Writer, log *zap.Logger, cfg config, lis *listeners, tlsMode, pickCluster string, replica buildinfo.Replica) {
	fmt.Fprintf(out, "ringxds xds-server %s on %s (%s source: %s)\n", replica.Build, replica.Name, cfg.source, sourceName(cfg))
	if cfg.source == "file" && cfg.file == "" {
		fmt.Fprintf(out, "  serving the example built into the binary; editing %s changes nothing until a rebuild.\n", examples.DefaultEndpointsName)
		fmt.Fprintf(out, "  To serve your own endpoints, watched for changes: xds-server --file endpoints.yaml\n")
	}
	fmt.Fprintf(out, "  xDS (ADS, SotW + delta): %s (%s)\n", lis.xds.Addr(), tlsMode)
	fmt.Fprintf(out, "  debug page:              http://%s/\n", lis.debug.Addr())
	if pickCluster != "" {
		fmt.Fprintf(out, "  where a key goes:        http://%s/debug/pick?cluster=%s&key=example-key\n", lis.debug.Addr(), url.QueryEscape(pickCluster))
	} else {
		fmt.Fprintf(out, "  where a key goes:        http://%s/debug/pick?cluster=NAME&key=KEY (the debug page lists the clusters)\n", lis.debug.Addr())
	}
	fmt.Fprintf(out, "  connected clients:       http://%s/debug/clients\n", lis.debug.Addr())
	metricsAddr := lis.debug.Addr()
	if lis.metrics != nil {
		metricsAddr = lis.metrics.Addr()
	}
	fmt.Fprintf(out, "  metrics:                 http://%s/metrics\n", metricsAddr)
	log.Info("serving", zap.String("xds_addr", lis.xds.Addr().String()), zap.String("debug_addr", lis.debug.Addr().String()),
		zap.Stringer("metrics_addr", metricsAddr), zap.String("source", cfg.source), zap.String("tls", tlsMode),
		zap.String("replica", replica.Name), zap.String("version", replica.Build.Version), zap.String("revision", replica.Build.ShortRevision()))
}

func run(ctx context.Context, args []string, out io.Writer, lis *listeners) error {
	cfg, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	log, err := newLogger(cfg.logLevel, zapcore.Lock(os.Stderr))
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	replica := buildinfo.Local()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), replica.Build.Collector())

	src, loaded, err := newSource(ctx, cfg, log, reg)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	xds := server.New(ctx, server.Options{Logger: log.Named("xds"), Registerer: reg, Limits: &cfg.limits, Authz: cfg.authzPolicy, Replica: replica})
	logAuthz(log, cfg)
	tlsCfg, err := newTLS(ctx, cfg, log, reg)
	if err != nil {
		return err
	}
	grpcServer, err := server.NewGRPCServer(server.GRPCOptions{
		TLS: tlsCfg, MaxConnectionAge: cfg.maxConnAge,
		ServerOptions: xds.GRPCServerOptions(),
	})
	if err != nil {
		return err
	}
	xds.Register(grpcServer)

	if lis, err = openListeners(cfg, lis); err != nil {
		return err
	}
	tlsMode := tlsModeOf(cfg)
	warnExposure(log, cfg, lis, tlsMode)
	httpServers, httpListeners, err := httpServersFor(cfg, lis, debug.New(debug.Options{Server: xds, Problems: src.Problems, Gatherer: reg, Logger: log.Named("debug"), Replica: replica}), log)
	if err != nil {
		lis.close()
		return err
	}

	errc := make(chan error, 2+len(httpServers))
	go func() {
		// xDS is served only once there is something to serve: see
		// server.WaitReady. /healthz answers meanwhile; /readyz does not.
		if err := xds.WaitReady(ctx); err != nil {
			_ = lis.xds.Close()
			errc <- nil
			return
		}
		errc <- wrapErr("xDS server", grpcServer.Serve(xds.Listen(lis.xds)))
	}()
	for i, hs := range httpServers {
		what := []string{"debug server", "metrics server"}[i]
		go func() {
			err := hs.Serve(httpListeners[i])
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			errc <- wrapErr(what, err)
		}()
	}
	go func() {
		errc <- wrapErr("endpoint source", src.Run(ctx, func(st model.State) {
			if err := xds.Apply(st); err != nil {
				log.Error("state rejected; the previous snapshot stays published", zap.Error(err))
			}
		}))
	}()

	printBanner(out, log, cfg, lis, tlsMode, bannerCluster(loaded), replica)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	cancel()
	shutdown(grpcServer, httpServers, log)
	return runErr
}

// shutdown drains streams briefly, then cuts them: xDS streams never end by
// themselves, and clients reconnect to another replica.
func shutdown(g interface {
	GracefulStop()
	Stop()
}, hs []*http.Server, log *zap.Logger) {
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		g.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, h := range hs {
		_ = h.Shutdown(sctx)
	}
	log.Info("stopped")
}

// newTLS loads the xDS certificate, key and client CA, and follows them on
// disk until ctx is done; nil means plaintext.
func newTLS(ctx context.Context, cfg config, log *zap.Logger, reg prometheus.Registerer) (*tls.Config, error) {
	if cfg.tlsCert == "" {
		return nil, nil
	}
	rl, err := tlsreload.New(tlsreload.Options{
		CertFile: cfg.tlsCert, KeyFile: cfg.tlsKey, ClientCAFile: cfg.tlsClientCA,
		Interval: cfg.tlsReloadInterval, Logger: log.Named("tls"), Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	go rl.Run(ctx)
	return rl.Config(), nil
}

func debugAddrError(addr string) error {
	return fmt.Errorf("--debug-addr %s is not a loopback address: the debug page, /debug/* (every cluster's endpoints) and pprof would answer anyone who reaches it, whatever --tls-client-ca says; "+
		"keep --debug-addr on loopback (kubectl port-forward still reaches it) and serve /metrics and the probes on the pod network with --metrics-addr, or pass --debug-remote", addr)
}

func wrapErr(what string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

func sourceName(cfg config) string {
	switch {
	case cfg.source == "kubernetes":
		if cfg.namespace != "" {
			return "namespace " + cfg.namespace
		}
		return "all namespaces"
	case cfg.file == "":
		return "embedded " + examples.DefaultEndpointsName
	}
	return cfg.file
}

// bannerCluster is the cluster the banner shows /debug/pick with: the
// first ring_hash cluster of the loaded state, on which every data plane
// picks alike, else its first; "" when nothing is loaded yet.
func bannerCluster(st model.State) string {
	for _, c := range st.Clusters {
		if c.Policy == model.PolicyRingHash {
			return c.Name
		}
	}
	if len(st.Clusters) > 0 {
		return st.Clusters[0].Name
	}
	return ""
}

// newSource builds the configured source and, for files, loads it once so an
// invalid file stops start-up with a clear message instead of serving
// nothing. It returns what that load read (nothing for Kubernetes, whose
// informers have not synced yet).
func newSource(ctx context.Context, cfg config, log *zap.Logger, reg prometheus.Registerer) (watch.Source, model.State, error) {
	switch cfg.source {
	case "kubernetes":
		src, err := newKubeSource(ctx, cfg, log, reg)
		return src, model.State{}, err
	}
	opts := watch.FileOptions{Logger: log.Named("file"), Registerer: reg, Debounce: cfg.debounce}
	var (
		src *watch.FileSource
		err error
	)
	if cfg.file == "" {
		src, err = watch.NewFileSourceFromBytes(examples.DefaultEndpointsName, examples.DefaultEndpoints, opts)
	} else {
		src, err = watch.NewFileSource(cfg.file, opts)
	}
	if err != nil {
		return nil, model.State{}, err
	}
	st, err := src.Load()
	if err != nil {
		return nil, model.State{}, err
	}
	return src, st, nil
}
