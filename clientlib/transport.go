package clientlib

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Transport is an http.RoundTripper that sends each request to the
// endpoint its key maps to, through the balancer: bounded load, freeze
// avoidance, ejection, shedding and the retry on a different endpoint all
// apply.
//
// The request's URL host is replaced by the endpoint's address and its
// scheme by the endpoint's ("https" for https endpoints, else "http"; an
// h2c endpoint needs a Base that speaks HTTP/2 over cleartext). The Host
// header is left as the request set it.
//
// A call counts as in flight until its response body is read to the end or
// closed, so a backend that sends headers at once and then stalls is seen
// as busy; reading the body is progress, so a long download is not taken
// for a frozen endpoint. Long-lived streams (Streaming) end with their
// headers. Close every response body, as net/http requires:
// until then its call holds a place in the endpoint's load. The slot under
// the balancer's in-flight cap is freed when the headers arrive.
//
// Transport errors and failed responses (Failed) are the endpoint's
// failures and count towards its ejection. A failed response is returned
// as it is, not retried. A transport error is retried on another endpoint
// when that is safe: always when the request never reached its endpoint
// (ConnectFailed), and for any transport error when the method is
// idempotent; in both cases the body must be replayable (none, or GetBody
// set).
type Transport struct {
	// Balancer routes the requests; required.
	Balancer *Balancer
	// Key returns the request's hash key. ok false means the request has
	// none and goes to a random endpoint, as Envoy routes a request its
	// hash policy finds no value in. Required; see HeaderKey.
	Key func(r *http.Request) (key string, ok bool)
	// Base performs the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Failed reports whether a response says its endpoint failed. Nil means
	// a 5xx status, as Envoy's outlier detection counts consecutive 5xx; a
	// 4xx is the request's fault, not the endpoint's.
	Failed func(*http.Response) bool
	// Streaming reports whether a response is a long-lived stream (server-
	// sent events, a long poll, a watch), whose call ends with its headers:
	// held open, it would count as load on its endpoint for as long as it
	// lasts, as an open stream counts as an active request in Envoy, and
	// move the endpoint's keys elsewhere. Nil means a text/event-stream
	// response.
	Streaming func(*http.Response) bool
}

// HeaderKey keys requests by the value of header name, as Envoy's and the
// gRPC clients' header hash policy does for a single value. Several values
// are joined with "," as the gRPC clients join them; Envoy hashes them
// another way (sorted, chained), so send the hash header once.
func HeaderKey(name string) func(*http.Request) (string, bool) {
	canonical := http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, bool) {
		switch v := r.Header[canonical]; len(v) {
		case 0:
			return "", false
		case 1:
			return v[0], true
		default:
			return strings.Join(v, ","), true
		}
	}
}

// RoundTrip implements http.RoundTripper. As the contract asks, it closes
// the request body on every path, also when no attempt was made (the call
// was shed, or its context ended while it waited).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch {
	case t.Balancer == nil || t.Key == nil:
		closeBody(req)
		return nil, fmt.Errorf("clientlib: Transport needs a Balancer and a Key")
	case t.Balancer.released.Load():
		closeBody(req)
		return nil, t.Balancer.closedError()
	}
	b := t.Balancer.balancer
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	var h uint64
	if key, ok := t.Key(req); ok {
		h = hashKey(key)
	} else {
		h = rand.Uint64()
	}
	var resp *http.Response
	attempts := 0
	err := b.do(req.Context(), h, t.retryPolicy(req), func(ctx context.Context, s *ringState, i int) (outcome, error) {
		out := req.Clone(ctx)
		if attempts > 0 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return abandoned, fmt.Errorf("replay request body: %w", err)
			}
			out.Body = body
		}
		attempts++
		out.URL.Host = s.eps[i].Addr
		out.URL.Scheme = "http"
		if s.eps[i].Scheme() == "https" {
			out.URL.Scheme = "https"
		}
		var o outcome
		var err error
		resp, o, err = t.send(base, b.begin(s, i), out)
		return o, err
	})
	if attempts == 0 {
		closeBody(req) // no RoundTrip took it
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// retryPolicy is which transport errors of req may be retried elsewhere,
// nil for none.
func (t *Transport) retryPolicy(req *http.Request) func(error) bool {
	opts := t.Balancer.opts
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	switch {
	case !opts.retry || !replayable:
		return nil
	case !idempotent(req):
		return ConnectFailed // never sent: safe for any method
	case opts.retryIf != nil:
		return opts.retryIf
	}
	return anyError
}

// send performs one attempt, recorded by rec. A successful response's body
// carries the record until it is read or closed.
func (t *Transport) send(base http.RoundTripper, rec callRecord, out *http.Request) (resp *http.Response, o outcome, err error) {
	o = abandoned // a panicking Base says nothing about the endpoint
	held := false
	defer func() {
		if !held {
			rec.finish(o)
		}
	}()
	resp, err = base.RoundTrip(out)
	switch {
	case err != nil:
		return nil, rec.outcome(out.Context(), err), err
	case t.failed(resp):
		return resp, failed, nil
	case !t.holdsBody(out, resp):
		return resp, answered, nil
	}
	held = true
	resp.Body = &heldBody{body: resp.Body, rec: rec, ctx: out.Context()}
	return resp, answered, nil
}

// holdsBody reports whether the call lasts until resp's body is done: not
// for a response without a body (HTTP/2 has its own empty body type, so
// the length and method say it), an upgraded connection, which is the
// caller's to keep, or a long-lived stream.
func (t *Transport) holdsBody(req *http.Request, resp *http.Response) bool {
	switch {
	case resp.Body == nil || resp.Body == http.NoBody || resp.ContentLength == 0 || req.Method == http.MethodHead:
		return false
	case resp.StatusCode == http.StatusSwitchingProtocols:
		return false
	case t.Streaming != nil:
		return !t.Streaming(resp)
	}
	return !isEventStream(resp)
}

func isEventStream(resp *http.Response) bool {
	mediaType, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(mediaType), "text/event-stream")
}

func (t *Transport) failed(resp *http.Response) bool {
	if t.Failed != nil {
		return t.Failed(resp)
	}
	return resp.StatusCode >= 500
}

// heldBody is a response body whose call stays in flight until it is read
// to the end, fails or is closed.
type heldBody struct {
	body  io.ReadCloser
	rec   callRecord
	ctx   context.Context
	ended atomic.Bool
}

func (hb *heldBody) Read(p []byte) (int, error) {
	n, err := hb.body.Read(p)
	if n > 0 {
		hb.rec.st.progress(time.Now().UnixNano())
	}
	switch {
	case err == io.EOF:
		hb.end(answered)
	case err != nil:
		hb.end(hb.rec.outcome(hb.ctx, err))
	}
	return n, err
}

// Close ends the call as answered unless a read failed first: a caller
// that stops reading early (a JSON decoder leaves the trailing newline)
// got its answer.
func (hb *heldBody) Close() error {
	err := hb.body.Close()
	hb.end(answered)
	return err
}

func (hb *heldBody) end(o outcome) {
	if hb.ended.CompareAndSwap(false, true) {
		hb.rec.finish(o)
	}
}

// CloseIdleConnections closes the idle connections of the base transport,
// so http.Client.CloseIdleConnections reaches them.
func (t *Transport) CloseIdleConnections() {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if c, ok := base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// idempotent is net/http's rule for retrying a request on another
// connection (transport.go, isReplayable).
func idempotent(r *http.Request) bool {
	switch r.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, hasKey := r.Header["Idempotency-Key"]
	_, hasXKey := r.Header["X-Idempotency-Key"]
	return hasKey || hasXKey
}
