//go:build linux

package rediscache

import (
	"testing"
	"time"
)

// monoNow must agree with CLOCK_MONOTONIC read by the system call, which
// other processes compare it with.
func TestMonoNowIsClockMonotonic(t *testing.T) {
	for range 100 {
		a := sysMono()
		m := monoNow()
		b := sysMono()
		const slack = uint64(100 * time.Microsecond)
		if m+slack < a || m > b+slack {
			t.Fatalf("monoNow %d outside the system call's readings [%d, %d]", m, a, b)
		}
	}
}
