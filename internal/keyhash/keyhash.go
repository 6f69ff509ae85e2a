// Package keyhash hashes 16-byte map keys with XXH64 (seed 0), the hash
// every file's layout is built on, without a call.
//
// github.com/cespare/xxhash/v2 computes Sum64 in assembly on amd64 and
// arm64. From Go code that is an ABI0 call behind a wrapper, and Go keeps
// no register across any call, so a lookup that hashes its key spills and
// reloads whatever it holds around it: 55 instructions of a Get with a
// 16-byte key, against 32 for Inline (counted by single-stepping
// BenchmarkMap's loop in gdb, 2026-11-24). For 16 bytes XXH64 is two
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
