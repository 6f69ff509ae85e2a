//go:build linux

package rediscache

import "golang.org/x/sys/unix"

// monoNow reads CLOCK_MONOTONIC in nanoseconds: one clock for every process
// of the host, so a watermark one process publishes compares with another's
// now, and immune to wall-clock steps.
func monoNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("rediscache: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// alive reports whether a process with this pid exists (EPERM: it exists
// under another user).
func alive(pid uint64) bool {
	if pid == 0 || pid > 1<<22 {
		return false
	}
	return unix.Kill(int(pid), 0) != unix.ESRCH
}
