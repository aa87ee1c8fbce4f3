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

func claAny(t *testing.T, name string) *anypb.Any {
	t.Helper()
	b, err := cache.MarshalResource(&endpointv3.ClusterLoadAssignment{ClusterName: name})
	if err != nil {
		t.Fatal(err)
	}
	return &anypb.Any{TypeUrl: resource.EndpointType, Value: b}
}

func heldStates(ts *TypeStatus) map[string]answer {
	out := map[string]answer{}
	for _, h := range ts.held {
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
	for _, h := range ts.held {
		names = append(names, h.name())
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
		a := heldValues.intern(b)
		if again := heldValues.intern(b); again != a || a.name != "shared" {
			t.Fatalf("interned twice: %p %p, name %q", a, again, a.name)
		}
		if copied := heldValues.intern(slices.Clone(b)); copied == a {
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
