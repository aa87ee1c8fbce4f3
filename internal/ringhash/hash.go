package ringhash

import (
	"fmt"
	"math/bits"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// HashFunction selects the hash Envoy's ring_hash applies to ring entries.
type HashFunction int

const (
	// XXHash is XXH64 with seed 0 (Envoy XX_HASH and DEFAULT_HASH).
	XXHash HashFunction = iota
	// MurmurHash2 is libstdc++'s 64-bit MurmurHash2 with seed 0xc70f6907
	// (Envoy MURMUR_HASH_2).
	MurmurHash2
)

// String returns Envoy's enum name for the hash function.
func (f HashFunction) String() string {
	switch f {
	case XXHash:
		return "XX_HASH"
	case MurmurHash2:
		return "MURMUR_HASH_2"
	}
	return "HashFunction(" + strconv.Itoa(int(f)) + ")"
}

func (f HashFunction) sum(b []byte) uint64 {
	if f == MurmurHash2 {
		return murmurHash2(b, murmurSeed)
	}
	return xxhash.Sum64(b)
}

func (f HashFunction) valid() error {
	if f != XXHash && f != MurmurHash2 {
		return fmt.Errorf("%w: %v", ErrUnknownHashFunction, f)
	}
	return nil
}

// xxh64Seed is XXH64 of s with the given seed; Envoy uses seeds for Maglev's
// skip and for chaining the values of one header.
func xxh64Seed(s string, seed uint64) uint64 {
	d := xxhash.NewWithSeed(seed)
	_, _ = d.WriteString(s) // a Digest never returns an error
	return d.Sum64()
}

// appendEntryKey appends the string Envoy and grpc-go hash for ring_hash
// entry i of the endpoint keyed key: key + "_" + decimal(i).
func appendEntryKey(dst []byte, key string, i uint64) []byte {
	dst = append(dst, key...)
	dst = append(dst, '_')
	return strconv.AppendUint(dst, i, 10)
}

// AppendEntryHashes appends the positions of the first n ring_hash entries
// of the endpoint keyed key, in entry order: the hashes Envoy's and
// grpc-go's ring builders give key_0 .. key_{n-1}. An endpoint holding c
// entries holds exactly the first c of them.
func (f HashFunction) AppendEntryHashes(dst []uint64, key string, n uint64) []uint64 {
	var buf []byte
	for i := range n {
		buf = appendEntryKey(buf[:0], key, i)
		dst = append(dst, f.sum(buf))
	}
	return dst
}

// HashKey is the request hash of a single header value, cookie value, source
// IP or query parameter in Envoy's route hash_policy: XXH64 with seed 0.
// Skipper hashes its key the same way.
func HashKey(value string) uint64 { return xxhash.Sum64String(value) }

// HashValues is Envoy's hash of a header that has several values: the values
// are sorted, so their order does not matter, then chained with each hash as
// the next seed (source/common/http/hash_policy.cc HeaderHashMethod,
// source/common/common/hash.h xxHash64 over a span). One value gives the same
// result as HashKey. It returns 0 for no values; Envoy computes no hash then,
// so callers should treat an absent header as "no hash", not as 0.
func HashValues(values []string) uint64 {
	switch len(values) {
	case 0:
		return 0
	case 1:
		return xxhash.Sum64String(values[0])
	}
	var buf [8]string
	sorted := append(buf[:0], values...)
	slices.Sort(sorted)
	var h uint64
	for _, v := range sorted {
		h = xxh64Seed(v, h)
	}
	return h
}

// HashValuesGRPC is grpc-go's hash of a header with several values: the
// values joined with "," in the order received, then XXH64
// (internal/xds/resolver/serviceconfig.go generateHash in v1.85). grpc-go
// skips a header policy whose header is absent, so callers should not call
// this with no values (it would return XXH64 of "").
func HashValuesGRPC(values []string) uint64 {
	if len(values) == 1 {
		return xxhash.Sum64String(values[0])
	}
	d := xxhash.New()
	for i, v := range values {
		if i > 0 {
			_, _ = d.WriteString(",")
		}
		_, _ = d.WriteString(v)
	}
	return d.Sum64()
}

// CombineHash folds the hash h of the next hash policy into the hash acc of
// the policies before it, as Envoy does: rotl64(acc, 1) ^ h. Rotating keeps
// two identical policies from cancelling out. For the first policy pass
// acc = 0, which yields h.
func CombineHash(acc, h uint64) uint64 { return bits.RotateLeft64(acc, 1) ^ h }

// PolicyHasher evaluates a route's ordered hash policies the way Envoy's
// HashPolicyImpl::generateHash does (source/common/http/hash_policy.cc).
// The zero value is ready to use; it is meant for one request.
type PolicyHasher struct {
	hash uint64
	ok   bool
	done bool
}

// Add folds in the next policy's result. ok reports whether the policy
// produced a hash (a missing header produces none and changes nothing).
// terminal is the policy's terminal flag: as in Envoy, a terminal policy ends
// evaluation once any hash exists, even one produced only by earlier
// policies. After that, Done reports true and Add ignores further results.
func (p *PolicyHasher) Add(h uint64, ok, terminal bool) {
	if p.done {
		return
	}
	if ok {
		if p.ok {
			p.hash = CombineHash(p.hash, h)
		} else {
			p.hash, p.ok = h, true
		}
	}
	if terminal && p.ok {
		p.done = true
	}
}

// Done reports whether a terminal policy has ended evaluation, so the
// remaining policies need not be computed.
func (p *PolicyHasher) Done() bool { return p.done }

// Sum returns the request hash and whether any policy produced one. Without
// a hash Envoy and grpc-go pick at random.
func (p *PolicyHasher) Sum() (uint64, bool) { return p.hash, p.ok }

// SkipperIdentity is the string Skipper hashes for an endpoint:
// "scheme://host:port" with IPv6 hosts bracketed. An empty scheme means
// "http", Skipper's default. A host that is already bracketed is kept.
func SkipperIdentity(scheme, host string, port uint32) string {
	if scheme == "" {
		scheme = "http"
	}
	p := strconv.FormatUint(uint64(port), 10)
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		return scheme + "://" + host + ":" + p
	}
	return scheme + "://" + net.JoinHostPort(host, p)
}
