package ringhash

import (
	"math/bits"
	"testing"
)

func TestXXH64Vectors(t *testing.T) {
	for in, want := range map[string]uint64{
		"":                         17241709254077376921,
		"a":                        15154266338359012955,
		"foo":                      3728699739546630719,
		"192.168.0.1":              9796628756339057540,
		"127.0.0.1:90_0":           16117243373044804889,
		"127.0.0.1:90_1":           1033482794131418490,
		"http://127.0.0.1:8080-0":  7148619195626912848,
		"http://127.0.0.1:8080-99": 11884494877737845521,
	} {
		if got := HashKey(in); got != want {
			t.Errorf("HashKey(%q) = %d, want %d", in, got, want)
		}
	}
}

// The MurmurHash2 ring vectors pin the function; these cover every tail
// length and the 8-byte loop, checked against the same ring entries.
func TestMurmurHash2TailLengths(t *testing.T) {
	// "127.0.0.1:85_0" is 14 bytes: one word and a 6-byte tail. Its vnodes
	// are entries of Envoy's BasicWithMurmur2 ring.
	if got := murmurHash2([]byte("127.0.0.1:85_0"), murmurSeed); got != 1358027074129602068 {
		t.Errorf("murmur2(127.0.0.1:85_0) = %d, want 1358027074129602068", got)
	}
	if got := murmurHash2([]byte("127.0.0.1:85_1"), murmurSeed); got != 16375050414328759093 {
		t.Errorf("murmur2(127.0.0.1:85_1) = %d, want 16375050414328759093", got)
	}
	// Every length from 0 to 17 gives a distinct hash, and the seed matters.
	seen := map[uint64]int{}
	b := []byte("abcdefghijklmnopq")
	for n := 0; n <= len(b); n++ {
		h := murmurHash2(b[:n], murmurSeed)
		if m, dup := seen[h]; dup {
			t.Errorf("lengths %d and %d collide", m, n)
		}
		seen[h] = n
		if murmurHash2(b[:n], 0) == h {
			t.Errorf("length %d ignores the seed", n)
		}
	}
}

func TestRequestHashVectors(t *testing.T) {
	if got := CombineHash(CombineHash(0, HashKey("foo")), HashKey("bar")); got != 3449051153737634343 {
		t.Errorf("two header policies = %d, want 3449051153737634343", got)
	}
	if got := CombineHash(HashKey("foo"), HashKey("bar")); got != bits.RotateLeft64(HashKey("foo"), 1)^HashKey("bar") {
		t.Errorf("CombineHash is not rotl1(acc) ^ h")
	}
	if got := HashValues([]string{"b", "a"}); got != 8564053812407216358 {
		t.Errorf("Envoy {b,a} = %d, want 8564053812407216358", got)
	}
	if HashValues([]string{"a", "b"}) != HashValues([]string{"b", "a"}) {
		t.Errorf("Envoy header hash depends on value order")
	}
	if got := HashValues([]string{"foo"}); got != HashKey("foo") {
		t.Errorf("one value = %d, want HashKey", got)
	}
	if got := HashValuesGRPC([]string{"b", "a"}); got != 2406410893097639974 {
		t.Errorf("grpc-go {b,a} = %d, want 2406410893097639974", got)
	}
	if got := HashValuesGRPC([]string{"b", "a"}); got != HashKey("b,a") {
		t.Errorf("grpc-go {b,a} is not XXH64(\"b,a\")")
	}
	// HashValues must not reorder the caller's slice.
	vs := []string{"z", "y", "x", "w", "v", "u", "t", "s", "r"}
	_ = HashValues(vs)
	if vs[0] != "z" || vs[8] != "r" {
		t.Errorf("HashValues sorted the caller's slice: %v", vs)
	}
}

func TestPolicyHasher(t *testing.T) {
	foo, bar, baz := HashKey("foo"), HashKey("bar"), HashKey("baz")

	var p PolicyHasher
	if _, ok := p.Sum(); ok {
		t.Fatalf("empty hasher reports a hash")
	}
	p.Add(0, false, false) // missing header: skipped entirely
	p.Add(foo, true, false)
	p.Add(bar, true, false)
	if h, ok := p.Sum(); !ok || h != 3449051153737634343 {
		t.Errorf("foo, bar = %d, %v", h, ok)
	}

	// A terminal policy with a hash stops evaluation.
	p = PolicyHasher{}
	p.Add(foo, true, true)
	if !p.Done() {
		t.Errorf("terminal policy with a hash did not end evaluation")
	}
	p.Add(bar, true, false)
	if h, _ := p.Sum(); h != foo {
		t.Errorf("policy after a terminal one changed the hash")
	}

	// Envoy checks the accumulated hash: a terminal policy that produced
	// nothing still stops evaluation when an earlier policy produced one.
	p = PolicyHasher{}
	p.Add(foo, true, false)
	p.Add(0, false, true)
	p.Add(baz, true, false)
	if h, _ := p.Sum(); !p.Done() || h != foo {
		t.Errorf("terminal without own hash: done %v, hash %d, want foo's", p.Done(), h)
	}
	// A terminal policy with no hash at all does not stop evaluation.
	p = PolicyHasher{}
	p.Add(0, false, true)
	p.Add(baz, true, false)
	if h, ok := p.Sum(); p.Done() || !ok || h != baz {
		t.Errorf("terminal with no hash yet: done %v, hash %d %v", p.Done(), h, ok)
	}
}

func TestSkipperIdentity(t *testing.T) {
	for _, c := range []struct {
		scheme, host string
		port         uint32
		want         string
	}{
		{"http", "10.2.9.103", 8080, "http://10.2.9.103:8080"},
		{"", "10.2.9.103", 8080, "http://10.2.9.103:8080"},
		{"h2c", "2a05:d024:90:1103:6d8f::4", 9090, "h2c://[2a05:d024:90:1103:6d8f::4]:9090"},
		{"http", "[2a05:d024:90:1103:6d8f::4]", 9090, "http://[2a05:d024:90:1103:6d8f::4]:9090"},
		{"https", "svc.example", 443, "https://svc.example:443"},
	} {
		if got := SkipperIdentity(c.scheme, c.host, c.port); got != c.want {
			t.Errorf("SkipperIdentity(%q, %q, %d) = %q, want %q", c.scheme, c.host, c.port, got, c.want)
		}
	}
}

func TestHashFunctionString(t *testing.T) {
	if XXHash.String() != "XX_HASH" || MurmurHash2.String() != "MURMUR_HASH_2" || HashFunction(7).String() != "HashFunction(7)" {
		t.Errorf("HashFunction names: %v %v %v", XXHash, MurmurHash2, HashFunction(7))
	}
}
