// Package keyhash hashes map keys: xxhash.Sum64 (XXH64, seed 0), the hash
// every file's layout is built on, computed without a call for short keys.
//
// github.com/cespare/xxhash/v2 computes Sum64 in assembly on amd64 and
// arm64. From Go code that is an ABI0 call behind a wrapper, and Go keeps
// no register across any call, so every lookup that hashes its key spills
// and reloads whatever it holds around it: about 55 instructions of a
// 434-instruction Get with a 16-byte key (counted by single-stepping
// BenchmarkMap's loop in gdb, 2026-11-24). Keys are mostly short, and for
// fewer than 32 bytes XXH64 is one multiply-rotate round per 8 bytes plus a
// final mix, which Go inlines into the caller. Longer keys go to the
// library, where the call is a small part of the work.
package keyhash

import (
	"encoding/binary"
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// XXH64's primes.
const (
	prime1 uint64 = 11400714785074694791
	prime2 uint64 = 14029467366897019727
	prime3 uint64 = 1609587929392839161
	prime4 uint64 = 9650029242287828579
	prime5 uint64 = 2870177450012600261
)

// Sum64 is xxhash.Sum64(key): bit for bit the same value for every key.
func Sum64(key []byte) uint64 {
	if h := Inline(key); h != 0 {
		return h
	}
	return xxhash.Sum64(key)
}

// Inline is Sum64 for a key of 16 bytes (a UUID, two integers), computed
// without a call, and 0 for other keys: a lookup that counts its
// instructions calls it first and Sum64 only when it returns 0 (which a
// 16-byte key hashes to with probability 2^-64, and then Sum64 answers 0
// again). Sum64 itself is too large for Go to inline.
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
