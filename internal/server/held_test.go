package server

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
)

func claAny(t testing.TB, name string) *anypb.Any {
	t.Helper()
	b, err := cache.MarshalResource(&endpointv3.ClusterLoadAssignment{ClusterName: name})
	if err != nil {
		t.Fatal(err)
	}
	return &anypb.Any{TypeUrl: resource.EndpointType, Value: b}
}

func heldStates(ts *TypeStatus) map[string]answer {
	out := map[string]answer{}
	for i := range ts.held.len() {
		h := ts.held.at(i)
		out[h.name()] = h.state(ts.ackedSeq)
	}
	return out
}

// What a stream holds follows its responses and answers: a partial SotW
// response adds and replaces, a full-state one replaces all, delta adds
// and removes, and a SotW ACK accepts what a superseded, unanswered
// response carried, but not what the client rejected.
func TestHeldResourcesFollowResponses(t *testing.T) {
	var ts TypeStatus
	at := time.Unix(0, 0)
	r1, r2, r3 := &response{seq: 1}, &response{seq: 2}, &response{seq: 3}
	ts.holdSotW("eds", []*anypb.Any{claAny(t, "b"), claAny(t, "a")}, r1)
	ts.holdSotW("eds", []*anypb.Any{claAny(t, "c")}, r2)
	ts.answered(r2, true, "bad c", at)
	ts.holdSotW("eds", []*anypb.Any{claAny(t, "d"), claAny(t, "a")}, r3)
	if got := heldStates(&ts); !mapsEqual(got, map[string]answer{"a": answerPending, "b": answerPending, "c": answerNACK, "d": answerPending}) {
		t.Fatalf("before the ACK: %v", got)
	}
	ts.answered(r3, false, "", at)
	if got := heldStates(&ts); !mapsEqual(got, map[string]answer{"a": answerACK, "b": answerACK, "c": answerNACK, "d": answerACK}) {
		t.Fatalf("after the ACK of the last response: %v", got)
	}
	var names []string
	for i := range ts.held.len() {
		names = append(names, ts.held.at(i).name())
	}
	if !slices.Equal(names, []string{"a", "b", "c", "d"}) {
		t.Fatalf("held not sorted by name: %v", names)
	}
	ts.holdSotW("cds", []*anypb.Any{claAny(t, "z"), claAny(t, "b")}, &response{seq: 4})
	if got := heldStates(&ts); len(got) != 2 || got["z"] != answerPending || got["b"] != answerPending {
		t.Fatalf("a full-state response did not replace what is held: %v", got)
	}
	ts.holdDelta([]*discovery.Resource{{Name: "y", Resource: claAny(t, "y")}}, []string{"z"}, &response{seq: 5})
	if got := heldStates(&ts); len(got) != 2 || got["y"] != answerPending || got["b"] != answerPending {
		t.Fatalf("delta add y, remove z: %v", got)
	}
}

func mapsEqual(a, b map[string]answer) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Recording a push of a resource the stream holds already is on the
// fan-out's path for every client: it replaces the entry in place.
func TestHoldingAHeldResourceAgainAllocatesOnlyItsList(t *testing.T) {
	var ts TypeStatus
	var all []*anypb.Any
	for i := range 100 {
		all = append(all, claAny(t, fmt.Sprintf("svc-%03d", i)))
	}
	ts.holdSotW("eds", all, &response{seq: 1})
	one := []*anypb.Any{claAny(t, "svc-042")}
	resp := &response{seq: 2}
	// The one allocation is the list handed to holdAll.
	if n := testing.AllocsPerRun(100, func() { ts.holdSotW("eds", one, resp) }); n > 1 {
		t.Fatalf("%v allocations to replace one of 100 held resources", n)
	}
	if got := heldStates(&ts); len(got) != 100 {
		t.Fatalf("%d resources held, want 100", len(got))
	}
}

// Streams sent one version of a resource share what they hold of it, and
// the table forgets it once no stream holds it, though the cache may keep
// the bytes.
func TestHeldValuesAreSharedThenForgotten(t *testing.T) {
	b := claAny(t, "shared").GetValue()
	func() {
		a := internValue(b)
		if again := internValue(b); again != a || a.name != "shared" {
			t.Fatalf("interned twice: %p %p, name %q", a, again, a.name)
		}
		if copied := internValue(slices.Clone(b)); copied == a {
			t.Fatal("bytes at another address share the entry of the first")
		}
	}()
	k := valueKey{uintptr(unsafe.Pointer(unsafe.SliceData(b))), len(b)}
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		heldValues.mu.Lock()
		_, kept := heldValues.m[k]
		heldValues.mu.Unlock()
		if !kept {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the entry of a value no stream holds is kept")
		}
		time.Sleep(time.Millisecond)
	}
	runtime.KeepAlive(b)
}

// Streams sent the same versions share the list of them, each with its
// own responses; a push carrying one resource gives the stream a response
// per resource, and one response carrying all of them again, one only.
func TestStreamsShareWhatTheyHold(t *testing.T) {
	var all []*anypb.Any
	for i := range 10 {
		all = append(all, claAny(t, fmt.Sprintf("svc-%d", i)))
	}
	var a, b TypeStatus
	ra, rb := &response{seq: 1}, &response{seq: 1}
	a.holdSotW("eds", all, ra)
	b.holdSotW("eds", slices.Clone(all), rb)
	if a.held.vals != b.held.vals || a.held.resps != nil || a.held.at(3).resp != ra || b.held.at(3).resp != rb {
		t.Fatalf("a %+v, b %+v", a.held, b.held)
	}
	changed := claAny(t, "svc-4")
	a.holdSotW("eds", []*anypb.Any{changed}, &response{seq: 2})
	b.holdSotW("eds", []*anypb.Any{changed}, &response{seq: 2})
	if a.held.vals != b.held.vals || a.held.vals.v[4].value == nil || &a.held.vals.v[4].value[0] != &changed.Value[0] {
		t.Fatal("a push of one resource is not shared")
	}
	if a.held.resps == nil || a.held.at(4).resp.seq != 2 || a.held.at(5).resp != ra {
		t.Fatal("each resource should name the response that carried it")
	}
	a.holdSotW("eds", all, &response{seq: 3})
	if a.held.resps != nil || a.held.at(4).resp.seq != 3 {
		t.Fatal("one response carried everything: one pointer is enough")
	}
}
