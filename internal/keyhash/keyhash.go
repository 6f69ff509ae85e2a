// Package keyhash computes XXH64 (seed 0), the hash every file's layout
// and entry checksum is built on, without a call: of 16-byte map keys
// (Inline), and of entries with 16-byte keys (Entry).
//
// github.com/cespare/xxhash/v2 computes Sum64 in assembly on amd64 and
// arm64. From Go code that is an ABI0 call behind a wrapper, and Go keeps
// no register across any call, so a lookup that hashes its key spills and
// reloads whatever it holds around it, and the call and its spills cost a
// Get more instructions than the hash itself. For 16 bytes XXH64 is two
// multiply-rotate rounds and a final mix, small enough for Go to inline;
// keys of other lengths go to the library.
package keyhash

import (
	"encoding/binary"
	"math/bits"
)

// XXH64's primes.
const (
	prime1 uint64 = 11400714785074694791
	prime2 uint64 = 14029467366897019727
	prime3 uint64 = 1609587929392839161
	prime4 uint64 = 9650029242287828579
	prime5 uint64 = 2870177450012600261
)

// Inline is xxhash.Sum64(key) for a key of 16 bytes (a UUID, two
// integers), and 0 for other keys: a lookup that counts its instructions
// calls it first and xxhash.Sum64 only when it returns 0 (which a 16-byte
// key hashes to with probability 2^-64, and then xxhash.Sum64 answers 0
// again). A wrapper doing both would be too large for Go to inline.
func Inline(key []byte) uint64 {
	if len(key) != 16 {
		return 0
	}
	h := bits.RotateLeft64((prime5+16)^bits.RotateLeft64(binary.LittleEndian.Uint64(key)*prime2, 31)*prime1, 27)*prime1 + prime4
	h = bits.RotateLeft64(h^bits.RotateLeft64(binary.LittleEndian.Uint64(key[8:])*prime2, 31)*prime1, 27)*prime1 + prime4
	h = (h ^ h>>33) * prime2
	h = (h ^ h>>29) * prime3
	return h ^ h>>32
}

// Entry is xxhash.Sum64 of the 12 bytes of lo (8, little-endian) and hi
// (4) followed by key and value, for a key of 16 bytes and a value of at
// least 4, without copying them together first; ok is false, and the sum
// 0, for other lengths. An entry checksum covers exactly such a stream
// (the entry header's lengths and chunk count, then key and value), and
// assembling it in a stack buffer for one call of the library cost a
// Put more than the hash: the buffer's zeroing, three copies and the
// call's spills.
func Entry(lo uint64, hi uint32, key, value []byte) (sum uint64, ok bool) {
	if len(key) != 16 || len(value) < 4 {
		return 0, false
	}
	k0, k1 := binary.LittleEndian.Uint64(key), binary.LittleEndian.Uint64(key[8:])
	// The stream's first 32 bytes: lo, hi, key, the value's first 4.
	// (The accumulators start at seed+prime1+prime2, seed+prime2, seed
	// and seed-prime1, with seed 0, in uint64 arithmetic.)
	p1 := prime1
	v1 := round(p1+prime2, lo)
	v2 := round(prime2, uint64(hi)|k0<<32)
	v3 := round(0, k0>>32|k1<<32)
	v4 := round(-p1, k1>>32|uint64(binary.LittleEndian.Uint32(value))<<32)
	rest := value[4:]
	// Indexed stripes, not rest = rest[32:] each time: reslicing keeps
	// the next stripe's address waiting on the masking Go adds so that a
	// slice never points past its array, which puts it on the loop's
	// critical path.
	stripes := len(rest) &^ 31
	for i := 0; i < stripes; i += 32 {
		s := rest[i : i+32 : i+32]
		v1 = round(v1, binary.LittleEndian.Uint64(s))
		v2 = round(v2, binary.LittleEndian.Uint64(s[8:]))
		v3 = round(v3, binary.LittleEndian.Uint64(s[16:]))
		v4 = round(v4, binary.LittleEndian.Uint64(s[24:]))
	}
	rest = rest[stripes:]
	h := bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) + bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
	h = mergeRound(h, v1)
	h = mergeRound(h, v2)
	h = mergeRound(h, v3)
	h = mergeRound(h, v4)
	h += uint64(28 + len(value))
	for ; len(rest) >= 8; rest = rest[8:] {
		h ^= round(0, binary.LittleEndian.Uint64(rest))
		h = bits.RotateLeft64(h, 27)*prime1 + prime4
	}
	if len(rest) >= 4 {
		h ^= uint64(binary.LittleEndian.Uint32(rest)) * prime1
		h = bits.RotateLeft64(h, 23)*prime2 + prime3
		rest = rest[4:]
	}
	for _, b := range rest {
		h ^= uint64(b) * prime5
		h = bits.RotateLeft64(h, 11) * prime1
	}
	h = (h ^ h>>33) * prime2
	h = (h ^ h>>29) * prime3
	return h ^ h>>32, true
}

func round(acc, input uint64) uint64 {
	return bits.RotateLeft64(acc+input*prime2, 31) * prime1
}

func mergeRound(acc, val uint64) uint64 {
	return (acc^round(0, val))*prime1 + prime4
}
