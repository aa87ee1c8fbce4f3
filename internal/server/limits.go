package server

import (
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Limits bound what one client can cost the server. A client is one gRPC
// connection: a proxy opens one (an Envoy without ADS multiplexes its
// per-cluster streams on it), and nothing else a client sends (node ID,
// peer address behind NAT) identifies it reliably. Zero disables a limit.
//
// A client over a limit is refused with ResourceExhausted naming the flag;
// its other streams, and other clients, carry on. Every refusal is counted
// in ringxds_xds_limit_hits_total{limit} and shown on /debug/clients.
type Limits struct {
	// StreamsPerConnection caps the concurrent xDS streams of one
	// connection. An Envoy without ADS opens one EDS stream per cluster.
	StreamsPerConnection int
	// NamesPerStream caps the resource names one stream subscribes to,
	// all types together; NamesPerConnection caps them over all streams
	// of a connection.
	NamesPerStream, NamesPerConnection int
	// RequestsPerSecond and RequestBurst are each stream's token bucket:
	// a client answers every response, so a well-behaved stream sends
	// about one request per response.
	RequestsPerSecond float64
	RequestBurst      int
	// MaxMessageBytes caps one request's size (grpc.MaxRecvMsgSize).
	MaxMessageBytes int
	// ConnectionsPerSecond and ConnectionBurst limit new connections. A
	// new connection over the rate waits up to a second for a token (a
	// reconnect storm is smoothed); one that would wait longer is refused.
	ConnectionsPerSecond float64
	ConnectionBurst      int
}

// DefaultLimits are sized for an ADS Envoy subscribing to 10,000 clusters,
// and an Envoy without ADS (one EDS stream per cluster) holding up to
// about 1,000: each stream costs the server some 90 KB, so 10,000 streams
// on one connection would cost about 900 MB. Larger non-ADS Envoys need
// --max-streams-per-connection raised.
func DefaultLimits() Limits {
	return Limits{
		StreamsPerConnection: 1024,
		NamesPerStream:       25000,
		NamesPerConnection:   50000,
		RequestsPerSecond:    100,
		RequestBurst:         1000,
		MaxMessageBytes:      4 << 20,
		ConnectionsPerSecond: 500,
		ConnectionBurst:      1000,
	}
}

// Limit names: the label of ringxds_xds_limit_hits_total, a fixed set.
const (
	LimitStreamsPerConnection = "streams_per_connection"
	LimitNamesPerStream       = "names_per_stream"
	LimitNamesPerConnection   = "names_per_connection"
	LimitRequestRate          = "request_rate"
	LimitMessageSize          = "message_size"
	LimitConnectionRate       = "connection_rate"
	// LimitNameLength is not a flag: a resource name over 1 KiB.
	LimitNameLength = "name_length"
	// LimitUnknownType is not a flag: a request for a type URL that is no
	// xDS resource type, refused with InvalidArgument.
	LimitUnknownType = "unknown_type"
)

// limitFlags are the xds-server flags that set each limit, named in the
// refusals so an operator knows what to raise.
var limitFlags = map[string]string{
	LimitStreamsPerConnection: "max-streams-per-connection",
	LimitNamesPerStream:       "max-names-per-stream",
	LimitNamesPerConnection:   "max-names-per-connection",
	LimitRequestRate:          "max-requests-per-second",
	LimitMessageSize:          "max-message-bytes",
	LimitConnectionRate:       "max-new-connections-per-second",
}

var limitNames = []string{LimitStreamsPerConnection, LimitNamesPerStream, LimitNamesPerConnection,
	LimitRequestRate, LimitMessageSize, LimitConnectionRate, LimitNameLength, LimitUnknownType}

// LimitHit is how often one limit refused a connection's requests or
// streams, and the last refusal.
type LimitHit struct {
	Limit   string    `json:"limit"`
	Flag    string    `json:"flag,omitempty"`
	Count   int       `json:"count"`
	Last    time.Time `json:"last"`
	Message string    `json:"message"`
}

// knownTypes are the xDS resource types a client may legitimately ask for.
// ringxds serves four; a request for the others is held without an answer
// (an Envoy asking for secrets over ADS) and keeps no state. Any other type
// URL is refused: each would otherwise open a watch on the stream, and
// go-control-plane's cost per request grows with the number of watches.
var knownTypes = map[string]bool{
	resource.ClusterType: true, resource.EndpointType: true, resource.ListenerType: true, resource.RouteType: true,
	resource.ScopedRouteType: true, resource.VirtualHostType: true, resource.SecretType: true,
	resource.ExtensionConfigType: true, resource.RuntimeType: true, resource.ThriftRouteType: true,
	resource.RateLimitConfigType: true,
}

func servedType(typeURL string) bool {
	switch typeURL {
	case resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType:
		return true
	}
	return false
}

// RefusedConnection is a connection the server refused something on,
// whether or not any of its streams is still open: a client whose only
// stream was refused has no other trace on /debug/clients.
type RefusedConnection struct {
	Connection uint64 `json:"connection"`
	// Peer is the client's address, when the connection was tagged.
	Peer string `json:"peer,omitempty"`
	// Node is the first node ID a refused request named, if any.
	Node      string     `json:"node,omitempty"`
	LimitHits []LimitHit `json:"limit_hits"`
}

// maxRefusedRecords bounds the refused connections remembered for
// /debug/clients: a flood of refusals must not grow the record.
const maxRefusedRecords = 64

// connState is what the server knows of one gRPC connection.
type connState struct {
	id      uint64
	peer    string
	streams atomic.Int64
	names   atomic.Int64
	// refused: the connection arrived over the connection rate; every
	// stream on it is refused and it is closed soon after.
	refused *refusedConn

	mu        sync.Mutex
	unary     *tokenBucket
	hits      map[string]*LimitHit
	loggedAt  map[string]time.Time
	unlogged  map[string]int
	firstNode string
}

type connKey struct{}

func connFrom(ctx context.Context) *connState {
	cs, _ := ctx.Value(connKey{}).(*connState)
	return cs
}

func (cs *connState) limitHits() []LimitHit {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.hits) == 0 {
		return nil
	}
	out := make([]LimitHit, 0, len(cs.hits))
	for _, name := range limitNames {
		if h := cs.hits[name]; h != nil {
			out = append(out, *h)
		}
	}
	return out
}

