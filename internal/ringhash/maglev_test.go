package ringhash

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func mustMaglev(t *testing.T, eps []Endpoint, size uint64) *Maglev {
	t.Helper()
	m, err := NewMaglev(eps, size)
	if err != nil {
		t.Fatalf("NewMaglev: %v", err)
	}
	return m
}

// slotKeys lists the key of the endpoint in each slot.
func slotKeys(m *Maglev, eps []Endpoint) []string {
	var out []string
	m.Entries(func(_ uint64, ep int) { out = append(out, eps[ep].Key) })
	return out
}

func keysAt(eps []Endpoint, idx ...int) []string {
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = eps[j].Key
	}
	return out
}

func assertStrings(t *testing.T, what string, got, want []string) {
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

// Envoy maglev_lb_test.cc Basic, also with the hosts shuffled: the table
// depends on the keys, not on EDS order.
func TestMaglevEnvoyBasic(t *testing.T) {
	eps := localHosts(90, 91, 92, 93, 94, 95)
	want := keysAt(eps, 2, 4, 0, 1, 5, 0, 3)
	m := mustMaglev(t, eps, 7)
	assertStrings(t, "table", slotKeys(m, eps), want)
	for h := uint64(0); h < 14; h++ {
		if got := eps[m.Pick(h)].Key; got != want[h%7] {
			t.Errorf("Pick(%d) = %s, want %s", h, got, want[h%7])
		}
	}

	shuffled := []Endpoint{eps[3], eps[5], eps[0], eps[4], eps[2], eps[1]}
	assertStrings(t, "shuffled table", slotKeys(mustMaglev(t, shuffled, 7), shuffled), want)

	// Retry: h = 10 lands on hosts[1]; attempt 1 looks up 10 ^ (2^64-1).
	if got := m.PickAttempt(10, 0); got != 1 {
		t.Errorf("PickAttempt(10, 0) = %d, want 1", got)
	}
	if got := m.PickAttempt(10, 1); got != 0 {
		t.Errorf("PickAttempt(10, 1) = %d, want 0", got)
	}
	if got, want := m.PickAttempt(10, 3), m.Pick(10^(math.MaxUint64-2)); got != want {
		t.Errorf("PickAttempt(10, 3) = %d, want table[(10 ^ (2^64-3)) %% 7] = %d", got, want)
	}
	if m.Size() != 7 || m.NumEndpoints() != 6 || m.Policy() != "maglev" {
		t.Errorf("Size, NumEndpoints, Policy = %d, %d, %q", m.Size(), m.NumEndpoints(), m.Policy())
	}
}

// Envoy maglev_lb_test.cc with hash keys "90".."95".
func TestMaglevEnvoyHashKeys(t *testing.T) {
	var eps []Endpoint
	for _, k := range []string{"90", "91", "92", "93", "94", "95"} {
		eps = append(eps, Endpoint{Key: k, Weight: 1})
	}
	assertStrings(t, "table", slotKeys(mustMaglev(t, eps, 7), eps), keysAt(eps, 2, 5, 0, 3, 4, 1, 0))
}

// Envoy maglev_lb_test.cc Weighted and WeightedSingleHost.
func TestMaglevEnvoyWeighted(t *testing.T) {
	eps := localHosts(90, 91)
	eps[1].Weight = 2
	m := mustMaglev(t, eps, 17)
	assertStrings(t, "table", slotKeys(m, eps),
		keysAt(eps, 1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1))
	assertInts(t, "slots per host", entryCounts(m, 2), []int{6, 11})

	single := []Endpoint{{Key: "127.0.0.1:90", Weight: 7}}
	assertInts(t, "single host slots", entryCounts(mustMaglev(t, single, 17), 1), []int{17})
}

// Envoy's Maglev docs: weights 1 and 2 on the default table get 21,846 and
// 43,691 of 65,537 slots.
func TestMaglevEnvoyDocsWeights(t *testing.T) {
	eps := localHosts(90, 91)
	eps[1].Weight = 2
	m := mustMaglev(t, eps, 0)
	if m.Size() != 65537 {
		t.Fatalf("Size = %d, want 65537", m.Size())
	}
	assertInts(t, "slots per host", entryCounts(m, 2), []int{21846, 43691})
}

// slot replaces h % size with a multiply; it must agree with % everywhere,
// including the values next to multiples of the size and the extremes.
func TestMaglevSlotMatchesModulo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []uint64{2, 3, 7, 17, 65537, 1000003, MaxMaglevTableSize} {
		m := &Maglev{size: size, reciprocal: math.MaxUint64 / size}
		check := func(h uint64) {
			if got := m.slot(h); got != h%size {
				t.Fatalf("size %d: slot(%d) = %d, want %d", size, h, got, h%size)
			}
		}
		for _, h := range []uint64{0, 1, size - 1, size, size + 1, math.MaxUint64, math.MaxUint64 - 1,
			math.MaxUint64 / size * size, math.MaxUint64/size*size - 1} {
			check(h)
		}
		for i := 0; i < 200000; i++ {
			h := rng.Uint64()
			check(h)
			check(h - h%size) // a multiple of size
			check(h - h%size - 1)
		}
	}
}

func TestMaglevErrors(t *testing.T) {
	ok := localHosts(90)
	for _, c := range []struct {
		name string
		eps  []Endpoint
		size uint64
		want error
	}{
		{"no endpoints", nil, 7, ErrNoEndpoints},
		{"duplicate", []Endpoint{{"a", 1}, {"a", 1}}, 7, ErrDuplicateKey},
		{"zero weight", []Endpoint{{"a", 0}}, 7, ErrZeroWeight},
		{"not prime", ok, 65536, ErrTableSize},
		{"one", ok, 1, ErrTableSize},
		{"too large", ok, 5000017, ErrTableSize}, // prime, but above the limit
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := NewMaglev(c.eps, c.size); !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	if _, err := NewMaglev(ok, MaxMaglevTableSize); err != nil {
		t.Errorf("largest table size rejected: %v", err)
	}
}

func TestIsPrime(t *testing.T) {
	var got []uint64
	for n := uint64(0); n < 50; n++ {
		if IsPrime(n) {
			got = append(got, n)
		}
	}
	want := []uint64{2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47}
	if len(got) != len(want) {
		t.Fatalf("primes below 50 = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("primes below 50 = %v", got)
		}
	}
	for n, want := range map[uint64]bool{65537: true, 1000003: true, 5000011: true, 65535: false, 1000001: false} {
		if IsPrime(n) != want {
			t.Errorf("IsPrime(%d) = %v, want %v", n, !want, want)
		}
	}
}
