package ringhash

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sort"
	"testing"
)

// fuzzBytes hands out the fuzzer's bytes as the values a builder takes;
// past the end it returns zeros, so every input decodes to something.
type fuzzBytes []byte

func (b *fuzzBytes) byte() byte {
	if len(*b) == 0 {
		return 0
	}
	v := (*b)[0]
	*b = (*b)[1:]
	return v
}

func (b *fuzzBytes) uint32() uint32 {
	var buf [4]byte
	for i := range buf {
		buf[i] = b.byte()
	}
	return binary.LittleEndian.Uint32(buf[:])
}

func (b *fuzzBytes) uint64() uint64 {
	return uint64(b.uint32())<<32 | uint64(b.uint32())
}

func (b *fuzzBytes) string() string {
	n := int(b.byte() % 24)
	n = min(n, len(*b))
	s := string((*b)[:n])
	*b = (*b)[n:]
	return s
}

// fuzzRingInput is what FuzzRings decodes from its bytes.
type fuzzRingInput struct {
	eps              []Endpoint
	minSize, maxSize uint64
	tableSize        uint64
	hash             HashFunction
	sortByKey        bool
	probes           []uint64
}

// fuzzRingSizeCap keeps the rings the fuzzer builds small enough for
// thousands of builds a second. Sizes above it, up to the documented
// limits, are covered by the unit tests; sizes beyond the limits are still
// fuzzed, since they are refused before anything is allocated.
const fuzzRingSizeCap = 1 << 16

func decodeFuzzRingInput(data []byte) fuzzRingInput {
	b := fuzzBytes(data)
	var in fuzzRingInput
	flags := b.byte()
	in.hash = HashFunction(flags & 3) // 2 and 3 are no hash function
	in.sortByKey = flags&4 != 0
	in.minSize, in.maxSize = uint64(b.uint32()), uint64(b.uint32())
	// With flag 8 a size beyond the limit stays as it is, to be refused;
	// sizes within the limit are cut down to build fast.
	if flags&8 == 0 || in.minSize <= MaxRingSizeLimit {
		in.minSize %= fuzzRingSizeCap + 1
	}
	if flags&8 == 0 || in.maxSize <= MaxRingSizeLimit {
		in.maxSize %= fuzzRingSizeCap + 1
	}
	// The default maximum (0, 8388608) only with flag 32, and then with
	// small weights: the ring is then about the minimum size plus the
	// weight sum. Otherwise an unset maximum is the cap.
	defaultMax := flags&32 != 0
	switch {
	case defaultMax:
		in.maxSize = 0
	case in.maxSize == 0:
		in.maxSize = fuzzRingSizeCap
	}
	in.tableSize = uint64(b.uint32())
	if flags&16 == 0 || in.tableSize <= MaxMaglevTableSize {
		in.tableSize %= fuzzRingSizeCap + 1
	}
	n := int(b.byte() % 48)
	for range n {
		ep := Endpoint{Key: b.string()}
		switch w := b.byte(); {
		case w < 200 || defaultMax:
			ep.Weight = uint32(w % 8) // 0 is refused
		default:
			ep.Weight = b.uint32()
		}
		in.eps = append(in.eps, ep)
	}
	for len(b) > 0 && len(in.probes) < 16 {
		in.probes = append(in.probes, b.uint64())
	}
	return in
}

// checkRingValidation reports whether NewRingHash, NewMaglev and
// NewSkipper are expected to refuse eps for a reason every dialect shares,
// and which sentinel the error must match.
func expectedEndpointError(eps []Endpoint, weighted bool) error {
	if len(eps) == 0 {
		return ErrNoEndpoints
	}
	seen := map[string]bool{}
	var sum uint64
	for _, ep := range eps {
		switch {
		case ep.Key == "":
			return ErrEmptyKey
		case seen[ep.Key]:
			return ErrDuplicateKey
		}
		seen[ep.Key] = true
		if !weighted {
			if ep.Weight > 1 {
				return ErrWeightUnsupported
			}
			continue
		}
		if ep.Weight == 0 {
			return ErrZeroWeight
		}
		if sum += uint64(ep.Weight); sum > math.MaxUint32 {
			return ErrWeightSum
		}
	}
	return nil
}

// ringEntry is one entry of a sorted ring as Entries lists it.
type ringEntry struct {
	hash     uint64
	endpoint int
}

func sortedEntries(r Drawable) []ringEntry {
	var out []ringEntry
	r.Entries(func(h uint64, ep int) { out = append(out, ringEntry{h, ep}) })
	return out
}

