package server

import (
	"encoding/binary"
	"iter"
	"slices"
	"unique"
)

// nameList is the resource names of a subscription, interned: the clients
// of a kind mostly subscribe to the same names, and a SotW request restates
// them all, so a stream keeps a handle to one encoding every stream with
// that subscription shares, rather than the strings of its last request.
// The zero nameList is empty.
type nameList struct {
	// enc is each name's length (uvarint), then the name, in order.
	enc unique.Handle[string]
	n   int
}

func makeNameList(names []string) nameList {
	if len(names) == 0 {
		return nameList{}
	}
	size := 0
	for _, name := range names {
		size += binary.MaxVarintLen64 + len(name)
	}
	buf := make([]byte, 0, size)
	for _, name := range names {
		buf = binary.AppendUvarint(buf, uint64(len(name)))
		buf = append(buf, name...)
	}
	return nameList{enc: unique.Make(string(buf)), n: len(names)}
}

func (l nameList) len() int { return l.n }

// all yields the names in order; each shares the interned encoding.
func (l nameList) all() iter.Seq[string] {
	return func(yield func(string) bool) {
		if l.n == 0 {
			return
		}
		for s := l.enc.Value(); len(s) > 0; {
			n, k := uvarint(s)
			name := s[k : k+n]
			s = s[k+n:]
			if !yield(name) {
				return
			}
		}
	}
}

// uvarint reads the length that starts s, as binary.AppendUvarint wrote it,
// and how many bytes it took.
func uvarint(s string) (n, size int) {
	var x uint64
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		x |= uint64(s[i]&0x7f) << (7 * i)
		if s[i] < 0x80 {
			return int(x), i + 1
		}
	}
	panic("server: a nameList encoding is cut short")
}

// slice returns the names, nil for none.
func (l nameList) slice() []string {
	if l.n == 0 {
		return nil
	}
	out := make([]string, 0, l.n)
	for name := range l.all() {
		out = append(out, name)
	}
	return out
}

// equal reports whether names are the list's, in its order: what a SotW
// request restating its subscription costs, without allocating.
func (l nameList) equal(names []string) bool {
	if len(names) != l.n {
		return false
	}
	i := 0
	for name := range l.all() {
		if names[i] != name {
			return false
		}
		i++
	}
	return true
}

// set returns the names as a set, for the rare filtering of held
// resources by a changed subscription.
func (l nameList) set() map[string]struct{} {
	out := make(map[string]struct{}, l.n)
	for name := range l.all() {
		out[name] = struct{}{}
	}
	return out
}

// update returns a sorted set of names: l's (sorted too), with add and
// without remove and "*", which is the wildcard, no name.
func (l nameList) update(add, remove []string) nameList {
	if len(add) == 0 && len(remove) == 0 {
		return l
	}
	names := append(l.slice(), add...)
	slices.Sort(names)
	names = slices.Compact(names)
	gone := make(map[string]struct{}, len(remove)+1)
	gone["*"] = struct{}{}
	for _, name := range remove {
		gone[name] = struct{}{}
	}
	names = slices.DeleteFunc(names, func(name string) bool {
		_, ok := gone[name]
		return ok
	})
	return makeNameList(names)
}
