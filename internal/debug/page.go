package debug

import (
	"bytes"
	"cmp"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"

	"github.com/ringxds/ringxds/internal/buildinfo"
	"github.com/ringxds/ringxds/internal/dataplane"
	"github.com/ringxds/ringxds/internal/server"
	"github.com/ringxds/ringxds/internal/snapshot"
)

// assets are the page's template, script and style sheet. They are embedded
// so the page works on a machine with no network and no files beside the
// binary.
//
//go:embed assets
var assets embed.FS

// Paths of the page's own endpoints.
const (
	pageAssetsPath   = "/debug/page/assets/"
	pageClustersPath = "/debug/page/clusters"
	pageClientsPath  = "/debug/page/clients"
	ringsPath        = "/debug/rings"
)

// pageCSP allows only the page's own script, style sheet and fetches: every
// value on the page comes from clients and sources, so even a missed escape
// must not be able to run script.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// page serves the debug page at "/": every cluster's ring drawn from the
// published resources, endpoint weights and fade-in progress, connected
// clients, and a key box that asks /debug/pick.
type page struct {
	h      *Handler
	tmpl   *template.Template
	static http.Handler
	cache  atomic.Pointer[pageCache]
}

// pageCache holds what the page renders from one published snapshot, per
// client kind, built on first use. Drawing a ring walks all its entries, so
// it is done once per snapshot, not once per request.
type pageCache struct {
	snap   *snapshot.Snapshot
	mu     sync.Mutex
	byKind map[snapshot.Kind]*renderedClusters
}

// renderedClusters is the clusters section for one kind of data plane.
type renderedClusters struct {
	Clusters []pageCluster
	html     template.HTML
	etag     string
}

// pageCluster is one cluster as the page and /debug/rings show it.
type pageCluster struct {
	Name       string `json:"name"`
	Policy     string `json:"policy,omitempty"`
	HashHeader string `json:"hash_header,omitempty"`
	// Size is the number of ring entries or Maglev table slots.
	Size int `json:"size,omitempty"`
	// Strip is true when the drawing is a Maglev table, false for a ring.
	Strip bool `json:"strip"`
	// Segments is the number of merged arcs or runs; Binned is set when
	// there were too many to draw each, and the drawing shows drawBins bins.
	Segments  int            `json:"segments"`
	Binned    bool           `json:"binned,omitempty"`
	Endpoints []pageEndpoint `json:"endpoints"`
	Notes     []string       `json:"notes,omitempty"`
	// WeightsNote says why the published weights or ring size differ from
	// the configured ones (weightsNote); empty when they do not.
	WeightsNote string `json:"weights_note,omitempty"`
	// Err says why the cluster's published resources could not be decoded.
	Err string `json:"error,omitempty"`
}

// pageEndpoint is one endpoint of a drawn cluster.
type pageEndpoint struct {
	Addr  string `json:"endpoint"`
	Color string `json:"color"`
	// Weight is the EDS weight published to this kind of data plane;
	// ConfiguredWeight is the one the source (file or Service) gives the
	// endpoint. They differ where the ring is laid out for fade-in, whose
	// weights are derived so that every data plane builds the same ring
	// (pageCluster.WeightsNote says so in words).
	Weight           uint32 `json:"weight"`
	ConfiguredWeight uint32 `json:"configured_weight"`
	// RingEntries is the ring entries the endpoint holds once no endpoint
	// fades in, in a cluster laid out for fade-in; 0 otherwise.
	RingEntries uint64 `json:"ring_entries,omitempty"`
	// Share is the exact fraction of the hash space (or table) it owns.
	Share float64 `json:"share"`
	// Fade is the fraction of its final traffic it receives: 1 unless it is
	// fading in.
	Fade   float64 `json:"fade"`
	Fading bool    `json:"fading,omitempty"`
	// FadeInfo describes the ramp for a tooltip; empty when not fading.
	FadeInfo string `json:"fade_info,omitempty"`
	// Path is the SVG path data of its arcs or runs.
	Path string `json:"path"`
}

