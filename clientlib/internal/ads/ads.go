package ads

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
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
	sent    bool     // a request went out on the current stream
}

// Client is an ADS state-of-the-world client.
type Client struct {
	cfg Config
	log *zap.Logger

	mu     sync.Mutex // guards types, stream and serializes Send
	types  map[string]*typeState
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
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

// Subscribe replaces the names subscribed for typeURL and, when a stream is
// up, sends the request at once.
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
	ts.names = names
	if c.stream != nil {
		c.sendLocked(typeURL, ts, "", nil)
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
	c.mu.Lock()
	c.stream = stream
	for _, ts := range c.types {
		ts.nonce, ts.sent = "", false
	}
	// Resubscribe with the last accepted versions, so a server that still
	// has the same resources need not resend them.
	for _, t := range c.order() {
		if ts := c.types[t]; len(ts.names) > 0 {
			c.sendLocked(t, ts, "", nil)
		}
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.stream = nil
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

func (c *Client) handle(resp *discoveryv3.DiscoveryResponse) {
	t := resp.GetTypeUrl()
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
	if ts == nil {
		// Never subscribed: ACK so the server stops waiting, apply nothing.
		ts = &typeState{}
		c.types[t] = ts
	}
	ts.nonce = resp.GetNonce()
	if herr != nil {
		c.log.Warn("NACK", zap.String("type", t), zap.String("version", resp.GetVersionInfo()), zap.Error(herr))
		c.sendLocked(t, ts, resp.GetNonce(), &status.Status{Code: int32(codes.InvalidArgument), Message: herr.Error()})
		return
	}
	ts.version = resp.GetVersionInfo()
	c.sendLocked(t, ts, resp.GetNonce(), nil)
}

// sendLocked sends the current subscription of t, acknowledging nonce (or
// rejecting it when detail is set). The node goes on the first request of a
// stream only, which is all go-control-plane and Envoy servers read.
func (c *Client) sendLocked(t string, ts *typeState, nonce string, detail *status.Status) {
	if c.stream == nil {
		return
	}
	req := &discoveryv3.DiscoveryRequest{
		TypeUrl:       t,
		VersionInfo:   ts.version,
		ResourceNames: ts.names,
		ResponseNonce: nonce,
		ErrorDetail:   detail,
	}
	if nonce == "" {
		req.ResponseNonce = ts.nonce
	}
	if !c.anySentLocked() {
		req.Node = c.cfg.Node
	}
	ts.sent = true
	if err := c.stream.Send(req); err != nil && !errors.Is(err, context.Canceled) {
		// The receive loop sees the broken stream and reconnects.
		c.log.Debug("send failed", zap.String("type", t), zap.Error(err))
	}
}

func (c *Client) anySentLocked() bool {
	n := 0
	for _, ts := range c.types {
		if ts.sent {
			n++
		}
	}
	return n > 0
}
