//go:build !linux

package wait

import (
	"runtime"
	"time"
)

// Sleep naps for a short while; without a cross-process futex the caller
// polls. The nap is capped so that a release is noticed quickly.
func Sleep(addr *uint32, expected uint32, timeout time.Duration) {
	if timeout > time.Millisecond {
		timeout = time.Millisecond
	}
	time.Sleep(timeout)
}

// Wake is a no-op where sleepers poll.
func Wake(addr *uint32, n int) int { return 0 }

// WakeAll is a no-op where sleepers poll.
func WakeAll(addr *uint32) int { return 0 }

func osYield() { runtime.Gosched() }