func newPage(h *Handler) *page {
	tmpl := template.Must(template.New("page").Funcs(template.FuncMap{
		"pct":     func(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" },
		"percent": func(f float64) string { return strconv.FormatFloat(100*f, 'f', 0, 64) },
		// Slots and entries count from 0: the last of n is n-1.
		"last": func(n int) int { return n - 1 },
	}).ParseFS(assets, "assets/*.html"))
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded directory exists, or the build fails
	}
	return &page{h: h, tmpl: tmpl, static: http.StripPrefix(pageAssetsPath, http.FileServerFS(sub))}
}

// register adds the page's routes to mux.
func (p *page) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", p.index)
	mux.HandleFunc("GET "+pageClustersPath, p.clustersFragment)
	mux.HandleFunc("GET "+pageClientsPath, p.clientsFragment)
	mux.HandleFunc("GET "+ringsPath, p.rings)
	mux.HandleFunc("GET "+pageAssetsPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		p.static.ServeHTTP(w, r)
	})
}

// indexView is the data of the whole page.
type indexView struct {
	Client   snapshot.Kind
	Kinds    []snapshot.Kind
	Key      string
	Ready    bool
	Clusters template.HTML
	Clients  []clientView
	Problems int
	// Replica is the server rendering the page: the clients listed are
	// its own.
	Replica buildinfo.Replica
}

func (p *page) index(w http.ResponseWriter, r *http.Request) {
	kind, err := kindParam(r, snapshot.KindClientlib)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	key := r.URL.Query().Get("key")
	if len(key) > maxKeyBytes {
		key = ""
	}
	rc, err := p.clusters(kind)
	if err != nil {
		p.fail(w, err)
		return
	}
	v := indexView{
		Client: kind, Kinds: snapshot.RingKinds(), Key: key,
		Ready: p.h.opts.Server.Ready(), Clusters: rc.html,
		Clients: clientViews(p.h.opts.Server.Clients(), time.Now()), Problems: len(p.h.opts.Problems()),
		Replica: p.h.opts.Replica,
	}
	p.render(w, "index.html", v, "")
}

// clustersFragment serves the clusters section alone, for the page's
// refresh. Its ETag changes only when the snapshot does, so a refresh of an
// unchanged snapshot costs a 304 and no redraw.
func (p *page) clustersFragment(w http.ResponseWriter, r *http.Request) {
	kind, err := kindParam(r, snapshot.KindClientlib)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rc, err := p.clusters(kind)
	if err != nil {
		p.fail(w, err)
		return
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && inm == rc.etag {
		w.Header().Set("ETag", rc.etag)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	setPageHeaders(w)
	w.Header().Set("ETag", rc.etag)
	_, _ = w.Write([]byte(rc.html))
}

func (p *page) clientsFragment(w http.ResponseWriter, _ *http.Request) {
	p.render(w, "clients", clientViews(p.h.opts.Server.Clients(), time.Now()), "")
}

// rings serves the drawing data as JSON, for tools that draw rings their
// own way.
func (p *page) rings(w http.ResponseWriter, r *http.Request) {
	kind, err := kindParam(r, snapshot.KindClientlib)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if p.h.opts.Server.Current() == nil {
		writeError(w, http.StatusServiceUnavailable, "no snapshot published yet")
		return
	}
	rc, err := p.clusters(kind)
	if err != nil {
		p.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Client   snapshot.Kind `json:"client"`
		Clusters []pageCluster `json:"clusters"`
	}{kind, rc.Clusters})
}

func setPageHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", pageCSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
}

// render executes a template into a buffer first, so a template error
// becomes a 500 instead of half a page.
func (p *page) render(w http.ResponseWriter, name string, data any, etag string) {
	var buf bytes.Buffer
	if err := p.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		p.fail(w, fmt.Errorf("render %s: %w", name, err))
		return
	}
	setPageHeaders(w)
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	_, _ = w.Write(buf.Bytes())
}

func (p *page) fail(w http.ResponseWriter, err error) {
	p.h.opts.Logger.Error("debug page", zap.Error(err))
	http.Error(w, "debug page: "+err.Error(), http.StatusInternalServerError)
}