// limiter enforces the Limits and records every refusal.
type limiter struct {
	limits  Limits
	log     *zap.Logger
	metrics *metrics
	now     func() time.Time
	nextID  atomic.Uint64

	// refused holds the connections over the connection rate, by remote
	// address, until gRPC has tagged them.
	refused sync.Map

	// recent holds the last maxRefusedRecords connections refused
	// anything, oldest first.
	recentMu sync.Mutex
	recent   []*connState
}

// remember records cs among the recently refused connections.
func (l *limiter) remember(cs *connState) {
	l.recentMu.Lock()
	defer l.recentMu.Unlock()
	if i := slices.Index(l.recent, cs); i >= 0 {
		l.recent = slices.Delete(l.recent, i, i+1)
	} else if len(l.recent) >= maxRefusedRecords {
		l.recent = slices.Delete(l.recent, 0, 1)
	}
	l.recent = append(l.recent, cs)
}

// refusedConnections lists the recently refused connections, the most
// recent first.
func (l *limiter) refusedConnections() []RefusedConnection {
	l.recentMu.Lock()
	recent := slices.Clone(l.recent)
	l.recentMu.Unlock()
	out := make([]RefusedConnection, 0, len(recent))
	for i := len(recent) - 1; i >= 0; i-- {
		cs := recent[i]
		hits := cs.limitHits()
		cs.mu.Lock()
		node := cs.firstNode
		cs.mu.Unlock()
		out = append(out, RefusedConnection{Connection: cs.id, Peer: cs.peer, Node: node, LimitHits: hits})
	}
	return out
}

func newLimiter(l Limits, log *zap.Logger, m *metrics, now func() time.Time) *limiter {
	return &limiter{limits: l, log: log, metrics: m, now: now}
}

// newConn is the state of a connection; without the stats handler (a
// gRPC server built without GRPCServerOptions) each stream gets its own.
func (l *limiter) newConn() *connState {
	return &connState{id: l.nextID.Add(1)}
}

// refuse counts a refusal on cs and returns the status the client gets.
func (l *limiter) refuse(cs *connState, limit string, code codes.Code, node, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if flag := limitFlags[limit]; flag != "" {
		msg = fmt.Sprintf("ringxds limit --%s: %s", flag, msg)
	} else {
		msg = "ringxds: " + msg
	}
	l.metrics.limitHits.WithLabelValues(limit).Inc()
	now := l.now()
	cs.mu.Lock()
	if cs.hits == nil {
		cs.hits, cs.loggedAt, cs.unlogged = make(map[string]*LimitHit, 2), make(map[string]time.Time, 2), make(map[string]int, 2)
	}
	h := cs.hits[limit]
	if h == nil {
		h = &LimitHit{Limit: limit, Flag: limitFlags[limit]}
		cs.hits[limit] = h
	}
	h.Count++
	h.Last, h.Message = now, msg
	if node != "" && cs.firstNode == "" {
		cs.firstNode = node
	}
	node = cs.firstNode
	logIt := cs.loggedAt[limit].IsZero() || now.Sub(cs.loggedAt[limit]) >= nackLogEvery
	skipped := cs.unlogged[limit]
	if logIt {
		cs.loggedAt[limit], cs.unlogged[limit] = now, 0
	} else {
		cs.unlogged[limit]++
	}
	cs.mu.Unlock()
	l.remember(cs)
	if logIt {
		l.log.Warn("xDS client over a limit; refused", zap.Uint64("connection", cs.id), zap.String("node", node),
			zap.String("limit", limit), zap.String("reason", msg), zap.Int("refusals_since_last_log", skipped))
	}
	return status.Error(code, msg)
}

