// Package xdscache holds one resource type's published resources for the
// xDS server and answers go-control-plane's streams from them. It is a
// cache.Cache with the answers of go-control-plane's LinearCache, built for
// fan-out to thousands of streams:
//
//   - Watches are kept in one flat set, not indexed by every resource name
//     they subscribe to. A stream re-arms its watch after each response,
//     and indexing it under each of its names (an Envoy subscribes to every
//     cluster's endpoints) cost a map insert and later a delete per name in
//     maps shared by every stream, on every ACK. An update now checks each
//     watch for the names it changed, walking whichever of the two sets is
//     smaller.
//   - Each resource is marshalled, hashed and wrapped once per update, and
//     every response shares the wrapped bytes: the Any for SotW and the
//     Resource for delta. A response allocates only its own list.
//   - A resource's versions are looked up once per subscribed name.
//
// The versions are LinearCache's: a SotW watch compares the cache's update
// counter at which each resource last changed, a delta watch the SHA-256 of
// its deterministic encoding, so clients reconnecting with versions from a
// replica or an earlier build resume where they were.
package xdscache

import (
	"context"
	"errors"
	"fmt"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// Cache holds the resources of one type URL. The zero value is not usable;
// call New.
type Cache struct {
	typeURL string
	// fullState: a SotW response carries every subscribed resource, not
	// only the changed ones (clusters and listeners).
	fullState bool

	// sotwRequest and deltaRequest stand for the request in every
	// response. go-control-plane's servers read only their type URL, and
	// a watch holding the stream's request would keep its list of every
	// subscribed name alive, which the subscription already holds.
	sotwRequest  *cache.Request
	deltaRequest *cache.DeltaRequest

	mu sync.Mutex
	// version counts updates; a resource's SotW version is the count at
	// which it last changed.
	version   uint64
	resources map[string]*entry
	watches   map[uint64]*watch
	nextWatch uint64
}

var _ cache.Cache = (*Cache)(nil)

// New returns an empty cache for typeURL.
func New(typeURL string) *Cache {
	return &Cache{
		typeURL:      typeURL,
		fullState:    cache.ResourceRequiresFullStateInSotw(typeURL),
		sotwRequest:  &cache.Request{TypeUrl: typeURL},
		deltaRequest: &cache.DeltaRequest{TypeUrl: typeURL},
		resources:    make(map[string]*entry),
		watches:      make(map[uint64]*watch),
	}
}

// entry is one resource as the streams receive it, built once per update.
type entry struct {
	name string
	// sotwVersion is the cache version of the update that set it;
	// deltaVersion the hash of its encoding.
	sotwVersion, deltaVersion string
	any                       *anypb.Any
	delta                     *discovery.Resource
}

func (e *entry) versionFor(delta bool) string {
	if delta {
		return e.deltaVersion
	}
	return e.sotwVersion
}

// UpdateResources sets toUpdate and removes toDelete, and answers every
// watch whose client now lacks something it subscribes to. A resource that
// cannot be marshalled fails the whole update, which then changes nothing.
func (c *Cache) UpdateResources(toUpdate map[string]types.Resource, toDelete []string) error {
	return c.UpdateEncoded(toUpdate, nil, toDelete)
}

// UpdateEncoded is UpdateResources for a caller that has already encoded
// some of the resources deterministically (snapshot.Encode, as the server
// does to version them): encoded[name], where present, is used as the
// resource's bytes rather than encoding it again.
func (c *Cache) UpdateEncoded(toUpdate map[string]types.Resource, encoded map[string][]byte, toDelete []string) error {
	built := make(map[string]*entry, len(toUpdate))
	for name, res := range toUpdate {
		e, err := c.build(name, res, encoded[name])
		if err != nil {
			return err
		}
		built[name] = e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.version++
	version := c.versionString()
	modified := make([]string, 0, len(built)+len(toDelete))
	for name, e := range built {
		e.sotwVersion = version
		c.resources[name] = e
		modified = append(modified, name)
	}
	for _, name := range toDelete {
		delete(c.resources, name)
		modified = append(modified, name)
	}
	c.notify(modified)
	return nil
}

// build marshals res deterministically, as LinearCache does, so the delta
// versions equal those of earlier builds and of other replicas, unless b
// already holds that encoding.
func (c *Cache) build(name string, res types.Resource, b []byte) (*entry, error) {
	if res == nil {
		return nil, fmt.Errorf("resource %q is nil", name)
	}
	if b == nil {
		var err error
		if b, err = cache.MarshalResource(res); err != nil {
			return nil, fmt.Errorf("marshal %q: %w", name, err)
		}
	}
	a := &anypb.Any{TypeUrl: c.typeURL, Value: b}
	v := cache.HashResource(b)
	return &entry{
		name:         name,
		deltaVersion: v,
		any:          a,
		delta:        &discovery.Resource{Name: name, Version: v, Resource: a},
	}, nil
}

// notify answers the watches that subscribe to any of the modified names
// (every wildcard watch does) and now have something to receive.
func (c *Cache) notify(modified []string) {
	if len(modified) == 0 {
		return
	}
	set := make(map[string]struct{}, len(modified))
	for _, name := range modified {
		set[name] = struct{}{}
	}
	for id, w := range c.watches {
		if !w.sub.IsWildcard() && !intersects(w.sub.SubscribedResources(), set) {
			continue
		}
		if c.respond(w, set, false) {
			delete(c.watches, id)
		}
	}
}

// intersects walks the smaller of the two sets.
func intersects(a, b map[string]struct{}) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	for name := range a {
		if _, ok := b[name]; ok {
			return true
		}
	}
	return false
}

// CreateWatch answers a SotW request at once if the client lacks something
// it subscribes to (or holds nothing, by its empty version), and otherwise
// keeps the watch until an update gives it something.
func (c *Cache) CreateWatch(req *cache.Request, sub cache.Subscription, out chan cache.Response) (func(), error) {
	if req.GetTypeUrl() != c.typeURL {
		return nil, fmt.Errorf("request type %s does not match cache type %s", req.GetTypeUrl(), c.typeURL)
	}
	w := &watch{sub: sub, sotwOut: out}
	return c.arm(w, req.GetVersionInfo() == "")
}

// CreateDeltaWatch is CreateWatch for delta streams. A wildcard
// subscription's first request is answered even with nothing in it: Envoy
// waits for that answer to finish initializing.
func (c *Cache) CreateDeltaWatch(req *cache.DeltaRequest, sub cache.Subscription, out chan cache.DeltaResponse) (func(), error) {
	if req.GetTypeUrl() != c.typeURL {
		return nil, fmt.Errorf("request type %s does not match cache type %s", req.GetTypeUrl(), c.typeURL)
	}
	w := &watch{sub: sub, delta: true, deltaOut: out}
	return c.arm(w, sub.IsWildcard() && req.GetResponseNonce() == "")
}

// arm answers w now if it has something to receive, or keeps it.
func (c *Cache) arm(w *watch, replyEvenIfEmpty bool) (func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.respond(w, nil, replyEvenIfEmpty) {
		return func() {}, nil
	}
	c.nextWatch++
	id := c.nextWatch
	c.watches[id] = w
	return func() {
		c.mu.Lock()
		delete(c.watches, id)
		c.mu.Unlock()
	}, nil
}

// Fetch is not served: ringxds serves streams only.
func (c *Cache) Fetch(context.Context, *cache.Request) (cache.Response, error) {
	return nil, errors.New("fetch is not served; open an xDS stream")
}

// NumWatches is the number of watches waiting for an update.
func (c *Cache) NumWatches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.watches)
}

