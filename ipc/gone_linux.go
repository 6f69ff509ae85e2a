package ipc

import (
	"bytes"
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// processGone reports whether no live process has this pid: none at all,
// or only a zombie waiting to be reaped, which will never touch a node
// again. A pid reused by another process reads as live, which only keeps
// the dead one's nodes out of reach.
func processGone(pid uint64) bool {
	if pid == 0 || pid >= voidedNode {
		return false
	}
	if err := unix.Kill(int(pid), 0); errors.Is(err, unix.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.FormatUint(pid, 10) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')', as comm may
	// hold parentheses and spaces.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