// GRPCServerOptions are the gRPC server options that enforce the
// per-connection limits: pass them in GRPCOptions.ServerOptions.
func (s *Server) GRPCServerOptions() []grpc.ServerOption {
	l := s.limiter
	opts := []grpc.ServerOption{
		grpc.StatsHandler(connTagger{l}),
		grpc.ChainStreamInterceptor(l.streamInterceptor),
		grpc.ChainUnaryInterceptor(l.unaryInterceptor),
	}
	if n := l.limits.StreamsPerConnection; n > 0 {
		// The HTTP/2 limit sits above ours, so a client opening more is
		// told why on the first streams over it; past those, grpc-go
		// clients wait for a free stream and others are reset.
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(min(int64(n)+streamHeadroom, math.MaxUint32))))
	}
	if n := l.limits.MaxMessageBytes; n > 0 {
		// gRPC answers a message over its own limit itself, without
		// naming the flag; it is set at twice ours, and the stream
		// refuses what lies between (limitedStream).
		opts = append(opts, grpc.MaxRecvMsgSize(int(min(2*int64(n), math.MaxInt32))))
	} else {
		opts = append(opts, grpc.MaxRecvMsgSize(math.MaxInt32))
	}
	return opts
}

// streamHeadroom is how many streams over --max-streams-per-connection
// HTTP/2 lets in for the server to refuse with a status; each refusal is
// held refusalHold. A few are enough to tell a client why; each costs the
// server a stream a second, and at 64 a client opening streams without end
// raised 200 others' p99 by about half on a quiet 2-core machine.
const (
	streamHeadroom = 8
	refusalHold    = time.Second
)

// connTagger gives every connection its connState.
type connTagger struct{ l *limiter }

func (t connTagger) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	cs := t.l.newConn()
	if info.RemoteAddr != nil {
		cs.peer = info.RemoteAddr.String()
		if rc, ok := t.l.refused.Load(info.RemoteAddr.String()); ok {
			cs.refused = rc.(*refusedConn)
		}
	}
	return context.WithValue(ctx, connKey{}, cs)
}

func (connTagger) HandleConn(context.Context, stats.ConnStats)                     {}
func (connTagger) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (connTagger) HandleRPC(context.Context, stats.RPCStats)                       {}

// streamInterceptor refuses streams over the per-connection limit or on a
// connection over the connection rate, and names the message size limit
// when a request exceeds it.
//
// Its frame stays on the stack of every stream's handler for the stream's
// life, under go-control-plane's loop: the checks are in admitStream, so
// that this frame is small enough for the runtime to shrink a handler's
// stack back from 16 KB to 8 KB once a push that grew it is done.
func (l *limiter) streamInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ls, err := l.admitStream(ss)
	if ls == nil {
		if err != nil {
			return err
		}
		return handler(srv, ss)
	}
	// No defer: a panicking handler ends the process (gRPC does not
	// recover it), and a defer record would sit in this frame.
	err = handler(srv, ls)
	ls.cs.streams.Add(-1)
	if ls.err != nil {
		return ls.err
	}
	return err
}

