package rwulock

import (
	"fmt"
	"math/bits"
	"testing"

	"github.com/sharedmap/sharedmap/internal/formatdoc"
)

// TestFormatDocMatchesWord holds docs/FORMAT.md's table of the lock word's
// bits to the masks the lock uses.
func TestFormatDocMatchesWord(t *testing.T) {
	d := formatdoc.Load(t, "..")
	d.Says(t,
		fmt.Sprintf("| 0..%d | read lock count (`ReadCountMask`) |", bits.Len32(ReadCountMask)-1),
		fmt.Sprintf("| %d | update lock held (`UpdateFlag`) |", bits.TrailingZeros32(UpdateFlag)),
		fmt.Sprintf("| %d | write lock held (`WriteFlag`) |", bits.TrailingZeros32(WriteFlag)),
		"| 32..63 | wait count",
	)
}
