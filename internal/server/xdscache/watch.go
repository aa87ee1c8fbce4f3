package xdscache

import (
	"context"
	"maps"
	"strconv"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// watch is one stream's open request for one type: SotW or delta.
type watch struct {
	sub      cache.Subscription
	delta    bool
	sotwOut  chan cache.Response
	deltaOut chan cache.DeltaResponse
	// settled: when last looked at, the client held every subscribed
	// resource at its current version and nothing else. Until the stream
	// changes the subscription, which it does only after cancelling the
	// watch, only the names an update modifies can unsettle it.
	settled bool
}

// respond sends w what its client lacks, and reports whether it sent
// anything. Called with c.mu held; the stream's channel always has room for
// one response per type, so the send does not block.
func (c *Cache) respond(w *watch, modified map[string]struct{}, replyEvenIfEmpty bool) bool {
	delta := w.delta
	var changed []*entry
	var removed []string
	if w.settled && modified != nil {
		changed, removed = c.changesAmong(w.sub, modified, delta)
	} else {
		changed, removed = c.changes(w.sub, delta)
	}
	w.settled = len(changed) == 0 && len(removed) == 0
	if w.settled && !replyEvenIfEmpty {
		return false
	}
	send := changed
	switch {
	case delta || !c.fullState:
		// A SotW client cannot be told of a removal of these types: with
		// nothing changed, a SotW watch waits, unless it holds nothing.
		if !delta && !replyEvenIfEmpty && len(changed) == 0 {
			return false
		}
	case w.sub.IsWildcard():
		send = c.all()
	default:
		send = c.subscribed(w.sub)
	}
	returned := &returned{known: w.sub.ReturnedResources(), sent: send, removed: removed}
	if delta {
		// A delta stream may send this response after it armed its next
		// watch on the same map (it flushes queued responses before a
		// request, and this one can be queued just after): the response
		// gets its own copy, as LinearCache's do.
		returned.known = maps.Clone(returned.known)
		returned.delta = true
	}
	version := c.versionString()
	if delta {
		w.deltaOut <- &deltaResponse{req: c.deltaRequest, resources: send, removed: removed, returned: returned, version: version}
	} else {
		w.sotwOut <- &sotwResponse{req: c.sotwRequest, resources: send, returned: returned, version: version}
	}
	return true
}

// changes lists the subscribed resources the client holds at another
// version or not at all, and the names it holds that are gone or no longer
// subscribed, as LinearCache's computeResourceChange does.
func (c *Cache) changes(sub cache.Subscription, delta bool) (changed []*entry, removed []string) {
	known := sub.ReturnedResources()
	if sub.IsWildcard() {
		for name, e := range c.resources {
			if v, ok := known[name]; !ok || v != e.versionFor(delta) {
				changed = append(changed, e)
			}
		}
		for name := range known {
			if _, ok := c.resources[name]; !ok {
				removed = append(removed, name)
			}
		}
		return changed, removed
	}
	subscribed := sub.SubscribedResources()
	heldSubscribed := 0
	for name := range subscribed {
		v, held := known[name]
		if held {
			heldSubscribed++
		}
		e, exists := c.resources[name]
		switch {
		case !exists:
			if held {
				removed = append(removed, name)
			}
		case !held || v != e.versionFor(delta):
			changed = append(changed, e)
		}
	}
	// Forget what the client no longer subscribes to, so that subscribing
	// again sends it again.
	if len(known) > heldSubscribed {
		for name := range known {
			if _, ok := subscribed[name]; !ok {
				removed = append(removed, name)
			}
		}
	}
	return changed, removed
}

// changesAmong is changes for a settled watch: only the modified names can
// differ from what its client holds.
func (c *Cache) changesAmong(sub cache.Subscription, modified map[string]struct{}, delta bool) (changed []*entry, removed []string) {
	known, subscribed := sub.ReturnedResources(), sub.SubscribedResources()
	for name := range modified {
		if _, ok := subscribed[name]; !ok && !sub.IsWildcard() {
			continue
		}
		v, held := known[name]
		e, exists := c.resources[name]
		switch {
		case !exists:
			if held {
				removed = append(removed, name)
			}
		case !held || v != e.versionFor(delta):
			changed = append(changed, e)
		}
	}
	return changed, removed
}

// all is every resource, for a SotW wildcard watch of a full-state type.
func (c *Cache) all() []*entry {
	out := make([]*entry, 0, len(c.resources))
	for _, e := range c.resources {
		out = append(out, e)
	}
	return out
}

// subscribed is every existing resource sub names, for a SotW watch of a
// full-state type.
func (c *Cache) subscribed(sub cache.Subscription) []*entry {
	names := sub.SubscribedResources()
	out := make([]*entry, 0, len(names))
	for name := range names {
		if e, ok := c.resources[name]; ok {
			out = append(out, e)
		}
	}
	return out
}

func (c *Cache) versionString() string { return strconv.FormatUint(c.version, 10) }

// sotwResponse is a SotW response sharing its resources' encodings with
// every other response of the same update.
type sotwResponse struct {
	req       *cache.Request
	resources []*entry
	returned  *returned
	version   string
}

var _ cache.Response = (*sotwResponse)(nil)

// GetDiscoveryResponse builds a new message each call: the server sets the
// nonce and version on it, and authorization may take resources out.
func (r *sotwResponse) GetDiscoveryResponse() (*discovery.DiscoveryResponse, error) {
	out := make([]*anypb.Any, len(r.resources))
	for i, e := range r.resources {
		out[i] = e.any
	}
	return &discovery.DiscoveryResponse{VersionInfo: r.version, Resources: out, TypeUrl: r.req.GetTypeUrl()}, nil
}

func (r *sotwResponse) GetRequest() *discovery.DiscoveryRequest { return r.req }

func (r *sotwResponse) GetVersion() (string, error)             { return r.version, nil }
func (r *sotwResponse) GetResponseVersion() string              { return r.version }
func (r *sotwResponse) GetReturnedResources() map[string]string { return r.returned.apply() }
func (r *sotwResponse) GetContext() context.Context             { return context.Background() }

// deltaResponse is the delta counterpart of sotwResponse.
type deltaResponse struct {
	req       *cache.DeltaRequest
	resources []*entry
	removed   []string
	returned  *returned
	version   string
}

var _ cache.DeltaResponse = (*deltaResponse)(nil)

func (r *deltaResponse) GetDeltaDiscoveryResponse() (*discovery.DeltaDiscoveryResponse, error) {
	out := make([]*discovery.Resource, len(r.resources))
	for i, e := range r.resources {
		out[i] = e.delta
	}
	return &discovery.DeltaDiscoveryResponse{
		Resources: out, RemovedResources: r.removed,
		TypeUrl: r.req.GetTypeUrl(), SystemVersionInfo: r.version,
	}, nil
}

func (r *deltaResponse) GetDeltaRequest() *discovery.DeltaDiscoveryRequest { return r.req }
func (r *deltaResponse) GetSystemVersion() (string, error)                 { return r.version, nil }
func (r *deltaResponse) GetResponseVersion() string                        { return r.version }
func (r *deltaResponse) GetNextVersionMap() map[string]string              { return r.returned.apply() }
func (r *deltaResponse) GetReturnedResources() map[string]string           { return r.returned.apply() }
func (r *deltaResponse) GetContext() context.Context                       { return context.Background() }