// admitStream returns the stream to hand the handler, counted on its
// connection, or the status refusing it. Neither, for a stream on no
// connection the limiter tracks.
//
//go:noinline
func (l *limiter) admitStream(ss grpc.ServerStream) (*limitedStream, error) {
	cs := connFrom(ss.Context())
	if cs == nil {
		return nil, nil
	}
	if rc := cs.refused; rc != nil {
		// Let the status go out, then close.
		time.AfterFunc(refusedLinger, func() { _ = rc.Close() })
		return nil, l.refuse(cs, LimitConnectionRate, codes.ResourceExhausted, "",
			"more than %g new connections per second (burst %d); retry with backoff", l.limits.ConnectionsPerSecond, l.limits.ConnectionBurst)
	}
	n := cs.streams.Add(1)
	if max := l.limits.StreamsPerConnection; max > 0 && n > int64(max) {
		cs.streams.Add(-1)
		err := l.refuse(cs, LimitStreamsPerConnection, codes.ResourceExhausted, "",
			"this connection already has %d concurrent streams (limit %d)", n-1, max)
		// Hold the refusal: the refused streams fill the HTTP/2
		// headroom, so a client opening streams without end gets at most
		// streamHeadroom refusals a second per connection, not as many
		// as it can send.
		select {
		case <-ss.Context().Done():
		case <-time.After(refusalHold):
		}
		return nil, err
	}
	return &limitedStream{ServerStream: ss, l: l, cs: cs}, nil
}

// unaryInterceptor holds unary calls (CSDS FetchClientStatus, the only one
// on the port) to the limits a stream's requests are held to: the
// connection rate, the message size, and the request rate, counted per
// connection since a unary call has no stream.
func (l *limiter) unaryInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	cs := connFrom(ctx)
	if cs == nil {
		return handler(ctx, req)
	}
	if rc := cs.refused; rc != nil {
		time.AfterFunc(refusedLinger, func() { _ = rc.Close() })
		return nil, l.refuse(cs, LimitConnectionRate, codes.ResourceExhausted, "",
			"more than %g new connections per second (burst %d); retry with backoff", l.limits.ConnectionsPerSecond, l.limits.ConnectionBurst)
	}
	if pm, ok := req.(proto.Message); ok && l.limits.MaxMessageBytes > 0 {
		if n := proto.Size(pm); n > l.limits.MaxMessageBytes {
			return nil, l.refuse(cs, LimitMessageSize, codes.ResourceExhausted, "", "a request of %d bytes (limit %d)", n, l.limits.MaxMessageBytes)
		}
	}
	if rate := l.limits.RequestsPerSecond; rate > 0 {
		cs.mu.Lock()
		if cs.unary == nil {
			cs.unary = newTokenBucket(rate, max(l.limits.RequestBurst, 1), l.now())
		}
		ok := cs.unary.take(l.now())
		cs.mu.Unlock()
		if !ok {
			return nil, l.refuse(cs, LimitRequestRate, codes.ResourceExhausted, "",
				"more than %g unary requests per second on one connection (burst %d)", rate, l.limits.RequestBurst)
		}
	}
	return handler(ctx, req)
}

// limitedStream refuses a request over --max-message-bytes, and makes
// that the stream's status (go-control-plane ends a stream whose Recv
// fails without an error of its own). gRPC refuses one over twice the
// limit itself, with ResourceExhausted naming the sizes; that is counted.
type limitedStream struct {
	grpc.ServerStream
	l   *limiter
	cs  *connState
	err error
}

func (s *limitedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	max := s.l.limits.MaxMessageBytes
	switch {
	case max <= 0:
	case err == nil:
		if pm, ok := m.(proto.Message); ok {
			if n := proto.Size(pm); n > max {
				s.err = s.l.refuse(s.cs, LimitMessageSize, codes.ResourceExhausted, "",
					"a request of %d bytes (limit %d)", n, max)
				return s.err
			}
		}
	case status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "larger than max"):
		_ = s.l.refuse(s.cs, LimitMessageSize, codes.ResourceExhausted, "", "%s", status.Convert(err).Message())
	}
	return err
}

// refusedLinger bounds how long a connection over the rate is kept for
// its first stream to be told why; maxRefusedConns bounds how many such
// connections are kept at once (beyond, they are closed at once).
const (
	refusedLinger   = time.Second
	maxRefusedConns = 64
)

// Listen wraps an xDS listener with the connection rate limit.
func (s *Server) Listen(inner net.Listener) net.Listener {
	l := s.limiter
	if l.limits.ConnectionsPerSecond <= 0 {
		return inner
	}
	return &rateListener{Listener: inner, l: l,
		bucket:  newTokenBucket(l.limits.ConnectionsPerSecond, max(l.limits.ConnectionBurst, 1), l.now()),
		ready:   make(chan acceptResult),
		closed:  make(chan struct{}),
		waiting: make(map[net.Conn]*time.Timer)}
}

