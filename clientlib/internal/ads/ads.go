package ads

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"
)

// Handler receives the resources of each response. It is called from the
// stream's receive goroutine, one response at a time.
type Handler interface {
	// Resources is given every resource of a response of typeURL. It
	// applies what it accepts and returns an error naming what it rejects;
	// a non-nil error NACKs the response with that error as error_detail,
	// and the accepted version stays the previous one.
	Resources(typeURL, version string, resources []*anypb.Any) error
	// Connected reports the stream state: true once a response arrived on a
	// stream, false with the reason when a stream ends.
	Connected(up bool, err error)
}

// Config configures a Client.
type Config struct {
	// Conn is the channel to the management server. The Client does not
	// close it.
	Conn grpc.ClientConnInterface
	// Node identifies the client; it is sent on the first request of every
	// stream.
	Node    *corev3.Node
	Handler Handler
	Logger  *zap.Logger
	// BackoffBase and BackoffMax bound the delay between stream attempts:
	// exponential from BackoffBase, capped at BackoffMax, full jitter.
	BackoffBase, BackoffMax time.Duration
	// Types lists the type URLs in the order their requests are sent on a
	// new stream (CDS before EDS, as Envoy does).
	Types []string
}

// typeState is what the client remembers about one resource type across
// streams.
type typeState struct {
	names   []string // subscribed names, sorted
	version string   // last accepted version
	nonce   string   // nonce of the last response on the current stream
	// detail rejects nonce until the NACK is sent.
	detail *status.Status
	// dirty: the type's request must be (re)sent on the current stream. The
	// request is built when it is sent, from the state then, so requests
	// queued meanwhile collapse into the latest.
	dirty bool
	sent  bool // a request went out, or is queued, on the current stream
	// lastSent is the names of the last request sent on the stream, and
	// dropped those of them unsubscribed since. A name dropped and asked
	// for again before the request went out must still reach the server as
	// removed and added, or it would not send the resource again.
	lastSent []string
	dropped  map[string]bool
}

// Client is an ADS state-of-the-world client.
//
// Requests (subscriptions, ACKs, NACKs) are never sent from the receive
// goroutine nor under a lock: each stream has a sender goroutine that
// sends, per type, the latest request. A server that stops reading blocks
// only that goroutine; responses keep being received and applied, and
// callers of Subscribe never wait for the network.
type Client struct {
	cfg Config
	log *zap.Logger

	mu    sync.Mutex // guards types and wake; never held across a Send
	types map[string]*typeState
	// wake nudges the current stream's sender; nil while no stream is up.
	wake chan struct{}

	ignored atomic.Uint64 // responses of types never subscribed to
}

// New returns a Client; Run starts it.
func New(cfg Config) *Client {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = 100 * time.Millisecond
	}
	if cfg.BackoffMax < cfg.BackoffBase {
		cfg.BackoffMax = max(cfg.BackoffBase, 30*time.Second)
	}
	c := &Client{cfg: cfg, log: cfg.Logger, types: make(map[string]*typeState)}
	for _, t := range cfg.Types {
		c.types[t] = &typeState{}
	}
	return c
}

// Ignored counts the responses dropped because their type was never
// subscribed to.
func (c *Client) Ignored() uint64 { return c.ignored.Load() }

// Subscribe replaces the names subscribed for typeURL and, when a stream is
// up, queues the request. It never waits for the network.
func (c *Client) Subscribe(typeURL string, names []string) {
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.types[typeURL]
	if ts == nil {
		ts = &typeState{}
		c.types[typeURL] = ts
	}
	if slices.Equal(ts.names, names) && ts.sent {
		return
	}
	for _, n := range ts.lastSent {
		if _, found := slices.BinarySearch(names, n); !found {
			if ts.dropped == nil {
				ts.dropped = make(map[string]bool)
			}
			ts.dropped[n] = true
		}
	}
	ts.names = names
	c.queueLocked(ts)
}

