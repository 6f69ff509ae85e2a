package segment

import (
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestEntryChecksumOnePassOrStreamed: small entries are checksummed from a
// stack copy (in one of two buffers), large ones streamed; every path must
// give what files already hold, the low 32 bits of XXH64 over head, key and
// value (never 0).
func TestEntryChecksumOnePassOrStreamed(t *testing.T) {
	head := []byte("lengths+nch!")
	for _, n := range []int{0, 1, 63, 64, smallChecksumBytes - len(head) - 8, smallChecksumBytes - len(head) - 7,
		checksumStackBytes - 40, checksumStackBytes - len(head) - 8, checksumStackBytes, 3 * checksumStackBytes} {
		key := make([]byte, 8)
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
			t.Errorf("value of %d bytes: checksum %#x, want %#x", n, got, want)
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
