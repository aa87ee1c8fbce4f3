package server

import (
	"slices"
	"strings"
	"time"
	"unique"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
)

// What each stream holds, resource by resource, for CSDS (csds.go): the
// registry's per-type status says whether the last response of a type was
// accepted, CSDS answers per resource.
//
// Every stream of a fleet keeps this, so it is kept small (heldset.go):
// the versions held are shared by the streams holding them, and a
// resource costs a stream nothing of its own while one response carried
// all it holds of the type, 8 bytes once pushes carried them one by one.
// A response costs 32 bytes; its version string is interned, since every
// client of a kind is sent the same versions.

// answer is what a client said of one response.
type answer uint8

const (
	answerPending answer = iota
	answerACK
	answerNACK
)

// response is one response sent on a stream, as its resources remember it.
type response struct {
	version unique.Handle[string]
	// at is when it was sent, in Unix nanoseconds: a third of a
	// time.Time, and CSDS shows no monotonic clock.
	at int64
	// nack is the client's rejection of it, if it rejected it.
	nack *rejection
	// seq numbers the stream's responses in the order they were sent;
	// no stream lives for 2^32 responses.
	seq    uint32
	answer answer
}

// rejection is the client's error_detail for a rejected response, and
// when it came.
type rejection struct {
	message string
	at      time.Time
}

func (r *response) sentAt() time.Time { return time.Unix(0, r.at) }

// heldResource is one resource a stream was sent and its client holds,
// unless it rejected it.
type heldResource struct {
	v    *heldValue
	resp *response
}

func (h heldResource) name() string { return h.v.name }

// state is how CSDS reports a held resource. A SotW client that accepts a
// response accepts all it holds of the type, so a resource whose own
// response went unanswered (superseded before the client answered it) is
// accepted with the first later response that is, unless it was rejected.
func (h heldResource) state(ackedSeq uint32) answer {
	if h.resp.answer == answerPending && h.resp.seq <= ackedSeq {
		return answerACK
	}
	return h.resp.answer
}

// resourceNameBytes reads a published resource's name without decoding
// it: field 1 of a Cluster, ClusterLoadAssignment, Listener and
// RouteConfiguration alike. Marshalled in field order, it comes first.
func resourceNameBytes(b []byte) []byte {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil
			}
			return v
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil
		}
		b = b[m:]
	}
	return nil
}

func byName(a, b heldResource) int { return strings.Compare(a.name(), b.name()) }

// fullStateType reports whether a SotW response of the type lists every
// resource the client is to hold (LDS and CDS); any other type's SotW
// response lists only those that changed.
func fullStateType(short string) bool { return short == "cds" || short == "lds" }

// holdSotW records the resources of a SotW response: all the client now
// holds of a full-state type, else those it replaces or adds.
func (ts *TypeStatus) holdSotW(short string, resources []*anypb.Any, resp *response) {
	add := make([]heldResource, 0, len(resources))
	for _, a := range resources {
		add = append(add, heldResource{internValue(a.GetValue()), resp})
	}
	if fullStateType(short) {
		slices.SortStableFunc(add, byName)
		ts.held.set(keepLast(add))
		return
	}
	ts.holdAll(add)
}

// keepLast drops all but the last of each run of one name in a list sorted
// stably by name: of one name listed twice in a response, the later wins,
// as holdAll has it.
func keepLast(sorted []heldResource) []heldResource {
	out := sorted[:0]
	for i, h := range sorted {
		if i+1 < len(sorted) && sorted[i+1].name() == h.name() {
			continue
		}
		out = append(out, h)
	}
	return out
}

// holdDelta records the resources a delta response adds or replaces, and
// forgets those it removes.
func (ts *TypeStatus) holdDelta(resources []*discovery.Resource, removed []string, resp *response) {
	add := make([]heldResource, 0, len(resources))
	for _, r := range resources {
		add = append(add, heldResource{internValue(r.GetResource().GetValue()), resp})
	}
	ts.holdAll(add)
	ts.drop(removed)
}