// checkSortedRing checks a ring_hash or Skipper ring against its own
// entries: they ascend, every owner is an endpoint, a pick is the owner of
// the first entry at or after the hash (wrapping), a retry is the entry
// that many places on, and a walk visits each endpoint that owns an entry
// once, starting at the pick.
func checkSortedRing(t *testing.T, r interface {
	Ring
	Drawable
}, probes []uint64) {
	t.Helper()
	entries := sortedEntries(r)
	if len(entries) != r.Size() {
		t.Fatalf("Entries lists %d entries, Size is %d", len(entries), r.Size())
	}
	if len(entries) == 0 {
		t.Fatalf("a ring of %d endpoints has no entries", r.NumEndpoints())
	}
	owners := map[int]bool{}
	for i, e := range entries {
		if e.endpoint < 0 || e.endpoint >= r.NumEndpoints() {
			t.Fatalf("entry %d is owned by endpoint %d of %d", i, e.endpoint, r.NumEndpoints())
		}
		if i > 0 && (e.hash < entries[i-1].hash || e.hash == entries[i-1].hash && e.endpoint < entries[i-1].endpoint) {
			t.Fatalf("entries %d and %d are out of order: %+v, %+v", i-1, i, entries[i-1], e)
		}
		owners[e.endpoint] = true
	}
	// Probe at, just before and just after some entries too: the edges
	// are where a bucket index goes wrong.
	probes = slices.Clone(probes)
	probes = append(probes, 0, math.MaxUint64)
	for _, i := range []int{0, len(entries) / 2, len(entries) - 1} {
		h := entries[i].hash
		probes = append(probes, h, h-1, h+1)
	}
	for _, h := range probes {
		first := sort.Search(len(entries), func(i int) bool { return entries[i].hash >= h })
		if first == len(entries) {
			first = 0
		}
		if got, want := r.Pick(h), entries[first].endpoint; got != want {
			t.Fatalf("Pick(%#x) = %d, want %d (entry %d of %d)", h, got, want, first, len(entries))
		}
		for _, attempt := range []int{-1, 0, 1, 2, 5} {
			want := entries[(first+max(attempt, 0))%len(entries)].endpoint
			if got := r.PickAttempt(h, attempt); got != want {
				t.Fatalf("PickAttempt(%#x, %d) = %d, want %d", h, attempt, got, want)
			}
		}
		checkWalk(t, r, h, owners)
	}
}

// checkWalk checks that a walk from h starts at Pick(h) and visits every
// endpoint in owners exactly once, and nothing else.
func checkWalk(t *testing.T, r Ring, h uint64, owners map[int]bool) {
	t.Helper()
	visited := map[int]bool{}
	first := -1
	r.Walk(h, func(ep int) bool {
		if first < 0 {
			first = ep
		}
		if visited[ep] {
			t.Fatalf("Walk(%#x) visits endpoint %d twice", h, ep)
		}
		if !owners[ep] {
			t.Fatalf("Walk(%#x) visits endpoint %d, which owns no entry", h, ep)
		}
		visited[ep] = true
		return true
	})
	if first != r.Pick(h) {
		t.Fatalf("Walk(%#x) starts at %d, Pick is %d", h, first, r.Pick(h))
	}
	if len(visited) != len(owners) {
		t.Fatalf("Walk(%#x) visits %d endpoints, %d own entries", h, len(visited), len(owners))
	}
}

// FuzzRings builds the Envoy ring_hash, Maglev and Skipper rings of fuzzed
// endpoint keys, weights and sizes. Each builder must refuse exactly the
// inputs the documentation says it refuses, with the documented error, and
// build every other: no panic, the documented size, picks, retries and
// walks consistent with the ring's own entries, and each endpoint holding
// the share of the ring that the sizing formula gives it.
func FuzzRings(f *testing.F) {
	f.Add([]byte("\x00\x00\x04\x00\x00\x00\x10\x00\x00\x01\x00\x01\x00\x03" +
		"\x0f127.0.0.1:9101\x01\x0f127.0.0.1:9102\x01\x0f127.0.0.1:9103\x02"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := decodeFuzzRingInput(data)
		fuzzRingHash(t, in)
		fuzzMaglev(t, in)
		fuzzSkipper(t, in)
	})
}

