package keyhash

import (
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// The file format is built on xxhash.Sum64: a key hashed differently here
// would be looked for in the wrong segment and slot, and not found.
func TestSum64IsXXH64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 80)
	for n := 0; n <= len(buf); n++ {
		for range 200 {
			for i := range buf[:n] {
				buf[i] = byte(r.Uint32())
			}
			key := buf[:n]
			if got, want := Sum64(key), xxhash.Sum64(key); got != want {
				t.Fatalf("Sum64(%x) = %#x, xxhash says %#x", key, got, want)
			}
			got := Inline(key)
			if n == 16 && got != xxhash.Sum64(key) || n != 16 && got != 0 {
				t.Fatalf("Inline(%x) = %#x (xxhash: %#x)", key, got, xxhash.Sum64(key))
			}
		}
	}
}

func FuzzSum64(f *testing.F) {
	f.Add([]byte("0123456789abcdef"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, key []byte) {
		if got, want := Sum64(key), xxhash.Sum64(key); got != want {
			t.Fatalf("Sum64(%x) = %#x, xxhash says %#x", key, got, want)
		}
	})
}
