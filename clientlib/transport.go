package clientlib

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
)

// Transport is an http.RoundTripper that sends each request to the
// endpoint its key maps to, through Balancer.Do: bounded load, freeze
// avoidance, shedding and the retry on a different endpoint all apply.
//
// The request's URL host is replaced by the endpoint's address and its
// scheme by the endpoint's ("https" for https endpoints, else "http"; an
// h2c endpoint needs a Base that speaks HTTP/2 over cleartext). The Host
// header is left as the request set it.
//
// A call counts as in flight until the response headers arrive. Only
// transport errors are failures; the status code is the caller's to judge.
// Requests are retried only when that is safe: an idempotent method and a
// body that can be replayed (none, or GetBody set).
type Transport struct {
	// Balancer routes the requests; required.
	Balancer *Balancer
	// Key returns the request's hash key. ok false means the request has
	// none and goes to a random endpoint, as Envoy routes a request its
	// hash policy finds no value in. Required; see HeaderKey.
	Key func(r *http.Request) (key string, ok bool)
	// Base performs the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
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
	if t.Balancer == nil || t.Key == nil {
		closeBody(req)
		return nil, fmt.Errorf("clientlib: Transport needs a Balancer and a Key")
	}
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
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	retry := t.Balancer.opts.retry && replayable && idempotent(req)

	var resp *http.Response
	attempt := 0
	err := t.Balancer.do(req.Context(), h, retry, func(ctx context.Context, ep Endpoint) error {
		out := req.Clone(ctx)
		if attempt > 0 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return fmt.Errorf("replay request body: %w", err)
			}
			out.Body = body
		}
		attempt++
		out.URL.Host = ep.Addr
		out.URL.Scheme = "http"
		if ep.Scheme() == "https" {
			out.URL.Scheme = "https"
		}
		var err error
		resp, err = base.RoundTrip(out)
		return err
	})
	if attempt == 0 {
		closeBody(req) // no RoundTrip took it
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
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
