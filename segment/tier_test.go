package segment

import (
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestEntryChecksumOnePassOrStreamed: small entries are checksummed from a
// stack copy, large ones streamed; both must give what files already hold,
// the low 32 bits of XXH64 over head, key and value (never 0).
func TestEntryChecksumOnePassOrStreamed(t *testing.T) {
	head := []byte("lengths+nch!")
	for _, n := range []int{0, 1, 63, 64, checksumStackBytes - 40, checksumStackBytes - len(head) - 8, checksumStackBytes, 3 * checksumStackBytes} {
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
