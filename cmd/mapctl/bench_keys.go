package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/sharedmap/sharedmap/hashmap"
)

// benchKey writes key number i into key (len(key) >= 8): the number
// scrambled by an odd multiplier (a bijection, so keys stay distinct and
// their first bytes vary), then a fixed filler.
func benchKey(key []byte, i uint64) {
	binary.BigEndian.PutUint64(key, i*0x9e3779b97f4a7c15)
	for j := 8; j < len(key); j++ {
		key[j] = 'k'
	}
}

// Bench values: every byte derives from the key's number i and, in values
// of 24 bytes or more, a version, so that a reader checks the whole value
// against its key and a read torn between two Puts of the key shows:
//
//	bytes 0-7   i, little-endian
//	bytes 8-15  the version, little-endian (values of 24 bytes or more)
//	the rest    words s, s+benchStep, s+2*benchStep, ..., little-endian,
//	            the last one cut short, where s = benchSeed(i, version)
//
// Values under 24 bytes have no version (it is 0), as it would have no
// whole word after it to be checked by: rewrites of them are alike. Words
// rather than bytes, eight bytes a step, keep making and checking a value
// cheap beside the Put or Get it serves; a Put's value is made before its
// clock starts, a Get's checked after.
const benchStep = 0x9e3779b97f4a7c15

// benchSeed mixes a key's number and a version into the first word of a
// value's tail (splitmix64's finalizer: every bit of either moves every
// byte), so that neither a neighbour's value nor another version of the
// key's own matches it.
func benchSeed(i, version uint64) uint64 {
	x := i ^ version*benchStep
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// benchValue makes value (len(value) >= 8) key number i's value of the
// given version (ignored under 24 bytes).
func benchValue(value []byte, i, version uint64) {
	binary.LittleEndian.PutUint64(value, i)
	tail := value[8:]
	if len(tail) >= 16 {
		binary.LittleEndian.PutUint64(tail, version)
		tail = tail[8:]
	} else {
		version = 0
	}
	benchFill(tail, benchSeed(i, version))
}

// benchFill writes the words s, s+benchStep, ... into tail, four at a time
// (twice as fast as one by one).
func benchFill(tail []byte, s uint64) {
	step := uint64(benchStep)
	s1, s2, s3, step4 := s+step, s+2*step, s+3*step, 4*step
	for len(tail) >= 32 {
		w := tail[:32]
		binary.LittleEndian.PutUint64(w, s)
		binary.LittleEndian.PutUint64(w[8:], s1)
		binary.LittleEndian.PutUint64(w[16:], s2)
		binary.LittleEndian.PutUint64(w[24:], s3)
		s, s1, s2, s3 = s+step4, s1+step4, s2+step4, s3+step4
		tail = tail[32:]
	}
	for len(tail) >= 8 {
		binary.LittleEndian.PutUint64(tail, s)
		s += step
		tail = tail[8:]
	}
	for j := range tail {
		tail[j] = byte(s >> (8 * j))
	}
}

// benchValueOK says whether v is a value benchValue makes for key number
// i, of n bytes and any version: every byte is checked.
func benchValueOK(v []byte, i uint64, n int) bool {
	if len(v) != n || binary.LittleEndian.Uint64(v) != i {
		return false
	}
	tail := v[8:]
	var version uint64
	if len(tail) >= 16 {
		version = binary.LittleEndian.Uint64(tail)
		tail = tail[8:]
	}
	return benchTailOK(tail, benchSeed(i, version))
}

// benchTailOK says whether tail holds what benchFill(tail, s) writes. It
// ors the differences of four words at a time and tests once, rather than
// branching on every word.
func benchTailOK(tail []byte, s uint64) bool {
	var diff uint64
	step := uint64(benchStep)
	s1, s2, s3, step4 := s+step, s+2*step, s+3*step, 4*step
	for len(tail) >= 32 {
		w := tail[:32]
		// (^ and | bind alike in Go: the parentheses matter.)
		diff |= (binary.LittleEndian.Uint64(w) ^ s) | (binary.LittleEndian.Uint64(w[8:]) ^ s1) |
			(binary.LittleEndian.Uint64(w[16:]) ^ s2) | (binary.LittleEndian.Uint64(w[24:]) ^ s3)
		s, s1, s2, s3 = s+step4, s1+step4, s2+step4, s3+step4
		tail = tail[32:]
	}
	for len(tail) >= 8 {
		diff |= binary.LittleEndian.Uint64(tail) ^ s
		s += step
		tail = tail[8:]
	}
	for j := range tail {
		diff |= uint64(tail[j] ^ byte(s>>(8*j)))
	}
	return diff == 0
}

// fillBenchMap puts every key, drawing a progress bar on w when it is a
// terminal.
func fillBenchMap(ctx context.Context, m *hashmap.Map, cfg *benchConfig, w io.Writer) error {
	key, value := make([]byte, cfg.KeySize), make([]byte, cfg.ValueSize)
	p := newProgress(w, "filling", "keys", int64(cfg.Entries))
	defer p.done()
	for i := range cfg.Entries {
		benchKey(key, uint64(i))
		benchValue(value, uint64(i), 0)
		if err := m.Put(key, value); err != nil {
			return err
		}
		if i&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("interrupted after %d keys", i)
			}
			p.update(int64(i), int64(i))
		}
	}
	return nil
}
