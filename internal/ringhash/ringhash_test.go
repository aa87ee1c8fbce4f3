package ringhash

import (
	"errors"
	"math"
	"testing"
)

// localHosts returns 127.0.0.1:<port> endpoints of weight 1.
func localHosts(ports ...int) []Endpoint {
	eps := make([]Endpoint, len(ports))
	for i, p := range ports {
		eps[i] = Endpoint{Key: "127.0.0.1:" + itoa(p), Weight: 1}
	}
	return eps
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

type entry struct {
	key  string
	hash uint64
}

// checkEntries asserts that the ring holds exactly want, in order.
func checkEntries(t *testing.T, d Drawable, eps []Endpoint, want []entry) {
	t.Helper()
	var got []entry
	d.Entries(func(h uint64, ep int) { got = append(got, entry{eps[ep].Key, h}) })
	if len(got) != len(want) {
		t.Fatalf("ring has %d entries, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func mustRingHash(t *testing.T, eps []Endpoint, opts RingHashOptions) *RingHash {
	t.Helper()
	r, err := NewRingHash(eps, opts)
	if err != nil {
		t.Fatalf("NewRingHash: %v", err)
	}
	return r
}

// Envoy ring_hash_lb_test.cc Basic.
func TestRingHashEnvoyBasic(t *testing.T) {
	eps := localHosts(90, 91, 92, 93, 94, 95)
	r := mustRingHash(t, eps, RingHashOptions{MinRingSize: 12})
	l := "127.0.0.1:"
	checkEntries(t, r, eps, []entry{
		{l + "94", 833437586790550860}, {l + "92", 928266305478181108}, {l + "90", 1033482794131418490},
		{l + "95", 3551244743356806947}, {l + "93", 3851675632748031481}, {l + "91", 5583722120771150861},
		{l + "91", 6311230543546372928}, {l + "93", 7700377290971790572}, {l + "95", 13144177310400110813},
		{l + "92", 13444792449719432967}, {l + "94", 15516499411664133160}, {l + "90", 16117243373044804889},
	})
	picks := []struct {
		h    uint64
		want int
	}{
		{0, 4}, {math.MaxUint64, 4}, {3551244743356806947, 5}, {3551244743356806948, 3},
		{16117243373044804880, 0},
	}
	for _, p := range picks {
		if got := r.Pick(p.h); got != p.want {
			t.Errorf("Pick(%d) = %d, want %d", p.h, got, p.want)
		}
	}
	for attempt, want := range []int{4, 2, 0} {
		if got := r.PickAttempt(0, attempt); got != want {
			t.Errorf("PickAttempt(0, %d) = %d, want %d", attempt, got, want)
		}
	}
	// The attempt index wraps modulo the ring size.
	if got, want := r.PickAttempt(0, 12+1), r.PickAttempt(0, 1); got != want {
		t.Errorf("PickAttempt(0, 13) = %d, want attempt 1's %d", got, want)
	}
	if r.Size() != 12 || r.NumEndpoints() != 6 || r.Policy() != "ring_hash" {
		t.Errorf("Size, NumEndpoints, Policy = %d, %d, %q", r.Size(), r.NumEndpoints(), r.Policy())
	}
}

// Envoy ring_hash_lb_test.cc BasicWithMurmur2.
func TestRingHashEnvoyMurmur2(t *testing.T) {
	eps := localHosts(80, 81, 82, 83, 84, 85)
	r := mustRingHash(t, eps, RingHashOptions{MinRingSize: 12, Hash: MurmurHash2})
	l := "127.0.0.1:"
	checkEntries(t, r, eps, []entry{
		{l + "85", 1358027074129602068}, {l + "83", 4361834613929391114}, {l + "84", 7224494972555149682},
		{l + "81", 7701421856454313576}, {l + "82", 8649315368077433379}, {l + "84", 8739448859063030639},
		{l + "81", 9887544217113020895}, {l + "82", 10150910876324007731}, {l + "83", 15168472011420622455},
		{l + "80", 15427156902705414897}, {l + "85", 16375050414328759093}, {l + "80", 17613279263364193813},
	})
	for _, p := range []struct {
		h    uint64
		want int
	}{
		{0, 5}, {math.MaxUint64, 5}, {1358027074129602068, 5}, {1358027074129602069, 3},
		{10150910876324007730, 2},
	} {
		if got := r.Pick(p.h); got != p.want {
			t.Errorf("Pick(%d) = %d, want %d", p.h, got, p.want)
		}
	}
}

// Envoy ring_hash_lb_test.cc: hosts hashed by envoy.lb hash_key "90".."95".
func TestRingHashEnvoyHashKeys(t *testing.T) {
	var eps []Endpoint
	for _, k := range []string{"90", "91", "92", "93", "94", "95"} {
		eps = append(eps, Endpoint{Key: k, Weight: 1})
	}
	r := mustRingHash(t, eps, RingHashOptions{MinRingSize: 12})
	checkEntries(t, r, eps, []entry{
		{"95", 1975508444536362413}, {"95", 2376063919839173711}, {"93", 2386806903309390596},
		{"94", 6749904478991551885}, {"93", 6803900775736438537}, {"92", 7225015537174310577},
		{"90", 8787465352164086522}, {"92", 11282020843382717940}, {"91", 13723418369486627818},
		{"90", 13776502110861797421}, {"91", 14338313586354474791}, {"94", 15364271037087512980},
	})
	for _, p := range []struct {
		h    uint64
		want int
	}{{0, 5}, {math.MaxUint64, 5}, {7225015537174310577, 2}, {6803900775736438537, 3}} {
		if got := r.Pick(p.h); got != p.want {
			t.Errorf("Pick(%d) = %d, want %d", p.h, got, p.want)
		}
	}
}

// Envoy ring_hash_lb_test.cc UnevenHosts: min ring 3 over 2 hosts gives 4
// entries, and replacing a host keeps the survivor's entries.
func TestRingHashEnvoyUnevenHosts(t *testing.T) {
	eps := localHosts(80, 81)
	r := mustRingHash(t, eps, RingHashOptions{MinRingSize: 3})
	l := "127.0.0.1:"
	checkEntries(t, r, eps, []entry{
		{l + "80", 5454692015285649509}, {l + "81", 7859399908942313493},
		{l + "80", 13838424394637650569}, {l + "81", 16064866803292627174},
	})
	if got := r.Pick(0); got != 0 {
		t.Errorf("Pick(0) = %d, want 0 (:80)", got)
	}
	eps = localHosts(81, 82)
	r = mustRingHash(t, eps, RingHashOptions{MinRingSize: 3})
	checkEntries(t, r, eps, []entry{
		{l + "81", 7859399908942313493}, {l + "82", 8241336090459785962},
		{l + "82", 12882406409176325258}, {l + "81", 16064866803292627174},
	})
	if got := r.Pick(0); got != 0 {
		t.Errorf("Pick(0) = %d, want 0 (:81)", got)
	}
}

// Envoy ring_hash_lb_test.cc HostWeightedTinyRing.
func TestRingHashEnvoyWeightedTinyRing(t *testing.T) {
	eps := localHosts(90, 91, 92)
	for i := range eps {
		eps[i].Weight = uint32(i + 1)
	}
	r := mustRingHash(t, eps, RingHashOptions{MinRingSize: 6, MaxRingSize: 6})
	l := "127.0.0.1:"
	checkEntries(t, r, eps, []entry{
		{l + "92", 928266305478181108}, {l + "92", 4443673547860492590}, {l + "91", 5583722120771150861},
		{l + "91", 6311230543546372928}, {l + "92", 13444792449719432967}, {l + "90", 16117243373044804889},
	})
}

// evenlySpacedCounts picks h = i * floor((2^64-1)/n) for i < n and counts
// the picks per endpoint, as Envoy's weighted ring tests do.
func evenlySpacedCounts(r Ring, n uint64) []int {
	counts := make([]int, r.NumEndpoints())
	step := math.MaxUint64 / n
	for i := uint64(0); i < n; i++ {
		counts[r.Pick(i*step)]++
	}
	return counts
}

func entryCounts(d Drawable, n int) []int {
	counts := make([]int, n)
	d.Entries(func(_ uint64, ep int) { counts[ep]++ })
	return counts
}

// Envoy ring_hash_lb_test.cc HostWeightedLargeRing.
func TestRingHashEnvoyWeightedLargeRing(t *testing.T) {
	eps := localHosts(90, 91, 92)
	for i := range eps {
		eps[i].Weight = uint32(i + 1)
	}
	r := mustRingHash(t, eps, RingHashOptions{MinRingSize: 6144})
	if r.Size() != 6144 {
		t.Fatalf("Size = %d, want 6144", r.Size())
	}
	assertInts(t, "entries per host", entryCounts(r, 3), []int{1024, 2048, 3072})
	assertInts(t, "picks per host", evenlySpacedCounts(r, 6000), []int{987, 1932, 3081})
}

// Envoy ring_hash_lb_test.cc LargeFractionalScale and SmallFractionalScale.
func TestRingHashEnvoyFractionalScale(t *testing.T) {
	eps := localHosts(90, 91)
	r := mustRingHash(t, eps, RingHashOptions{MinRingSize: 1023, MaxRingSize: 1023})
	// Envoy's test checks min 511 and max 512 hashes per host. Which host
	// gets which follows from the walk: the first host's target is 511.5,
	// reached only by its 512th entry.
	assertInts(t, "entries per host", entryCounts(r, 2), []int{512, 511})
	assertInts(t, "picks per host", evenlySpacedCounts(r, 1023), []int{526, 497})

	eps = localHosts(90, 91, 92, 93)
	r = mustRingHash(t, eps, RingHashOptions{MinRingSize: 2, MaxRingSize: 2})
	if r.Size() != 2 {
		t.Fatalf("Size = %d, want 2", r.Size())
	}
	empty := 0
	for _, c := range entryCounts(r, 4) {
		if c == 0 {
			empty++
		}
	}
	if empty != 2 {
		t.Errorf("%d hosts without an entry, want 2", empty)
	}
	// Walk visits only the two endpoints that are on the ring.
	var seen []int
	r.Walk(0, func(ep int) bool { seen = append(seen, ep); return true })
	if len(seen) != 2 {
		t.Errorf("Walk visited %v, want the 2 endpoints on the ring", seen)
	}
}

// grpc-go sorts endpoints by key before the walk, so its ring differs from
// Envoy's when EDS order is not sorted and the weights are uneven, and does
// not depend on input order at all.
func TestRingHashSortByKey(t *testing.T) {
	eps := []Endpoint{{"10.0.0.3:80", 3}, {"10.0.0.1:80", 1}, {"10.0.0.2:80", 3}}
	shuffled := []Endpoint{eps[2], eps[0], eps[1]}
	opts := RingHashOptions{MinRingSize: 7, MaxRingSize: 7, SortByKey: true}
	a := mustRingHash(t, eps, opts)
	b := mustRingHash(t, shuffled, opts)
	keysOf := func(r *RingHash, eps []Endpoint) []entry {
		var out []entry
		r.Entries(func(h uint64, ep int) { out = append(out, entry{eps[ep].Key, h}) })
		return out
	}
	ka, kb := keysOf(a, eps), keysOf(b, shuffled)
	if len(ka) != len(kb) {
		t.Fatalf("sizes differ: %d vs %d", len(ka), len(kb))
	}
	for i := range ka {
		if ka[i] != kb[i] {
			t.Fatalf("sorted rings differ at %d: %v vs %v", i, ka[i], kb[i])
		}
	}
	// Scale 7 over weights 3/7, 1/7, 3/7 gives 3, 1, 3 entries in sorted
	// order, and indices still refer to the caller's slice.
	assertInts(t, "entries per host", entryCounts(a, 3), []int{3, 1, 3})

	// With a fractional scale the walk order decides who gets the extra
	// entry: 3 equal endpoints on a ring of 4 have targets 4/3, 8/3, 4, so
	// the first walked gets 2 entries. Envoy walks input order (c first),
	// grpc-go sorted order (a first).
	eq := []Endpoint{{"c:80", 1}, {"a:80", 1}, {"b:80", 1}}
	envoy := mustRingHash(t, eq, RingHashOptions{MinRingSize: 4, MaxRingSize: 4})
	grpc := mustRingHash(t, eq, RingHashOptions{MinRingSize: 4, MaxRingSize: 4, SortByKey: true})
	assertInts(t, "envoy entries per host", entryCounts(envoy, 3), []int{2, 1, 1})
	assertInts(t, "grpc-go entries per host", entryCounts(grpc, 3), []int{1, 2, 1})
}

func TestRingHashErrors(t *testing.T) {
	ok := localHosts(90)
	cases := []struct {
		name string
		eps  []Endpoint
		opts RingHashOptions
		want error
	}{
		{"no endpoints", nil, RingHashOptions{}, ErrNoEndpoints},
		{"empty key", []Endpoint{{"", 1}}, RingHashOptions{}, ErrEmptyKey},
		{"duplicate", []Endpoint{{"a", 1}, {"b", 1}, {"a", 1}}, RingHashOptions{}, ErrDuplicateKey},
		{"zero weight", []Endpoint{{"a", 1}, {"b", 0}}, RingHashOptions{}, ErrZeroWeight},
		{"weight sum", []Endpoint{{"a", math.MaxUint32}, {"b", 1}}, RingHashOptions{}, ErrWeightSum},
		{"min above max", ok, RingHashOptions{MinRingSize: 2048, MaxRingSize: 1024}, ErrRingSize},
		{"default min above max", ok, RingHashOptions{MaxRingSize: 512}, ErrRingSize},
		{"max too large", ok, RingHashOptions{MaxRingSize: MaxRingSizeLimit + 1}, ErrRingSize},
		{"min too large", ok, RingHashOptions{MinRingSize: MaxRingSizeLimit + 1}, ErrRingSize},
		{"hash function", ok, RingHashOptions{Hash: HashFunction(9)}, ErrUnknownHashFunction},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := NewRingHash(c.eps, c.opts)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if r != nil {
				t.Errorf("ring returned with error")
			}
		})
	}
	_, err := NewRingHash([]Endpoint{{"a", 1}, {"b", 1}, {"a", 1}}, RingHashOptions{})
	var ee *EndpointError
	if !errors.As(err, &ee) || ee.Index != 2 || ee.Key != "a" {
		t.Errorf("duplicate error %v does not name endpoint 2 %q", err, "a")
	}
}

// With a power-of-two weight sum and ring size every float operation is
// exact, so host i gets exactly w_i * size / S entries (ring-dialects.md
// section 5): the condition under which Envoy and grpc-go agree.
func TestRingHashExactCountsPowerOfTwo(t *testing.T) {
	eps := []Endpoint{{"a:1", 5}, {"b:1", 1}, {"c:1", 8}, {"d:1", 2}} // S = 16
	for _, sortByKey := range []bool{false, true} {
		r := mustRingHash(t, eps, RingHashOptions{MinRingSize: 1024, MaxRingSize: 4096, SortByKey: sortByKey})
		assertInts(t, "entries per host", entryCounts(r, 4), []int{320, 64, 512, 128})
	}
}

func assertInts(t *testing.T, what string, got, want []int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s = %v, want %v", what, got, want)
		}
	}
}