// queueLocked marks ts's request for sending on the current stream.
func (c *Client) queueLocked(ts *typeState) {
	if c.wake == nil {
		return
	}
	ts.dirty, ts.sent = true, true
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run keeps a stream open until ctx ends, reconnecting with exponential
// backoff and full jitter. The backoff restarts after a stream that received
// at least one response.
func (c *Client) Run(ctx context.Context) {
	attempt := 0
	for ctx.Err() == nil {
		healthy, err := c.runStream(ctx)
		if ctx.Err() != nil {
			return
		}
		c.cfg.Handler.Connected(false, err)
		if healthy {
			attempt = 0
		}
		d := backoff(c.cfg.BackoffBase, c.cfg.BackoffMax, attempt)
		attempt++
		c.log.Info("ADS stream ended, reconnecting", zap.Error(err), zap.Duration("after", d))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// backoff is base*2^attempt capped at maxDelay, with full jitter so that
// clients cut off together do not reconnect together. The doubling stops as
// soon as it would pass maxDelay, so it never overflows, whatever base,
// maxDelay and attempt are.
func backoff(base, maxDelay time.Duration, attempt int) time.Duration {
	maxDelay = max(maxDelay, time.Nanosecond)
	d := min(max(base, time.Nanosecond), maxDelay)
	for range attempt {
		if d > maxDelay/2 {
			d = maxDelay
			break
		}
		d *= 2
	}
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

// runStream runs one stream until it fails. healthy reports whether any
// response arrived on it.
func (c *Client) runStream(ctx context.Context) (healthy bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.cfg.Conn).StreamAggregatedResources(sctx)
	if err != nil {
		return false, fmt.Errorf("open ADS stream: %w", err)
	}
	wake := make(chan struct{}, 1)
	c.mu.Lock()
	c.wake = wake
	// Resubscribe with the last accepted versions, so a server that still
	// has the same resources need not resend them.
	for _, ts := range c.types {
		ts.nonce, ts.detail, ts.sent, ts.dirty = "", nil, false, false
		ts.lastSent, ts.dropped = nil, nil
		if len(ts.names) > 0 {
			c.queueLocked(ts)
		}
	}
	c.mu.Unlock()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		c.sendLoop(sctx, cancel, stream, wake)
	}()
	defer func() {
		// The sender's Send returns once the stream's context ends.
		cancel()
		<-sent
		c.mu.Lock()
		c.wake = nil
		c.mu.Unlock()
	}()

	for {
		resp, err := stream.Recv()
		if err != nil {
			return healthy, fmt.Errorf("receive: %w", err)
		}
		if !healthy {
			healthy = true
			c.cfg.Handler.Connected(true, nil)
		}
		c.handle(resp)
	}
}

// sendLoop sends the queued requests of one stream, CDS before EDS, until
// the stream ends. A failed Send ends the stream.
func (c *Client) sendLoop(ctx context.Context, cancel context.CancelFunc, stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, wake <-chan struct{}) {
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
		for {
			req := c.nextRequest(first)
			if req == nil {
				break
			}
			if err := stream.Send(req); err != nil {
				if !errors.Is(err, context.Canceled) {
					c.log.Debug("send failed", zap.String("type", req.GetTypeUrl()), zap.Error(err))
				}
				cancel()
				return
			}
			first = false
		}
	}
}

// nextRequest takes the first queued request, built from the type's state
// now, or returns nil. The node goes on the first request of a stream only,
// which is all go-control-plane and Envoy servers read.
func (c *Client) nextRequest(first bool) *discoveryv3.DiscoveryRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.order() {
		ts := c.types[t]
		if !ts.dirty {
			continue
		}
		names := ts.names
		if readded := slices.ContainsFunc(names, func(n string) bool { return ts.dropped[n] }); readded {
			// First without the names dropped and asked for again; the
			// full request follows.
			names = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return ts.dropped[n] })
		} else {
			ts.dirty = false
		}
		ts.dropped = nil
		ts.lastSent = names
		req := &discoveryv3.DiscoveryRequest{
			TypeUrl:       t,
			VersionInfo:   ts.version,
			ResourceNames: names,
			ResponseNonce: ts.nonce,
			ErrorDetail:   ts.detail,
		}
		ts.detail = nil
		if first {
			req.Node = c.cfg.Node
		}
		return req
	}
	return nil
}

// order lists the known types, configured ones first in configured order.
func (c *Client) order() []string {
	out := slices.Clone(c.cfg.Types)
	var extra []string
	for t := range c.types {
		if !slices.Contains(out, t) {
			extra = append(extra, t)
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}

// handle applies one response and queues its ACK or NACK. A response of a
// type the client neither configured nor subscribed to is dropped without
// a trace, neither ACKed nor NACKed: the client cannot judge it, and
// keeping any state for it would let a server grow the client's memory
// with every new type URL (grpc-go ignores such responses too).
func (c *Client) handle(resp *discoveryv3.DiscoveryResponse) {
	t := resp.GetTypeUrl()
	c.mu.Lock()
	known := c.types[t] != nil
	c.mu.Unlock()
	if !known {
		if c.ignored.Add(1) == 1 {
			c.log.Warn("ignoring responses of a type never subscribed to (logged once; counted)", zap.String("type", t))
		} else {
			c.log.Debug("ignoring a response of a type never subscribed to", zap.String("type", t))
		}
		return
	}
	var herr error
	for _, r := range resp.GetResources() {
		if r.GetTypeUrl() != t {
			herr = fmt.Errorf("resource of type %s in a %s response", r.GetTypeUrl(), t)
			break
		}
	}
	if herr == nil {
		herr = c.cfg.Handler.Resources(t, resp.GetVersionInfo(), resp.GetResources())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.types[t]
	ts.nonce = resp.GetNonce()
	if herr != nil {
		c.log.Warn("NACK", zap.String("type", t), zap.String("version", resp.GetVersionInfo()), zap.Error(herr))
		ts.detail = &status.Status{Code: int32(codes.InvalidArgument), Message: herr.Error()}
	} else {
		ts.version, ts.detail = resp.GetVersionInfo(), nil
	}
	c.queueLocked(ts)
}
