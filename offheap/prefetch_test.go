//go:build linux

package offheap

import (
	"bytes"
	"testing"
)

// TestPrefetchForWriteChangesNothing: the hints (PrefetchForWrite,
// PrefetchForRead, PrefetchWordsForRead) return, and leaves every
// byte as it was, for empty, unaligned and odd-length ranges, up to the
// mapping's last byte. (The instruction is hand-encoded: a wrong byte could
// make it a store, or the loop run off its range or never end.)
func TestPrefetchForWriteChangesNothing(t *testing.T) {
	const size = 3 * 4096
	r := mapTemp(t, size)
	all := r.Bytes(0, size)
	for i := range all {
		all[i] = byte(i*7 + 3)
	}
	want := bytes.Clone(all)
	for _, hint := range []struct {
		name     string
		prefetch func([]byte)
	}{{"PrefetchForWrite", PrefetchForWrite}, {"PrefetchForRead", PrefetchForRead}} {
		hint.prefetch(nil)
		for _, c := range [][2]int{{0, 0}, {5, 0}, {0, 1}, {63, 2}, {1, 1023}, {100, 4096}, {0, size}, {size - 1, 1}, {size - 200, 200}} {
			hint.prefetch(all[c[0] : c[0]+c[1]])
		}
		hint.prefetch(make([]byte, 70)) // the Go heap too
		if !bytes.Equal(all, want) {
			t.Fatalf("%s changed the mapping's bytes", hint.name)
		}
	}
	words := r.Uint64s(0, size/8)
	PrefetchWordsForRead(&words[0], &words[1], &words[len(words)/2], &words[len(words)-1])
	if !bytes.Equal(all, want) {
		t.Fatal("PrefetchWordsForRead changed the mapping's bytes")
	}
}
