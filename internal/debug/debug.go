package debug

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ringxds/ringxds/internal/buildinfo"
	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/predict"
	"github.com/ringxds/ringxds/internal/ringhash"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/snapshot"
	"github.com/ringxds/ringxds/internal/suggest"
	"github.com/ringxds/ringxds/internal/watch"
)

// Publisher is the part of the xDS server the debug endpoint reads.
type Publisher interface {
	Current() *snapshot.Snapshot
	Ready() bool
	Clients() []server.ClientStatus
	RefusedConnections() []server.RefusedConnection
}

// Options configure the debug handler.
type Options struct {
	Server Publisher
	// Problems returns the input problems of every source.
	Problems func() []watch.Problem
	// Gatherer serves /metrics; nil means prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
	Logger   *zap.Logger
	// Now is the clock a grpc-go client running clientlib/grpcbalancer
	// reads to cut keys over while endpoints fade in; nil means time.Now.
	// It is not the server's fade clock (server.Options.Now): the package
	// reads the wall clock of the client's machine.
	Now func() time.Time
	// Replica is the server's name and build, shown in the page header and
	// on /debug/clients; the zero value means buildinfo.Local().
	Replica buildinfo.Replica
}

// Limits on debug queries, so a hostile or careless query cannot make the
// server do unbounded work or echo unbounded input.
const (
	maxKeyBytes     = 4096
	maxClusterBytes = 256
)

// Handler serves the debug endpoints.
type Handler struct {
	opts   Options
	mux    *http.ServeMux
	probes *http.ServeMux
	rings  atomic.Pointer[ringCache]
}

// New returns the debug HTTP handler.
func New(opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Gatherer == nil {
		opts.Gatherer = prometheus.DefaultGatherer
	}
	if opts.Problems == nil {
		opts.Problems = func() []watch.Problem { return nil }
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Replica == (buildinfo.Replica{}) {
		opts.Replica = buildinfo.Local()
	}
	h := &Handler{opts: opts, mux: http.NewServeMux(), probes: http.NewServeMux()}
	h.mux.HandleFunc("GET /debug/snapshot", h.snapshot)
	h.mux.HandleFunc("GET /debug/pick", h.pick)
	h.mux.HandleFunc("GET /debug/clients", h.clients)
	h.mux.HandleFunc("GET /debug/problems", h.problems)
	healthz := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }
	metrics := promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{ErrorLog: zap.NewStdLog(opts.Logger)})
	for _, mux := range []*http.ServeMux{h.mux, h.probes} {
		mux.HandleFunc("GET /healthz", healthz)
		mux.HandleFunc("GET /readyz", h.readyz)
		mux.Handle("GET /metrics", metrics)
	}
	// Profiles are how a platform team answers "why is the control plane
	// slow". They, like /debug/*, are served by Handler only, never by
	// Probes: xds-server keeps that listener on loopback unless told
	// otherwise, and checks the Host header (CheckHost).
	h.mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	h.mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	h.mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	h.mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	h.mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	newPage(h).register(h.mux)
	return h
}

// ServeHTTP implements http.Handler: everything, the debug page, /debug/*
// and pprof included.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Probes serves only what a kubelet and a metrics scraper need: /healthz,
// /readyz and /metrics. It is what xds-server exposes on the pod network
// (--metrics-addr) while the rest stays on loopback.
func (h *Handler) Probes() http.Handler { return h.probes }

