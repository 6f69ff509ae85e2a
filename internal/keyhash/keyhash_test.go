package keyhash

import (
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