// Resources returns the resources held, encoded, by name.
func (c *Cache) Resources() map[string][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string][]byte, len(c.resources))
	for name, e := range c.resources {
		out[name] = e.any.GetValue()
	}
	return out
}

// returned is what a client holds once it receives a response: known, the
// versions its subscription held when the response was built, with sent
// set and removed dropped.
//
// For SotW the update is applied to the stream's own map in place, when
// the stream asks for it, which go-control-plane's servers do only as they
// send the response: a SotW stream drops a response a request overtakes,
// and the next watch must then see the map as it was. A SotW stream never
// sends a response once it has armed another watch of that type (ADS
// cancels the watch, then drops what it queued; a per-type stream
// abandons the channel), so nothing else reads the map meanwhile. Copying
// it instead cost every response a map of the client's whole
// subscription. A delta stream can send a queued response after arming
// its next watch, so delta responses apply to a copy (respond).
type returned struct {
	known   map[string]string
	sent    []*entry
	removed []string
	delta   bool
}

// apply may be called again: setting the same versions twice is harmless.
func (r *returned) apply() map[string]string {
	if r.known == nil {
		r.known = make(map[string]string, len(r.sent))
	}
	for _, e := range r.sent {
		r.known[e.name] = e.versionFor(r.delta)
	}
	for _, name := range r.removed {
		delete(r.known, name)
	}
	return r.known
}