// rateListener admits new connections at the configured rate. A connection
// over the rate that gets a token within connWait is handed to gRPC once
// its token is due, as the connection it is: gRPC reads a bare TCP
// connection through its pooled read buffers, and any wrapper would cost
// that connection a 32 KB buffer of its own for its whole life (after a
// reconnect storm, most of them). Accepting goes on meanwhile, so what
// comes after is judged on time.
type rateListener struct {
	net.Listener
	l       *limiter
	mu      sync.Mutex
	bucket  *tokenBucket
	pending atomic.Int32

	start  sync.Once
	ready  chan acceptResult
	closed chan struct{}
	// waiting holds the connections waiting for their token, closed with
	// the listener.
	waiting   map[net.Conn]*time.Timer
	closeOnce sync.Once
}

type acceptResult struct {
	conn net.Conn
	err  error
}

// connWait is how long a new connection over the rate may wait for a token.
const connWait = time.Second

func (rl *rateListener) Accept() (net.Conn, error) {
	rl.start.Do(func() { go rl.acceptLoop() })
	select {
	case r := <-rl.ready:
		return r.conn, r.err
	case <-rl.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes the connections still waiting for a
// token.
func (rl *rateListener) Close() error {
	err := rl.Listener.Close()
	rl.closeOnce.Do(func() {
		close(rl.closed)
		rl.mu.Lock()
		defer rl.mu.Unlock()
		for c, t := range rl.waiting {
			t.Stop()
			_ = c.Close()
		}
		clear(rl.waiting)
	})
	return err
}

// acceptLoop accepts connections and hands each to Accept when its token
// is due. Errors are handed on likewise; a temporary one (EMFILE in a
// storm) does not end the loop, as gRPC's Serve retries it and calls
// Accept again.
func (rl *rateListener) acceptLoop() {
	for {
		c, err := rl.Listener.Accept()
		if err != nil {
			rl.hand(acceptResult{err: err})
			if te, ok := err.(interface{ Temporary() bool }); ok && te.Temporary() {
				continue
			}
			return
		}
		if conn := rl.admit(c); conn != nil {
			rl.hand(acceptResult{conn: conn})
		}
	}
}

// admit returns c to serve now, or nil for a connection that waits for its
// token (handed on later) or is closed over the limits.
func (rl *rateListener) admit(c net.Conn) net.Conn {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	wait, ok := rl.bucket.reserve(rl.l.now(), connWait)
	if ok {
		if wait <= 0 {
			return c
		}
		rl.waiting[c] = time.AfterFunc(wait, func() {
			rl.mu.Lock()
			_, still := rl.waiting[c]
			delete(rl.waiting, c)
			rl.mu.Unlock()
			if still {
				rl.hand(acceptResult{conn: c})
			}
		})
		return nil
	}
	if rl.pending.Load() >= maxRefusedConns {
		// Too many refused connections waiting to be told: close
		// this one without a word.
		rl.l.metrics.limitHits.WithLabelValues(LimitConnectionRate).Inc()
		_ = c.Close()
		return nil
	}
	rl.pending.Add(1)
	rc := &refusedConn{Conn: c, key: c.RemoteAddr().String(), rl: rl}
	rl.l.refused.Store(rc.key, rc)
	rc.timer = time.AfterFunc(refusedLinger, func() { _ = rc.Close() })
	return rc
}

// hand gives r to Accept, or closes its connection once the listener is
// closed.
func (rl *rateListener) hand(r acceptResult) {
	select {
	case rl.ready <- r:
	case <-rl.closed:
		if r.conn != nil {
			_ = r.conn.Close()
		}
	}
}

// refusedConn is a connection over the rate, served only to be refused.
type refusedConn struct {
	net.Conn
	key   string
	rl    *rateListener
	timer *time.Timer
	once  sync.Once
}

func (c *refusedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.rl.l.refused.CompareAndDelete(c.key, c)
		c.rl.pending.Add(-1)
		if c.timer != nil {
			c.timer.Stop()
		}
	})
	return err
}

// tokenBucket is a rate limiter; callers hold their own lock.
type tokenBucket struct {
	rate   float64
	burst  float64
	tokens float64
	at     time.Time
}

func newTokenBucket(rate float64, burst int, now time.Time) *tokenBucket {
	return &tokenBucket{rate: rate, burst: float64(burst), tokens: float64(burst), at: now}
}

func (b *tokenBucket) refill(now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(b.burst, b.tokens+d.Seconds()*b.rate)
		b.at = now
	}
}

// take spends a token if there is one.
func (b *tokenBucket) take(now time.Time) bool {
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// reserve spends a token that may be up to maxWait away and returns how
// long to wait for it; false, and nothing spent, if it is further.
func (b *tokenBucket) reserve(now time.Time, maxWait time.Duration) (time.Duration, bool) {
	b.refill(now)
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	wait := time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
	if wait > maxWait {
		return 0, false
	}
	b.tokens--
	return wait, true
}