func fuzzRingHash(t *testing.T, in fuzzRingInput) {
	r, err := NewRingHash(in.eps, RingHashOptions{MinRingSize: in.minSize, MaxRingSize: in.maxSize, Hash: in.hash, SortByKey: in.sortByKey})
	minSize, maxSize := in.minSize, in.maxSize
	if minSize == 0 {
		minSize = DefaultMinRingSize
	}
	if maxSize == 0 {
		maxSize = DefaultMaxRingSize
	}
	want := expectedEndpointError(in.eps, true)
	switch {
	case want != nil:
	case in.hash != XXHash && in.hash != MurmurHash2:
		want = ErrUnknownHashFunction
	case minSize > MaxRingSizeLimit || maxSize > MaxRingSizeLimit || minSize > maxSize:
		want = ErrRingSize
	}
	if want != nil {
		if !errors.Is(err, want) {
			t.Fatalf("NewRingHash(%+v) = %v, want an error matching %v", in, err, want)
		}
		return
	}
	if err != nil {
		t.Fatalf("NewRingHash(%+v): %v", in, err)
	}
	if r.NumEndpoints() != len(in.eps) || r.Policy() != PolicyRingHash {
		t.Fatalf("NumEndpoints %d, Policy %q; want %d, %q", r.NumEndpoints(), r.Policy(), len(in.eps), PolicyRingHash)
	}

	// The sizing formula of Envoy's ring_hash_lb.cc: the lightest endpoint
	// gets ceil(minW * minSize) entries, everything scaled alike, capped
	// by maxSize; walking the endpoints, each takes entries until the
	// running count reaches the running target.
	var sum uint64
	for _, ep := range in.eps {
		sum += uint64(ep.Weight)
	}
	total := float64(sum)
	minW := 1.0
	for _, ep := range in.eps {
		minW = min(minW, float64(ep.Weight)/total)
	}
	scale := math.Min(math.Ceil(minW*float64(minSize))/minW, float64(maxSize))
	order := make([]int, len(in.eps))
	for i := range order {
		order[i] = i
	}
	if in.sortByKey {
		slices.SortFunc(order, func(a, b int) int {
			if in.eps[a].Key < in.eps[b].Key {
				return -1
			}
			return 1
		})
	}
	wantCount := make([]int, len(in.eps))
	var target, taken float64
	for _, i := range order {
		target += float64(scale * (float64(in.eps[i].Weight) / total))
		if c := math.Ceil(target) - taken; c > 0 {
			wantCount[i] = int(c)
			taken += c
		}
	}
	gotCount := make([]int, len(in.eps))
	r.Entries(func(_ uint64, ep int) { gotCount[ep]++ })
	if !slices.Equal(gotCount, wantCount) {
		t.Fatalf("entries per endpoint %v, the scale formula (scale %v) gives %v", gotCount, scale, wantCount)
	}
	// Rounding may add one entry past the cap, as it does in Envoy, and
	// never more.
	if r.Size() != int(taken) || r.Size() > int(maxSize)+1 || float64(r.Size()) < math.Floor(scale)-1 {
		t.Fatalf("%d entries for scale %v, maximum %d", r.Size(), scale, maxSize)
	}
	for i, ep := range in.eps {
		share := scale * float64(ep.Weight) / total
		if c := float64(gotCount[i]); c < math.Floor(share)-1 || c > math.Ceil(share)+1 {
			t.Fatalf("endpoint %d (weight %d of %d) holds %v entries, its share of a ring of %v is %v", i, ep.Weight, sum, c, scale, share)
		}
	}
	if scale < float64(maxSize) {
		// Not capped: the lightest endpoint got at least one entry, and
		// the ring is at least the minimum.
		if slices.Contains(gotCount, 0) || float64(r.Size())+1 < float64(minSize) {
			t.Fatalf("uncapped ring (scale %v, minimum %d) of %d entries: per endpoint %v", scale, minSize, r.Size(), gotCount)
		}
	}
	checkSortedRing(t, r, in.probes)
}

