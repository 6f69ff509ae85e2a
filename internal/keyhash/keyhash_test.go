package keyhash

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// The file format is built on xxhash.Sum64: a key hashed differently here
// would be looked for in the wrong segment and slot, and not found.
// Inline must match it for every 16-byte key and decline every other.
func TestInlineIsXXH64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 80)
	for n := 0; n <= len(buf); n++ {
		for range 200 {
			for i := range buf[:n] {
				buf[i] = byte(r.Uint32())
			}
			key := buf[:n]
			got := Inline(key)
			if n == 16 && got != xxhash.Sum64(key) || n != 16 && got != 0 {
				t.Fatalf("Inline(%x) = %#x (xxhash: %#x)", key, got, xxhash.Sum64(key))
			}
		}
	}
}

func FuzzInline(f *testing.F) {
	f.Add([]byte("0123456789abcdef"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, key []byte) {
		want := uint64(0)
		if len(key) == 16 {
			want = xxhash.Sum64(key)
		}
		if got := Inline(key); got != want {
			t.Fatalf("Inline(%x) = %#x, want %#x", key, got, want)
		}
	})
}

// An entry checksummed differently here than by the library over the
// same bytes would be reported as damaged by every check and recovery.
// Entry must match it for every value length up to 300 (every tail
// shape, several stripes) with a 16-byte key, and decline other lengths.
func TestEntryIsXXH64(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 12+20+300)
	for klen := 0; klen <= 20; klen++ {
		for vlen := 0; vlen <= 300; vlen++ {
			for range 20 {
				for i := range buf {
					buf[i] = byte(r.Uint32())
				}
				checkEntry(t, buf[:12], buf[12:12+klen], buf[12+klen:12+klen+vlen])
			}
		}
	}
}

func checkEntry(t *testing.T, head, key, value []byte) {
	t.Helper()
	lo, hi := binary.LittleEndian.Uint64(head), binary.LittleEndian.Uint32(head[8:])
	got, ok := Entry(lo, hi, key, value)
	want := xxhash.Sum64(append(append(append([]byte(nil), head...), key...), value...))
	if ok != (len(key) == 16 && len(value) >= 4) || ok && got != want || !ok && got != 0 {
		t.Fatalf("Entry(%x, %x, %x) = %#x, %v; xxhash of the stream: %#x", head, key, value, got, ok, want)
	}
}

func FuzzEntry(f *testing.F) {
	f.Add([]byte("lengths+nch!"), []byte("0123456789abcdef"), []byte("a value of some length"))
	f.Add(make([]byte, 12), []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, head, key, value []byte) {
		if len(head) != 12 {
			return
		}
		checkEntry(t, head, key, value)
	})
}