// clusters returns the clusters section for kind from the current
// snapshot, rendering it on first use.
func (p *page) clusters(kind snapshot.Kind) (*renderedClusters, error) {
	snap := p.h.opts.Server.Current()
	pc := p.cache.Load()
	if pc == nil || pc.snap != snap {
		fresh := &pageCache{snap: snap, byKind: map[snapshot.Kind]*renderedClusters{}}
		if p.cache.CompareAndSwap(pc, fresh) {
			pc = fresh
		} else if pc = p.cache.Load(); pc.snap != snap {
			pc = fresh // raced with a newer snapshot; answer from ours uncached
		}
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if rc, ok := pc.byKind[kind]; ok {
		return rc, nil
	}
	rc := &renderedClusters{Clusters: p.buildClusters(snap, kind)}
	var buf bytes.Buffer
	view := clustersView{Client: kind, Ready: snap != nil, Clusters: rc.Clusters, Predicted: dataplane.Predicted(), Unpredicted: dataplane.Unpredicted()}
	if err := p.tmpl.ExecuteTemplate(&buf, "clusters", view); err != nil {
		return nil, fmt.Errorf("render clusters: %w", err)
	}
	// The template escaped every value, so the bytes are safe to splice
	// into the page as they are.
	rc.html = template.HTML(buf.String())
	rc.etag = `"` + strconv.FormatUint(xxhash.Sum64(buf.Bytes()), 36) + `"`
	pc.byKind[kind] = rc
	return rc, nil
}

// clustersView is the data of the clusters section.
type clustersView struct {
	Client   snapshot.Kind
	Ready    bool
	Clusters []pageCluster
	// Predicted are the implementations each cluster's pick table lists;
	// Unpredicted those it names without a pick, and why.
	Predicted   []dataplane.Implementation
	Unpredicted map[string]string
}

// buildClusters decodes every cluster published to kind, the way that kind
// of data plane does, and draws it.
func (p *page) buildClusters(snap *snapshot.Snapshot, kind snapshot.Kind) []pageCluster {
	if snap == nil {
		return nil
	}
	names := make([]string, 0, len(snap.Kinds[kind][resource.ClusterType]))
	for name := range snap.Kinds[kind][resource.ClusterType] {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]pageCluster, 0, len(names))
	for _, name := range names {
		pc := pageCluster{Name: name, Notes: snap.Notes[name], Endpoints: []pageEndpoint{}}
		c, _ := snap.State.Cluster(name)
		if c != nil {
			pc.HashHeader = c.HashHeader
		}
		configured := configuredWeights(c)
		d, err := p.h.decoded(snap, kind, kind.Dialect(), name)
		if err != nil {
			pc.Err = err.Error()
			out = append(out, pc)
			continue
		}
		dr := draw(d.Ring, len(d.Endpoints))
		pc.Policy, pc.Size, pc.Strip, pc.Segments, pc.Binned = d.Ring.Policy(), dr.Size, dr.Strip, dr.Segments, dr.Binned
		fading := map[string]snapshot.FadeStatus{}
		for _, f := range snap.Fading[name] {
			fading[f.Endpoint] = f
		}
		for i, ep := range d.Endpoints {
			pe := pageEndpoint{Addr: ep.Addr, Color: endpointColor(i), Weight: ep.Weight, ConfiguredWeight: configured[ep.Addr],
				RingEntries: ep.RingEntries, Share: dr.Shares[i], Fade: 1, Path: dr.Paths[i]}
			if f, ok := fading[ep.Addr]; ok {
				pe.Fade, pe.Fading = f.Share, true
				pe.FadeInfo = fmt.Sprintf("fading in since %s over %s, share = (t/%s)^%g",
					f.Start.UTC().Format(time.RFC3339), f.Duration, f.Duration, f.Exponent)
			}
			pc.Endpoints = append(pc.Endpoints, pe)
		}
		pc.WeightsNote = weightsNote(c, d, pc.Size, len(fading) > 0)
		out = append(out, pc)
	}
	return out
}