func (h *Handler) readyz(w http.ResponseWriter, _ *http.Request) {
	if !h.opts.Server.Ready() {
		http.Error(w, "no snapshot published yet", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// kindParam parses the optional client kind of a query.
func kindParam(r *http.Request, def snapshot.Kind) (snapshot.Kind, error) {
	v := r.URL.Query().Get("client")
	if v == "" {
		return def, nil
	}
	k := snapshot.Kind(v)
	if !slices.Contains(server.Kinds, k) {
		return "", fmt.Errorf("client must be one of %s", joinKinds(server.Kinds))
	}
	return k, nil
}

func joinKinds(kinds []snapshot.Kind) string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// implementationParam parses the client a pick is asked for: an
// implementation (grpc-js, c-core, ...) or a kind, which stands for the
// implementation it is chosen for (grpc is grpc-go, grpc-legacy grpc-js).
func implementationParam(r *http.Request, def string) (string, error) {
	v := r.URL.Query().Get("client")
	if v == "" {
		return def, nil
	}
	var names []string
	for _, impl := range dataplane.Predicted() {
		if impl.Name == v {
			return v, nil
		}
		names = append(names, impl.Name)
	}
	if why, ok := dataplane.Unpredicted()[v]; ok {
		return "", errors.New(why)
	}
	switch k := snapshot.Kind(v); k {
	case snapshot.KindGRPCRoundRobin:
		return "", errors.New("grpc-round-robin clients run round_robin: there is no ring to pick from")
	case snapshot.KindEnvoy, snapshot.KindGRPC, snapshot.KindGRPCLegacy, snapshot.KindClientlib:
		return k.Dialect().Name, nil
	}
	return "", fmt.Errorf("client must be one of %s, or a kind (%s)", strings.Join(names, ", "), joinKinds(snapshot.RingKinds()))
}

// PickResult is the answer of /debug/pick.
type PickResult struct {
	Cluster string `json:"cluster"`
	Key     string `json:"key"`
	// Client is the implementation whose ring answered.
	Client string `json:"client"`
	Policy string `json:"policy"`
	// Hash is the request hash as a decimal string: JSON numbers lose
	// precision above 2^53.
	Hash     string `json:"hash"`
	Endpoint string `json:"endpoint"`
	// ByClient is the pick of every implementation whose ring the
	// published resources fix (dataplane.Predicted). They differ where an
	// implementation cannot run the cluster's policy or builds its ring
	// another way (see the snapshot notes and docs/grpc-clients.md).
	ByClient map[string]string `json:"by_client"`
	// Unpredicted names the implementations with no answer here, and why.
	Unpredicted map[string]string `json:"unpredicted,omitempty"`
	// Explain says, per implementation in ByClient, why it picks what it
	// does; only with explain=1.
	Explain map[string]*PickExplanation `json:"explain,omitempty"`
}

// pick answers where a key goes. The default client is clientlib, the
// only one that receives every policy as configured.
func (h *Handler) pick(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	cluster, key := q.Get("cluster"), q.Get("key")
	switch {
	case cluster == "":
		writeError(w, http.StatusBadRequest, "missing query parameter: cluster")
		return
	case !q.Has("key"):
		writeError(w, http.StatusBadRequest, "missing query parameter: key")
		return
	case len(cluster) > maxClusterBytes:
		writeError(w, http.StatusBadRequest, "cluster name longer than "+strconv.Itoa(maxClusterBytes)+" bytes")
		return
	case len(key) > maxKeyBytes:
		writeError(w, http.StatusBadRequest, "key longer than "+strconv.Itoa(maxKeyBytes)+" bytes")
		return
	case !utf8.ValidString(key):
		// The answer is JSON, which would show another key than the one
		// hashed (each invalid byte as U+FFFD).
		writeError(w, http.StatusBadRequest, "key is not valid UTF-8")
		return
	}
	impl, err := implementationParam(r, dataplane.Clientlib)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	snap := h.opts.Server.Current()
	if snap == nil {
		writeError(w, http.StatusServiceUnavailable, "no snapshot published yet")
		return
	}
	if _, ok := snap.State.Cluster(cluster); !ok {
		writeError(w, http.StatusBadRequest, unknownClusterMessage(snap, cluster))
		return
	}
	if why, failed := snap.Failed[cluster]; failed && snap.Kinds[snapshot.KindEnvoy][resource.ClusterType][cluster] == nil {
		// Known to the source but never translated: nothing to pick
		// from, and no fault of the server's to report as a 5xx.
		writeError(w, http.StatusConflict, "cluster "+strconv.Quote(cluster)+" is not published: its translation failed: "+why)
		return
	}
	h.writePick(w, snap, cluster, key, impl, explainParam(q.Get("explain")))
}

// unknownClusterMessage names a cluster /debug/pick does not know and the
// published clusters closest to it, so that a typo shows its fix.
func unknownClusterMessage(snap *snapshot.Snapshot, cluster string) string {
	names := make([]string, len(snap.State.Clusters))
	for i := range snap.State.Clusters {
		names[i] = snap.State.Clusters[i].Name
	}
	msg := "unknown cluster " + strconv.Quote(cluster)
	if len(names) == 0 {
		return msg + ": no cluster is published"
	}
	if near := suggest.Likely(cluster, names, 1); len(near) > 0 {
		msg += " (did you mean " + suggest.Quote(near) + "?)"
	}
	closest := suggest.Closest(cluster, names, 5)
	msg += "; published clusters, closest first: " + strings.Join(closest, ", ")
	if more := len(names) - len(closest); more > 0 {
		msg += fmt.Sprintf(" and %d more", more)
	}
	return msg
}

func (h *Handler) writePick(w http.ResponseWriter, snap *snapshot.Snapshot, cluster, key, impl string, explain bool) {
	hash := ringhash.HashKey(key)
	// The clock, not the snapshot's step: a client running
	// clientlib/grpcbalancer reads its own clock at every pick against the
	// fade starts its schedule lists, and the schedule stays the same from
	// step to step, so from a step's instant on the client is on that step
	// even before the server publishes it.
	now := h.opts.Now()
	res := PickResult{Cluster: cluster, Key: key, Client: impl, Hash: strconv.FormatUint(hash, 10),
		ByClient: map[string]string{}, Unpredicted: dataplane.Unpredicted()}
	for _, p := range dataplane.Predicted() {
		policy, ep, err := h.predict(snap, p, cluster, hash, now)
		if err != nil {
			h.opts.Logger.Error("cannot decode published cluster", zap.String("cluster", cluster), zap.String("client", p.Name), zap.Error(err))
			writeError(w, http.StatusInternalServerError, "decode "+p.Name+" resources of "+cluster+": "+err.Error())
			return
		}
		res.ByClient[p.Name] = ep
		if p.Name == impl {
			res.Policy, res.Endpoint = policy, ep
		}
		if explain {
			x, err := h.explain(snap, p, cluster, hash, now)
			if err != nil {
				writeError(w, http.StatusInternalServerError, "explain "+p.Name+" pick of "+cluster+": "+err.Error())
				return
			}
			if res.Explain == nil {
				res.Explain = make(map[string]*PickExplanation, len(dataplane.Predicted()))
			}
			res.Explain[p.Name] = x
		}
	}
	writeJSON(w, http.StatusOK, res)
}

// predict returns the ring policy implementation p runs on the cluster and
// the endpoint it sends request hash h to at now.
func (h *Handler) predict(snap *snapshot.Snapshot, p dataplane.Implementation, cluster string, hash uint64, now time.Time) (policy, endpoint string, err error) {
	d, err := h.decoded(snap, p.Kind, p.Dialect, cluster)
	if err != nil {
		return "", "", err
	}
	f, err := h.fadeRing(snap, p, cluster, d, now)
	if err != nil {
		return "", "", err
	}
	policy, endpoint = (&predict.Ring{Decoded: d, Fade: f}).Pick(hash, now)
	return policy, endpoint, nil
}

// ringCache holds the rings decoded from one published snapshot, built on
// first use. A new snapshot replaces the whole cache.
type ringCache struct {
	snap  *snapshot.Snapshot
	mu    sync.Mutex
	rings map[ringKey]*snapshot.Decoded
	// fades holds the N-rings of fade schedules, nil where an
	// implementation runs no schedule on the cluster.
	fades map[ringKey]*predict.FadeRing
}

type ringKey struct {
	kind    snapshot.Kind
	dialect snapshot.Dialect
	cluster string
}

// cache returns the ring cache of snap.
func (h *Handler) cache(snap *snapshot.Snapshot) *ringCache {
	rc := h.rings.Load()
	if rc == nil || rc.snap != snap {
		fresh := &ringCache{snap: snap, rings: make(map[ringKey]*snapshot.Decoded), fades: make(map[ringKey]*predict.FadeRing)}
		if h.rings.CompareAndSwap(rc, fresh) {
			rc = fresh
		} else {
			rc = h.rings.Load()
			if rc.snap != snap {
				rc = fresh // raced with a newer snapshot; answer from ours uncached
			}
		}
	}
	return rc
}

// decoded returns the ring a data plane of dialect d builds from the
// resources of kind, decoding it on first use.
func (h *Handler) decoded(snap *snapshot.Snapshot, kind snapshot.Kind, d snapshot.Dialect, cluster string) (*snapshot.Decoded, error) {
	rc := h.cache(snap)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	k := ringKey{kind, d, cluster}
	if dec, ok := rc.rings[k]; ok {
		return dec, nil
	}
	dec, err := predict.Decode(snap, kind, d, cluster)
	if err != nil {
		return nil, err
	}
	rc.rings[k] = dec
	return dec, nil
}

// publishedResource is one resource as /debug/snapshot shows it.
type publishedResource struct {
	Version  string          `json:"version"`
	Resource json.RawMessage `json:"resource"`
}

func (h *Handler) snapshot(w http.ResponseWriter, r *http.Request) {
	snap := h.opts.Server.Current()
	if snap == nil {
		writeError(w, http.StatusServiceUnavailable, "no snapshot published yet")
		return
	}
	only, err := kindParam(r, "")
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out := struct {
		Kinds    map[snapshot.Kind]map[string]map[string]publishedResource `json:"kinds"`
		Notes    map[string][]string                                       `json:"notes"`
		Fading   map[string][]snapshot.FadeStatus                          `json:"fading"`
		NextStep time.Time                                                 `json:"next_step,omitzero"`
		Problems []watch.Problem                                           `json:"problems"`
		// Failed: clusters the build could not translate, and why.
		Failed map[string]string `json:"failed,omitempty"`
	}{Kinds: map[snapshot.Kind]map[string]map[string]publishedResource{}, Notes: snap.Notes, Fading: snap.Fading, NextStep: snap.NextStep, Problems: h.currentProblems(), Failed: snap.Failed}
	mo := protojson.MarshalOptions{Multiline: false, UseProtoNames: true}
	for kind, types := range snap.Kinds {
		if only != "" && kind != only {
			continue
		}
		byType := map[string]map[string]publishedResource{}
		for typeURL, byName := range types {
			named := make(map[string]publishedResource, len(byName))
			for name, res := range byName {
				v, err := snapshot.Version(res)
				if err != nil {
					writeError(w, http.StatusInternalServerError, err.Error())
					return
				}
				js, err := mo.Marshal(res.(proto.Message))
				if err != nil {
					writeError(w, http.StatusInternalServerError, "render "+name+": "+err.Error())
					return
				}
				named[name] = publishedResource{Version: v, Resource: js}
			}
			byType[shortTypeName(typeURL)] = named
		}
		out.Kinds[kind] = byType
	}
	writeJSON(w, http.StatusOK, out)
}

func shortTypeName(typeURL string) string {
	switch typeURL {
	case resource.ClusterType:
		return "clusters"
	case resource.EndpointType:
		return "endpoints"
	case resource.ListenerType:
		return "listeners"
	case resource.RouteType:
		return "routes"
	}
	return typeURL
}

func (h *Handler) clients(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		// Replica is the server answering: its clients only are listed
		// (docs/xds.md, "Replicas and builds").
		Replica buildinfo.Replica     `json:"replica"`
		Clients []server.ClientStatus `json:"clients"`
		// Refused lists the connections recently refused over a limit,
		// including those with no stream left to show above.
		Refused []server.RefusedConnection `json:"refused"`
		At      time.Time                  `json:"at"`
	}{h.opts.Replica, h.opts.Server.Clients(), h.opts.Server.RefusedConnections(), time.Now()})
}

func (h *Handler) problems(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Problems []watch.Problem `json:"problems"`
	}{h.currentProblems()})
}

// currentProblems returns the sources' problems, an empty list rather than
// nil when there are none, so that /debug/problems and /debug/snapshot
// both say [] and a tool need not handle null.
func (h *Handler) currentProblems() []watch.Problem {
	if p := h.opts.Problems(); p != nil {
		return p
	}
	return []watch.Problem{}
}
