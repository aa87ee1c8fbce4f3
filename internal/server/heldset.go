package server

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"
	"weak"

	"github.com/cespare/xxhash/v2"
)

// How a stream's held resources are kept (held.go says what they are). The
// streams of a kind are sent the same versions of the same resources, so
// what they hold is mostly the same: each version of a resource is one
// heldValue, and each sorted list of them one valueList, which every
// stream holding exactly those versions shares. What is a stream's own is
// which of its responses carried each resource: one pointer while a single
// response carried them all (a stream that has converged, or a full-state
// type), one per resource once pushes carried them one by one.

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

// valueList is the versions a stream holds of one type, sorted by name.
type valueList struct{ v []*heldValue }

// weakTable interns values that live as long as a stream holds them.
type weakTable[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]weak.Pointer[V]
}

type weakEntry[K comparable, V any] struct {
	k K
	p weak.Pointer[V]
}

// intern returns the live value under k if same accepts it, else a new
// one from build, kept under k unless a live one differing from it (a
// hash collision) is: that one stays, and the new one is not shared.
func (t *weakTable[K, V]) intern(k K, same func(*V) bool, build func() *V) *V {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v := t.m[k].Value(); v != nil {
		if same(v) {
			return v
		}
		return build()
	}
	v := build()
	p := weak.Make(v)
	t.m[k] = p
	runtime.AddCleanup(v, t.forget, weakEntry[K, V]{k, p})
	return v
}

// forget drops the entry of a collected value, unless a value since
// interned under the same key replaced it.
func (t *weakTable[K, V]) forget(e weakEntry[K, V]) {
	t.mu.Lock()
	if t.m[e.k] == e.p {
		delete(t.m, e.k)
	}
	t.mu.Unlock()
}

// valueKey is where a value's bytes are: the cache hands every stream the
// same bytes for one version of a resource. An address keeps nothing
// alive, and while its entry's heldValue lives it holds the bytes, so the
// address is not reused for other bytes before the entry reads as dead.
type valueKey struct {
	addr uintptr
	n    int
}

var (
	heldValues = weakTable[valueKey, heldValue]{m: make(map[valueKey]weak.Pointer[heldValue])}
	heldLists  = weakTable[uint64, valueList]{m: make(map[uint64]weak.Pointer[valueList])}
)

// internValue returns the heldValue for a resource's bytes.
func internValue(b []byte) *heldValue {
	build := func() *heldValue { return &heldValue{value: b, name: string(resourceNameBytes(b))} }
	if len(b) == 0 {
		return build()
	}
	k := valueKey{uintptr(unsafe.Pointer(unsafe.SliceData(b))), len(b)}
	return heldValues.intern(k, func(*heldValue) bool { return true }, build)
}

// addressBytes is what a list of values is hashed by: the addresses of
// the values, which are their identity (they are interned).
func addressBytes(v []*heldValue) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*int(unsafe.Sizeof(v[0])))
}

// internList returns the shared valueList holding v, which it may keep.
func internList(v []*heldValue) *valueList {
	if len(v) == 0 {
		return nil
	}
	return heldLists.intern(xxhash.Sum64(addressBytes(v)), func(l *valueList) bool { return slices.Equal(l.v, v) },
		func() *valueList { return &valueList{v: v} })
}

// heldChange is a new version of the resource at i in a valueList.
type heldChange struct {
	i int
	v *heldValue
}

// with returns the shared valueList l becomes with changes, ordered by
// index: a push carries a resource or a few to every stream of a kind,
// and only the first builds the new list.
func (l *valueList) with(changes []heldChange) *valueList {
	var d xxhash.Digest
	d.Reset()
	next := 0
	for _, c := range changes {
		_, _ = d.Write(addressBytes(l.v[next:c.i]))
		_, _ = d.Write(addressBytes([]*heldValue{c.v}))
		next = c.i + 1
	}
	_, _ = d.Write(addressBytes(l.v[next:]))
	same := func(other *valueList) bool {
		if len(other.v) != len(l.v) {
			return false
		}
		j := 0
		for i, v := range l.v {
			if j < len(changes) && changes[j].i == i {
				v = changes[j].v
				j++
			}
			if other.v[i] != v {
				return false
			}
		}
		return true
	}
	return heldLists.intern(d.Sum64(), same, func() *valueList {
		v := slices.Clone(l.v)
		for _, c := range changes {
			v[c.i] = c.v
		}
		return &valueList{v: v}
	})
}

// heldSet is what a stream holds of one type, sorted by name.
type heldSet struct {
	vals *valueList
	// resp carried every held resource, unless resps is set: then
	// resps[i] carried vals.v[i].
	resp  *response
	resps []*response
}

func (s *heldSet) len() int {
	if s.vals == nil {
		return 0
	}
	return len(s.vals.v)
}

func (s *heldSet) at(i int) heldResource {
	if s.resps != nil {
		return heldResource{s.vals.v[i], s.resps[i]}
	}
	return heldResource{s.vals.v[i], s.resp}
}

// find returns where name is, or would be.
func (s *heldSet) find(name string) (int, bool) {
	if s.vals == nil {
		return 0, false
	}
	return slices.BinarySearchFunc(s.vals.v, name, func(v *heldValue, name string) int { return strings.Compare(v.name, name) })
}

// list returns the held resources, to change and set again.
func (s *heldSet) list() []heldResource {
	out := make([]heldResource, s.len())
	for i := range out {
		out[i] = s.at(i)
	}
	return out
}

// set makes held, sorted by name without duplicates, what the stream holds.
func (s *heldSet) set(held []heldResource) {
	vals := make([]*heldValue, len(held))
	for i, h := range held {
		vals[i] = h.v
	}
	s.vals, s.resp, s.resps = internList(vals), nil, nil
	if len(held) == 0 {
		return
	}
	s.resp = held[0].resp
	for _, h := range held {
		if h.resp != s.resp {
			s.resps = make([]*response, len(held))
			for i, h := range held {
				s.resps[i] = h.resp
			}
			return
		}
	}
}

// carriedBy records that resp carried the resource at i.
func (s *heldSet) carriedBy(i int, resp *response) {
	if s.resps == nil {
		if resp == s.resp {
			return
		}
		s.resps = make([]*response, s.len())
		for j := range s.resps {
			s.resps[j] = s.resp
		}
	}
	s.resps[i] = resp
}

// settle goes back to one pointer once one response carried everything.
func (s *heldSet) settle() {
	if s.resps == nil {
		return
	}
	for _, r := range s.resps {
		if r != s.resps[0] {
			return
		}
	}
	s.resp, s.resps = s.resps[0], nil
}

// keep forgets the held resources whose name want refuses.
func (s *heldSet) keep(want func(name string) bool) {
	for i := range s.len() {
		if !want(s.vals.v[i].name) {
			s.set(slices.DeleteFunc(s.list(), func(h heldResource) bool { return !want(h.name()) }))
			return
		}
	}
}
