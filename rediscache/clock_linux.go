//go:build linux

package rediscache

import (
	"time"

	"golang.org/x/sys/unix"
)

// The clock is CLOCK_MONOTONIC in nanoseconds: one clock for every process
// of the host, so that a watermark one process publishes compares with
// another's now, and immune to wall-clock steps. unix.ClockGettime reads it
// with a system call, which would be most of a hit's time; Go's own
// monotonic readings (time.Since) come from the same clock through the
// vDSO but count from an origin of the process's own. So the process
// reads the system call once, next to a time.Now, and adds time.Since that
// reading afterwards: the same clock, off by at most half the calibration's
// window.
var clockBase = calibrate()

type clockOrigin struct {
	ref time.Time // carries Go's monotonic reading
	abs uint64    // CLOCK_MONOTONIC at ref
}

// calibrate pairs a CLOCK_MONOTONIC reading with a time.Now, keeping the
// pair of several attempts read closest together.
func calibrate() clockOrigin {
	var best clockOrigin
	window := time.Duration(1<<63 - 1)
	for range 8 {
		t1 := time.Now()
		abs := sysMono()
		t2 := time.Now()
		if d := t2.Sub(t1); d < window {
			window, best = d, clockOrigin{ref: t1.Add(d / 2), abs: abs}
		}
	}
	return best
}

// sysMono reads CLOCK_MONOTONIC with a system call.
func sysMono() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("rediscache: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// monoNow is CLOCK_MONOTONIC now, in nanoseconds.
func monoNow() uint64 { return clockBase.abs + uint64(time.Since(clockBase.ref)) }

// alive reports whether a process with this pid exists (EPERM: it exists
// under another user).
func alive(pid uint64) bool {
	if pid == 0 || pid > 1<<22 {
		return false
	}
	return unix.Kill(int(pid), 0) != unix.ESRCH
}
