package server

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unique"
	"unsafe"
	"weak"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
)

// What each stream holds, resource by resource, for CSDS (csds.go): the
// registry's per-type status says whether the last response of a type was
// accepted, CSDS answers per resource.
//
// Every stream of a fleet keeps this, so it is kept small. A held resource
// costs 16 bytes: a pointer to the resource's version, which every stream
// sent that version shares (heldValues), and a pointer to the response
// that carried it, which all the resources that response carried share.
// A response costs 32 bytes; its version string is interned, since every
// client of a kind is sent the same versions. A client holding 200
// resources costs some 3 KB; an Envoy holding 10,000 clusters, 160 KB.

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

// heldValue is one version of one resource, as a stream was sent it.
type heldValue struct {
	// value is the marshalled resource: the cache's own copy, which
	// go-control-plane marshals once for every stream.
	value []byte
	name  string
	// claimed marks a resource a delta client said it held when it
	// (re)connected (initial_resource_versions), which this stream never
	// sent: value is nil then, and the response carries the client's
	// version.
	claimed bool
}

// valueTable interns heldValues by the address of the bytes they carry:
// the cache hands every stream the same bytes for one version of a
// resource, so every stream holding it shares one heldValue, which lives
// as long as one of them holds it.
type valueTable struct {
	mu sync.Mutex
	m  map[valueKey]weak.Pointer[heldValue]
}

// valueKey is where a value's bytes are. An address keeps nothing alive,
// and while its entry's heldValue lives it holds the bytes, so the address
// is not reused for other bytes before the entry reads as dead.
type valueKey struct {
	addr uintptr
	n    int
}

type valueEntry struct {
	k valueKey
	p weak.Pointer[heldValue]
}

var heldValues = valueTable{m: make(map[valueKey]weak.Pointer[heldValue])}

// intern returns the heldValue for b.
func (t *valueTable) intern(b []byte) *heldValue {
	if len(b) == 0 {
		return &heldValue{value: b}
	}
	k := valueKey{uintptr(unsafe.Pointer(unsafe.SliceData(b))), len(b)}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v := t.m[k].Value(); v != nil {
		return v
	}
	v := &heldValue{value: b, name: string(resourceNameBytes(b))}
	p := weak.Make(v)
	t.m[k] = p
	runtime.AddCleanup(v, t.forget, valueEntry{k, p})
	return v
}

// forget drops the entry of a collected value, unless a value since
// interned at the same address replaced it.
func (t *valueTable) forget(e valueEntry) {
	t.mu.Lock()
	if t.m[e.k] == e.p {
		delete(t.m, e.k)
	}
	t.mu.Unlock()
}

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

// findHeld returns where name is, or would be, in held, which is sorted by
// name.
func findHeld(held []heldResource, name string) (int, bool) {
	return slices.BinarySearchFunc(held, name, func(h heldResource, name string) int { return strings.Compare(h.name(), name) })
}

func byName(a, b heldResource) int { return strings.Compare(a.name(), b.name()) }

// fullStateType reports whether a SotW response of the type lists every
// resource the client is to hold (LDS and CDS); any other type's SotW
// response lists only those that changed.
func fullStateType(short string) bool { return short == "cds" || short == "lds" }

// holdSotW records the resources of a SotW response: all the client now
// holds of a full-state type, else those it replaces or adds.
func (ts *TypeStatus) holdSotW(short string, resources []*anypb.Any, resp *response) {
	if fullStateType(short) {
		held := make([]heldResource, 0, len(resources))
		for _, a := range resources {
			held = append(held, heldResource{heldValues.intern(a.GetValue()), resp})
		}
		slices.SortFunc(held, byName)
		ts.held = held
		return
	}
	add := make([]heldResource, 0, len(resources))
	for _, a := range resources {
		add = append(add, heldResource{heldValues.intern(a.GetValue()), resp})
	}
	ts.holdAll(add)
}

// holdDelta records the resources a delta response adds or replaces, and
// forgets those it removes.
func (ts *TypeStatus) holdDelta(resources []*discovery.Resource, removed []string, resp *response) {
	add := make([]heldResource, 0, len(resources))
	for _, r := range resources {
		add = append(add, heldResource{heldValues.intern(r.GetResource().GetValue()), resp})
	}
	ts.holdAll(add)
	for _, name := range removed {
		ts.drop(name)
	}
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
	// Resources the stream holds already are replaced in place: a push of
	// a few changed resources, the common case, then allocates nothing.
	fresh := dedup[:0]
	for _, h := range dedup {
		if i, found := findHeld(ts.held, h.name()); found {
			ts.held[i] = h
		} else {
			fresh = append(fresh, h)
		}
	}
	if len(fresh) == 0 {
		return
	}
	dedup = fresh
	merged := make([]heldResource, 0, len(ts.held)+len(dedup))
	i, j := 0, 0
	for i < len(ts.held) && j < len(dedup) {
		switch c := byName(ts.held[i], dedup[j]); {
		case c < 0:
			merged = append(merged, ts.held[i])
			i++
		case c > 0:
			merged = append(merged, dedup[j])
			j++
		default:
			merged = append(merged, dedup[j])
			i, j = i+1, j+1
		}
	}
	merged = append(merged, ts.held[i:]...)
	ts.held = append(merged, dedup[j:]...)
}

func (ts *TypeStatus) drop(name string) {
	if i, found := findHeld(ts.held, name); found {
		ts.held = slices.Delete(ts.held, i, i+1)
	}
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
	if ts.Wildcard || len(ts.held) == 0 {
		return
	}
	want := ts.names.set()
	ts.held = slices.DeleteFunc(ts.held, func(h heldResource) bool {
		_, ok := want[h.name()]
		return !ok
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