// holdClaimed records the resources a delta client says it holds as it
// (re)connects: go-control-plane sends none of them again while they are
// current, and the client accepted them on the stream it had before, so
// they are accepted at the version it names.
func (ts *TypeStatus) holdClaimed(versions map[string]string, at time.Time) {
	add := make([]heldResource, 0, len(versions))
	for name, version := range versions {
		resp := &response{version: unique.Make(version), at: at.UnixNano(), answer: answerACK}
		add = append(add, heldResource{&heldValue{name: name, claimed: true}, resp})
	}
	ts.holdAll(add)
}

// holdAll records resources as hold does, sorting them once and merging
// them into held: one at a time, a large response cost time quadratic in
// its size, under the client's lock, before it went out.
func (ts *TypeStatus) holdAll(add []heldResource) {
	slices.SortStableFunc(add, byName)
	// Of one name listed twice, the later wins, as hold would have it.
	dedup := add[:0]
	for i, h := range add {
		if i+1 < len(add) && byName(h, add[i+1]) == 0 {
			continue
		}
		dedup = append(dedup, h)
	}
	fresh := ts.replaceHeld(dedup)
	if len(fresh) == 0 {
		return
	}
	held := ts.held.list()
	merged := make([]heldResource, 0, len(held)+len(fresh))
	i, j := 0, 0
	for i < len(held) && j < len(fresh) {
		if byName(held[i], fresh[j]) < 0 {
			merged = append(merged, held[i])
			i++
		} else {
			merged = append(merged, fresh[j])
			j++
		}
	}
	merged = append(merged, held[i:]...)
	ts.held.set(append(merged, fresh[j:]...))
}

// replaceHeld replaces the resources of add, sorted by name, that the
// stream holds already, and returns the others. A push of a few changed
// resources, the common case, builds the list of versions the streams
// sent it hold once, for the first of them.
func (ts *TypeStatus) replaceHeld(add []heldResource) (fresh []heldResource) {
	var changes []heldChange
	fresh = add[:0]
	for _, h := range add {
		i, found := ts.held.find(h.name())
		if !found {
			fresh = append(fresh, h)
			continue
		}
		if ts.held.vals.v[i] != h.v {
			changes = append(changes, heldChange{i, h.v})
		}
		ts.held.carriedBy(i, h.resp)
	}
	if len(changes) > 0 {
		ts.held.vals = ts.held.vals.with(changes)
	}
	ts.held.settle()
	return fresh
}

// drop forgets the named resources: the client no longer holds them.
func (ts *TypeStatus) drop(names []string) {
	if len(names) == 0 || ts.held.len() == 0 {
		return
	}
	gone := make(map[string]struct{}, len(names))
	for _, name := range names {
		gone[name] = struct{}{}
	}
	ts.held.keep(func(name string) bool {
		_, ok := gone[name]
		return !ok
	})
}

// keepSubscribed forgets the held resources a SotW subscription no longer
// names: the client drops them (the cache forgets it sent them, and sends
// them again on a new subscription). Only a changed subscription is
// compared, so a steady stream pays nothing.
func (ts *TypeStatus) keepSubscribed(names []string) {
	if ts.names.equal(names) {
		return
	}
	ts.names = makeNameList(names)
	if ts.Wildcard || ts.held.len() == 0 {
		return
	}
	want := ts.names.set()
	ts.held.keep(func(name string) bool {
		_, ok := want[name]
		return ok
	})
}

// answered records a client's answer to a response.
func (ts *TypeStatus) answered(resp *response, nack bool, message string, at time.Time) {
	if resp == nil {
		return
	}
	if nack {
		resp.answer, resp.nack = answerNACK, &rejection{message, at}
		return
	}
	resp.answer = answerACK
	ts.ackedSeq = max(ts.ackedSeq, resp.seq)
}
