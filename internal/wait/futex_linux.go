//go:build linux

package wait

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futex operations without FUTEX_PRIVATE_FLAG, so that they key on the
// physical page and reach waiters in every process mapping the file.
const (
	futexWait = 0 // FUTEX_WAIT
	futexWake = 1 // FUTEX_WAKE
)

// Sleep blocks while *addr == expected, for at most timeout. It returns on a
// wake, a change of the word, the timeout, or spuriously: the caller must
// re-check its condition. EINTR (Go's preemption signal SIGURG causes it
// often) is absorbed by recomputing the remaining time, because the kernel
// does not shorten a relative timeout on restart.
func Sleep(addr *uint32, expected uint32, timeout time.Duration) {
	if timeout <= 0 {
		return
	}
	deadline := time.Now().Add(timeout)
	for {
		ts := unix.NsecToTimespec(int64(timeout))
		_, _, errno := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait,
			uintptr(expected), uintptr(unsafe.Pointer(&ts)), 0, 0)
		if errno != unix.EINTR {
			return // woken, EAGAIN (value changed) or ETIMEDOUT
		}
		timeout = time.Until(deadline)
		if timeout <= 0 {
			return
		}
	}
}

// Wake wakes up to n sleepers on addr, in any process. It returns how many
// were woken.
func Wake(addr *uint32, n int) int {
	woken, _, errno := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake,
		uintptr(n), 0, 0, 0)
	if errno != 0 {
		return 0
	}
	return int(woken)
}

// WakeAll wakes every sleeper on addr.
func WakeAll(addr *uint32) int { return Wake(addr, 1<<30) }

// osYield gives the CPU to another runnable thread of any process.
func osYield() { _, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
