package ringhash

import "encoding/binary"

// murmurSeed is Envoy's MurmurHash::STD_HASH_SEED, the seed libstdc++ uses
// for std::hash<std::string> (source/common/common/hash.h).
const murmurSeed = 0xc70f6907

// murmurHash2 is the 64-bit MurmurHash2 variant of libstdc++'s _Hash_bytes
// (libsupc++/hash_bytes.cc, the size_t == 8 branch), which Envoy copies as
// MurmurHash::murmurHash2 for ring_hash's MURMUR_HASH_2. Words are read
// little-endian, as on the x86-64 and arm64 hosts Envoy runs on.
func murmurHash2(b []byte, seed uint64) uint64 {
	const mul = uint64(0xc6a4a793)<<32 + 0x5bd1e995
	shiftMix := func(v uint64) uint64 { return v ^ (v >> 47) }

	n := len(b)
	h := seed ^ (uint64(n) * mul)
	for len(b) >= 8 {
		data := shiftMix(binary.LittleEndian.Uint64(b)*mul) * mul
		h ^= data
		h *= mul
		b = b[8:]
	}
	if len(b) > 0 {
		// load_bytes: the tail as a little-endian integer of len(b) bytes.
		var data uint64
		for i := len(b) - 1; i >= 0; i-- {
			data = data<<8 | uint64(b[i])
		}
		h ^= data
		h *= mul
	}
	h = shiftMix(h) * mul
	return shiftMix(h)
}
