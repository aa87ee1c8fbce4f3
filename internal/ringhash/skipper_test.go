package ringhash

import (
	"errors"
	"testing"
)

func mustSkipper(t testing.TB, eps []Endpoint) *Skipper {
	t.Helper()
	s, err := NewSkipper(eps)
	if err != nil {
		t.Fatalf("NewSkipper: %v", err)
	}
	return s
}

func identities(ids ...string) []Endpoint {
	eps := make([]Endpoint, len(ids))
	for i, id := range ids {
		eps[i] = Endpoint{Key: id, Weight: 1}
	}
	return eps
}

func skipperSetA() []Endpoint {
	return identities("http://127.0.0.1:8080", "http://127.0.0.2:8080", "http://127.0.0.3:8080")
}

// position returns the ring position a key's hash lands on.
func position(s *Skipper, key string) int { return s.wrap(s.find(HashKey(key))) }

// Skipper set A: the first entries, the last entry and the key table of
// vectors.md, checked against the ring content and the picks.
func TestSkipperSetA(t *testing.T) {
	eps := skipperSetA()
	s := mustSkipper(t, eps)
	if s.Size() != 300 || s.NumEndpoints() != 3 || s.Policy() != "skipper" {
		t.Fatalf("Size, NumEndpoints, Policy = %d, %d, %q", s.Size(), s.NumEndpoints(), s.Policy())
	}
	type ent struct {
		hash uint64
		ep   int
	}
	var ring []ent
	s.Entries(func(h uint64, ep int) { ring = append(ring, ent{h, ep}) })
	first := []ent{{31417198368459839, 2}, {68883809635059890, 0}, {99394206347931051, 2}, {99948284802620312, 0}}
	for i, want := range first {
		if ring[i] != want {
			t.Errorf("entry %d = %v, want %v", i, ring[i], want)
		}
	}
	// The vnode numbers of those entries: hashing "identity-j" reproduces them.
	for i, j := range []int{52, 85, 9, 9} {
		if h := HashKey(eps[first[i].ep].Key + "-" + itoa(j)); h != first[i].hash {
			t.Errorf("entry %d is not vnode %d of %s", i, j, eps[first[i].ep].Key)
		}
	}
	if last := ring[len(ring)-1]; last != (ent{18411923121251526154, 1}) {
		t.Errorf("last entry = %v", last)
	}

	for _, c := range []struct {
		key string
		pos int
		ep  int
	}{
		{"192.168.0.1", 153, 2}, {"10.0.0.1", 275, 1}, {"product-1", 30, 2}, {"product-2", 49, 0},
		{"product-3", 202, 0}, {"AB123C00D-E11", 127, 1}, {"NI112A0LI-Q11", 242, 1}, {"foo", 58, 2},
		{"bar", 77, 2}, {"", 278, 0}, {"http://127.0.0.1:8080-1", 202, 0},
		{"http://127.0.0.2:8080-1", 90, 1}, {"http://127.0.0.3:8080-1", 122, 2},
	} {
		if got := position(s, c.key); got != c.pos {
			t.Errorf("key %q lands at %d, want %d", c.key, got, c.pos)
		}
		if got := s.Pick(HashKey(c.key)); got != c.ep {
			t.Errorf("key %q picks %s, want %s", c.key, eps[got].Key, eps[c.ep].Key)
		}
	}
}

func TestSkipperSetB(t *testing.T) {
	var eps []Endpoint
	for i := 1; i <= 10; i++ {
		eps = append(eps, Endpoint{Key: "http://10.2.0." + itoa(i) + ":8080"})
	}
	s := mustSkipper(t, eps)
	if s.Size() != 1000 {
		t.Fatalf("Size = %d, want 1000", s.Size())
	}
	if got := position(s, "192.168.0.1"); got != 554 {
		t.Errorf("192.168.0.1 lands at %d, want 554", got)
	}
	for key, last := range map[string]int{
		"192.168.0.1": 5, "10.0.0.1": 6, "product-1": 6, "product-2": 1, "product-3": 9,
		"AB123C00D-E11": 5, "NI112A0LI-Q11": 9, "foo": 4, "bar": 6, "": 1,
	} {
		want := "http://10.2.0." + itoa(last) + ":8080"
		if got := eps[s.Pick(HashKey(key))].Key; got != want {
			t.Errorf("key %q picks %s, want %s", key, got, want)
		}
	}
}