func fuzzMaglev(t *testing.T, in fuzzRingInput) {
	m, err := NewMaglev(in.eps, in.tableSize)
	size := in.tableSize
	if size == 0 {
		size = DefaultMaglevTableSize
	}
	want := expectedEndpointError(in.eps, true)
	if want == nil && (size > MaxMaglevTableSize || !fuzzIsPrime(size)) {
		want = ErrTableSize
	}
	if want != nil {
		if !errors.Is(err, want) {
			t.Fatalf("NewMaglev(%d endpoints, %d) = %v, want an error matching %v", len(in.eps), in.tableSize, err, want)
		}
		return
	}
	if err != nil {
		t.Fatalf("NewMaglev(%d endpoints, %d): %v", len(in.eps), in.tableSize, err)
	}
	if m.Size() != int(size) || m.NumEndpoints() != len(in.eps) || m.Policy() != PolicyMaglev {
		t.Fatalf("Size %d, NumEndpoints %d, Policy %q; want %d, %d, %q", m.Size(), m.NumEndpoints(), m.Policy(), size, len(in.eps), PolicyMaglev)
	}
	var table []int
	m.Entries(func(slot uint64, ep int) {
		if slot != uint64(len(table)) {
			t.Fatalf("Entries lists slot %d at position %d", slot, len(table))
		}
		table = append(table, ep)
	})
	count := make([]int, len(in.eps))
	for slot, ep := range table {
		if ep < 0 || ep >= len(in.eps) {
			t.Fatalf("slot %d is owned by endpoint %d of %d", slot, ep, len(in.eps))
		}
		count[ep]++
	}
	// Every endpoint takes a slot in the first round, while the table has
	// room; after that an endpoint takes slots as often as its weight
	// allows, so a heavier endpoint never trails a lighter one by more than
	// the one slot of an unfinished last round.
	for i, a := range in.eps {
		if count[i] == 0 && len(in.eps) <= int(size) {
			t.Fatalf("endpoint %d has no slot in a table of %d for %d endpoints", i, size, len(in.eps))
		}
		for j, b := range in.eps {
			if a.Weight >= b.Weight && count[i]+1 < count[j] {
				t.Fatalf("endpoint %d (weight %d) has %d slots, endpoint %d (weight %d) %d", i, a.Weight, count[i], j, b.Weight, count[j])
			}
		}
	}
	owners := map[int]bool{}
	for i, c := range count {
		if c > 0 {
			owners[i] = true
		}
	}
	for _, h := range append(slices.Clone(in.probes), 0, math.MaxUint64, size-1, size, size+1) {
		if got, want := m.Pick(h), table[h%size]; got != want {
			t.Fatalf("Pick(%#x) = %d, slot %d holds %d", h, got, h%size, want)
		}
		if m.PickAttempt(h, 0) != m.Pick(h) {
			t.Fatalf("PickAttempt(%#x, 0) = %d, Pick %d", h, m.PickAttempt(h, 0), m.Pick(h))
		}
		for _, attempt := range []int{1, 2, 7} {
			if got, want := m.PickAttempt(h, attempt), table[(h^-uint64(attempt))%size]; got != want {
				t.Fatalf("PickAttempt(%#x, %d) = %d, want %d", h, attempt, got, want)
			}
		}
		checkWalk(t, m, h, owners)
	}
}

func fuzzSkipper(t *testing.T, in fuzzRingInput) {
	s, err := NewSkipper(in.eps)
	if want := expectedEndpointError(in.eps, false); want != nil {
		if !errors.Is(err, want) {
			t.Fatalf("NewSkipper(%+v) = %v, want an error matching %v", in.eps, err, want)
		}
		return
	}
	if err != nil {
		t.Fatalf("NewSkipper(%+v): %v", in.eps, err)
	}
	if s.Size() != SkipperVnodes*len(in.eps) || s.NumEndpoints() != len(in.eps) || s.Policy() != PolicySkipper {
		t.Fatalf("Size %d, NumEndpoints %d, Policy %q for %d endpoints", s.Size(), s.NumEndpoints(), s.Policy(), len(in.eps))
	}
	count := make([]int, len(in.eps))
	s.Entries(func(_ uint64, ep int) { count[ep]++ })
	for i, c := range count {
		if c != SkipperVnodes {
			t.Fatalf("endpoint %d has %d virtual nodes, want %d", i, c, SkipperVnodes)
		}
	}
	checkSortedRing(t, s, in.probes)
	for _, h := range in.probes {
		// Excluding nothing is a pick; excluding the pick is the next
		// endpoint of the walk; excluding everything is -1.
		if got := s.PickExcluding(h, func(int) bool { return false }); got != s.Pick(h) {
			t.Fatalf("PickExcluding(%#x, none) = %d, Pick %d", h, got, s.Pick(h))
		}
		if got := s.PickExcluding(h, func(int) bool { return true }); got != -1 {
			t.Fatalf("PickExcluding(%#x, all) = %d, want -1", h, got)
		}
	}
}

// fuzzIsPrime is trial division written out again, so that the table size
// check is not IsPrime judging itself.
func fuzzIsPrime(n uint64) bool {
	if n < 2 {
		return false
	}
	for d := uint64(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}