// clientView is one connected xDS stream as the page shows it.
type clientView struct {
	NodeID, NodeCluster, Kind, Protocol, Peer, UserAgent string
	Age                                                  string
	Types                                                []typeView
	// Implementation names the data plane ("grpc-js 1.14.1"); Encoding says
	// what its kind carries.
	Implementation, Encoding string
	// Compatibility is the worst verdict; Verdicts the clusters that are
	// not ok, with their reasons.
	Compatibility string
	Verdicts      []dataplane.Verdict
	// Unknown are the clusters it asks for that are not published.
	Unknown []server.UnknownName
}

// typeView is the exchange state of one resource type: State is "ack"
// (the last response sent was accepted), "nack" (it was rejected),
// "pending" (no answer yet) or "none" (nothing sent).
type typeView struct {
	Name, State, Text, Title string
}

// typeRank orders resource types as they depend on each other: listeners
// name routes, routes name clusters, clusters name endpoints.
func typeRank(t string) int {
	switch t {
	case "lds":
		return 0
	case "rds":
		return 1
	case "cds":
		return 2
	case "eds":
		return 3
	}
	return 4
}

func clientViews(cs []server.ClientStatus, now time.Time) []clientView {
	out := make([]clientView, 0, len(cs))
	for _, c := range cs {
		v := clientView{
			NodeID: c.NodeID, NodeCluster: c.NodeCluster, Kind: string(c.Kind), Protocol: c.Protocol,
			Peer: c.Peer, UserAgent: c.UserAgent, Age: now.Sub(c.ConnectedAt).Truncate(time.Second).String(),
			Implementation: c.Implementation.UserAgent(), Encoding: c.Encoding, Compatibility: c.Compatibility,
			Unknown: c.UnknownClusters,
		}
		for _, vd := range c.Verdicts {
			if vd.State != dataplane.StateOK {
				v.Verdicts = append(v.Verdicts, vd)
			}
		}
		names := make([]string, 0, len(c.Types))
		for name := range c.Types {
			names = append(names, name)
		}
		slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(typeRank(a), typeRank(b)), cmp.Compare(a, b)) })
		for _, name := range names {
			v.Types = append(v.Types, typeViewOf(name, c.Types[name]))
		}
		out = append(out, v)
	}
	return out
}

func typeViewOf(name string, ts *server.TypeStatus) typeView {
	tv := typeView{Name: name}
	subs := "all"
	if !ts.Wildcard {
		subs = strconv.Itoa(ts.Subscribed)
	}
	switch {
	case ts.LastNack != nil && ts.LastNack.Nonce == ts.SentNonce:
		tv.State, tv.Text = "nack", "NACK "+short(ts.LastNack.Version)
		tv.Title = fmt.Sprintf("rejected version %s at %s (%d NACKs in all); the client keeps its previous config: %s",
			ts.LastNack.Version, ts.LastNack.At.UTC().Format(time.RFC3339), ts.Nacks, ts.LastNack.Message)
	case ts.SentNonce == "":
		tv.State, tv.Text, tv.Title = "none", "nothing sent", "subscribed to "+subs
	case ts.AckedNonce == ts.SentNonce:
		tv.State, tv.Text = "ack", "ACK "+short(ts.AckedVersion)
		tv.Title = fmt.Sprintf("accepted version %s at %s; subscribed to %s; %d NACKs in all",
			ts.AckedVersion, ts.AckedAt.UTC().Format(time.RFC3339), subs, ts.Nacks)
	default:
		tv.State, tv.Text = "pending", "sent "+short(ts.SentVersion)
		tv.Title = fmt.Sprintf("sent version %s at %s, not answered yet; last accepted %q", ts.SentVersion,
			ts.SentAt.UTC().Format(time.RFC3339), ts.AckedVersion)
	}
	return tv
}

// short abbreviates a content version for display; the tooltip has it all.
func short(v string) string {
	if len(v) > 10 {
		return v[:10] + "…"
	}
	return v
}