// Excluded endpoints stay on the ring; the pick walks clockwise past them.
func TestSkipperPickExcluding(t *testing.T) {
	eps := skipperSetA()
	s := mustSkipper(t, eps)
	not3 := func(ep int) bool { return ep == 2 }
	for key, want := range map[string]int{"192.168.0.1": 1, "product-1": 0, "foo": 1, "bar": 0} {
		if got := s.PickExcluding(HashKey(key), not3); got != want {
			t.Errorf("key %q without .3 picks %d, want %d", key, got, want)
		}
	}
	// Nothing excluded is Pick; everything excluded is -1, and excluded is
	// asked about each endpoint once.
	calls := 0
	if got := s.PickExcluding(HashKey("foo"), func(int) bool { calls++; return true }); got != -1 || calls != 3 {
		t.Errorf("all excluded: got %d after %d calls, want -1 after 3", got, calls)
	}
	if got, want := s.PickExcluding(HashKey("foo"), func(int) bool { return false }), s.Pick(HashKey("foo")); got != want {
		t.Errorf("none excluded: got %d, want Pick's %d", got, want)
	}
}

func TestSkipperStabilityAndSelfSelection(t *testing.T) {
	eps := skipperSetA()
	s := mustSkipper(t, eps)
	h := HashKey("192.168.0.1")
	want := eps[s.Pick(h)].Key

	without1 := eps[1:]
	if got := without1[mustSkipper(t, without1).Pick(h)].Key; got != want {
		t.Errorf("after removing .1: %s, want %s", got, want)
	}
	with4 := append(append([]Endpoint{}, eps...), Endpoint{Key: "http://127.0.0.4:8080"})
	if got := with4[mustSkipper(t, with4).Pick(h)].Key; got != want {
		t.Errorf("after adding .4: %s, want %s", got, want)
	}
	// Input order does not change any pick.
	rev := []Endpoint{eps[2], eps[1], eps[0]}
	r := mustSkipper(t, rev)
	for _, key := range []string{"a", "b", "192.168.0.1", "product-1"} {
		if a, b := eps[s.Pick(HashKey(key))].Key, rev[r.Pick(HashKey(key))].Key; a != b {
			t.Errorf("key %q: %s in input order, %s reversed", key, a, b)
		}
	}
	for i, ep := range eps {
		if got := s.Pick(HashKey(ep.Key + "-1")); got != i {
			t.Errorf("%s-1 picks %s", ep.Key, eps[got].Key)
		}
	}
}

func TestSkipperErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		eps  []Endpoint
		want error
	}{
		{"no endpoints", nil, ErrNoEndpoints},
		{"empty key", []Endpoint{{Key: ""}}, ErrEmptyKey},
		{"duplicate", identities("http://a:1", "http://a:1"), ErrDuplicateKey},
		{"weighted", []Endpoint{{"http://a:1", 1}, {"http://b:1", 2}}, ErrWeightUnsupported},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := NewSkipper(c.eps); !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	// Weight 0 means unset and builds the same ring as weight 1.
	a := mustSkipper(t, []Endpoint{{Key: "http://a:1"}, {Key: "http://b:1"}})
	b := mustSkipper(t, identities("http://a:1", "http://b:1"))
	for h := uint64(0); h < 1<<63; h += 1 << 58 {
		if a.Pick(h) != b.Pick(h) {
			t.Fatalf("weight 0 and 1 rings differ at %d", h)
		}
	}
}
