//go:build linux

package segment

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestEntryChecksumOnePassOrStreamed: small entries are checksummed from a
// stack copy (in one of two buffers), large ones streamed, those with
// 16-byte keys in place (keyhash.Entry); every path must give what files
// already hold, the low 32 bits of XXH64 over head, key and value (never
// 0).
func TestEntryChecksumOnePassOrStreamed(t *testing.T) {
	head := []byte("lengths+nch!")
	for _, klen := range []int{8, 15, 16, 17} {
		for _, n := range []int{0, 1, 3, 4, 5, 63, 64, smallChecksumBytes - len(head) - 8, smallChecksumBytes - len(head) - 7,
			checksumStackBytes - 40, checksumStackBytes - len(head) - 8, checksumStackBytes, 3 * checksumStackBytes} {
			key := make([]byte, klen)
			for i := range key {
				key[i] = byte(0xA0 + i)
			}
			value := make([]byte, n)
			for i := range value {
				value[i] = byte(i * 7)
			}
			whole := append(append(append([]byte(nil), head...), key...), value...)
			want := uint32(xxhash.Sum64(whole))
			if want == 0 {
				want = 1
			}
			if got := entryChecksum(head, key, value); got != want {
				t.Errorf("key of %d bytes, value of %d: checksum %#x, want %#x", klen, n, got, want)
			}
		}
	}
}

// TestRequestEntryLinesStaysInTheFile: Prefetch requests the lines an
// average entry would cover before it knows the entry's length, so an entry
// at the end of the tiers area must not make it read past the mapping.
func TestRequestEntryLinesStaysInTheFile(t *testing.T) {
	for _, p := range []Params{
		{Entries: 100, AverageKeySize: 8, AverageValueSize: 40, MaxBloatFactor: 1},
		{Entries: 100, AverageKeySize: 8, AverageValueSize: 1000, MaxBloatFactor: 1},
		{Entries: 100, AverageKeySize: 8, AverageValueSize: 40, MaxBloatFactor: 1, Cache: true},
	} {
		tb, _ := newTable(t, p)
		want := min(int64(p.AverageValueSize), maxLinesAhead*64)
		if p.Cache {
			want = min(int64(p.AverageValueSize)+metaSize, maxLinesAhead*64)
		}
		if tb.layout.expectedValue != want {
			t.Errorf("%+v: expected value %d, want %d", p, tb.layout.expectedValue, want)
		}
		end := int64(len(tb.tierBytes))
		for _, at := range []int64{end - entryHeaderSize - 8, end - 64, end - 65, end - 200} {
			tb.requestEntryLines(at, 8)
		}
	}
}

// TestAllocIsFirstFit: alloc, which steps over runs of free and used
// chunks a word at a time, finds the run a chunk-by-chunk first fit finds,
// from the lowest-free hint, for random bitmaps of every density, runs that
// cross words, end at the tier's end or do not fit at all.
func TestAllocIsFirstFit(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for trial := range 20000 {
		chunks := int64(64 * (1 + r.IntN(4)))
		tv := tier{header: make([]uint64, tierHeaderSize/8), bitmap: make([]uint64, chunks/64)}
		used := r.Float64()
		var count uint64
		for c := range chunks {
			if r.Float64() < used {
				tv.bitmap[c>>6] |= 1 << (c & 63)
				count++
			}
		}
		tv.header[thUsedChunks/8] = count
		lowest := int64(r.IntN(int(chunks)))
		if r.IntN(2) == 0 {
			lowest = 0
		}
		tv.setLowestFree(lowest)
		n := int64(1 + r.IntN(70))
		want := int64(-1)
		for c, run := lowest, int64(0); c < chunks; c++ {
			if tv.bitmap[c>>6]>>(c&63)&1 == 1 {
				run = 0
				continue
			}
			if run++; run == n {
				want = c - n + 1
				break
			}
		}
		before := slices.Clone(tv.bitmap)
		got := tv.alloc(n, chunks)
		if got != want {
			t.Fatalf("trial %d: %d chunks, %.2f used, lowest free %d: alloc(%d) = %d, first fit %d", trial, chunks, used, lowest, n, got, want)
		}
		if got < 0 {
			if !slices.Equal(before, tv.bitmap) {
				t.Fatalf("trial %d: a failed alloc changed the bitmap", trial)
			}
			continue
		}
		for c := got; c < got+n; c++ {
			if tv.bitmap[c>>6]>>(c&63)&1 != 1 {
				t.Fatalf("trial %d: chunk %d of the run at %d not marked", trial, c, got)
			}
		}
		if tv.usedChunks() != count+uint64(n) {
			t.Fatalf("trial %d: %d chunks used, want %d", trial, tv.usedChunks(), count+uint64(n))
		}
	}
}

// TestDamagedTierNeverPanics: the allocator's lowest-free hint and the
// entries compaction gathers come from the file; damaged, they must give
// an empty search or ErrCorrupt, never an index out of range, and a
// compaction that refuses must leave the tier as it was.
func TestDamagedTierNeverPanics(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	tv := tb.tier(0)
	tv.header[thLowestFree/8] = 1 << 63
	if c := tv.alloc(1, tb.layout.Chunks); c != -1 {
		t.Errorf("alloc with a damaged hint = %d, want -1", c)
	}
	tv.setLowestFree(0)

	// Two slots naming one entry of over half the tier: together more
	// chunks than the tier has.
	big := make([]byte, tb.layout.MaxEntryBytes()*6/10)
	k := []byte("big-key!")
	if _, err := s.put(hashOf(k), k, big, Replace); err != nil {
		t.Fatal(err)
	}
	pos := slices.IndexFunc(tv.slots, func(v uint64) bool { return v != 0 })
	free := slices.Index(tv.slots, 0)
	tv.slots[free] = tv.slots[pos]
	before := slices.Clone(tv.space)
	if err := s.compact(&tv); !errors.Is(err, ErrCorrupt) {
		t.Errorf("compacting a tier whose slots name more chunks than it has: %v, want ErrCorrupt", err)
	}
	if !bytes.Equal(before, tv.space) {
		t.Error("the refused compaction changed the entry space")
	}
}
