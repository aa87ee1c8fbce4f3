package server

import (
	"slices"
	"strings"
	"testing"
)

// A subscription's names come back as they went in, whatever their bytes,
// and streams with one subscription share its encoding.
func TestNameList(t *testing.T) {
	long := strings.Repeat("x", 300) // a length of two varint bytes
	names := []string{"b", "", "a\x00b", long, "b"}
	l := makeNameList(names)
	if got := l.slice(); !slices.Equal(got, names) || l.len() != len(names) {
		t.Fatalf("got %q", got)
	}
	if !l.equal(names) || l.equal(names[:4]) || l.equal([]string{"b", "", "a\x00b", long, "c"}) {
		t.Fatal("equal compares names and order")
	}
	if other := makeNameList(slices.Clone(names)); other != l {
		t.Fatal("one subscription interned twice")
	}
	var empty nameList
	if empty.slice() != nil || !empty.equal(nil) || !empty.equal([]string{}) || makeNameList(nil) != empty {
		t.Fatal("the empty list")
	}
	set := empty.update([]string{"c", "*", "a", "c"}, nil).update([]string{"b"}, []string{"c", "z"})
	if got := set.slice(); !slices.Equal(got, []string{"a", "b"}) || set.len() != 2 {
		t.Fatalf("delta updates: %q", got)
	}
	if set.update(nil, nil) != set {
		t.Fatal("an update changing nothing re-encodes")
	}
}

// A SotW ACK restates the subscription: comparing it allocates nothing.
func TestNameListEqualAllocatesNothing(t *testing.T) {
	names := []string{"one", "two", "three"}
	l := makeNameList(names)
	if n := testing.AllocsPerRun(100, func() { l.equal(names) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
