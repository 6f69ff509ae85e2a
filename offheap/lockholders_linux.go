//go:build linux

package offheap

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockHolder is one lock on a file, as the kernel lists it in /proc/locks.
type LockHolder struct {
	Kind  string // FLOCK (flock(2)), POSIX (fcntl F_SETLK, lockf) or OFDLCK (F_OFD_SETLK)
	Write bool   // an exclusive lock; else a shared (read) one
	PID   int    // the process that took it; -1 for OFD locks, which belong to no process
	Start int64  // the first byte it covers
	End   int64  // the last byte it covers; -1 for "to the end of the file and beyond"
}

// String says the lock as a person reads it: "POSIX read lock on bytes
// 0..EOF by pid 1234".
func (l LockHolder) String() string {
	mode := "read"
	if l.Write {
		mode = "write"
	}
	end := "EOF"
	if l.End >= 0 {
		end = strconv.FormatInt(l.End, 10)
	}
	who := fmt.Sprintf("by pid %d", l.PID)
	if l.PID <= 0 {
		who = "by an open file description (the kernel does not say whose)"
	}
	return fmt.Sprintf("%s %s lock on bytes %d..%s %s", l.Kind, mode, l.Start, end, who)
}

// LockHolders lists the locks that processes hold on the file open as fd,
// from /proc/locks: for error messages and Check, which name what blocks a
// writer or what a reader holds. It returns nil where /proc/locks cannot be
// read.
func LockHolders(fd uintptr) []LockHolder {
	var st unix.Stat_t
	if err := unix.Fstat(int(fd), &st); err != nil {
		return nil
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []LockHolder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "1: POSIX  ADVISORY  READ 4088 fe:00:9978413 0 EOF"; a lock that a
		// waiter is blocked on has a "->" after the number.
		fields := strings.Fields(sc.Text())
		if len(fields) > 1 && fields[1] == "->" {
			continue
		}
		if len(fields) != 8 || fields[5] != id {
			continue
		}
		pid, _ := strconv.Atoi(fields[4])
		start, _ := strconv.ParseInt(fields[6], 10, 64)
		end := int64(-1)
		if fields[7] != "EOF" {
			end, _ = strconv.ParseInt(fields[7], 10, 64)
		}
		out = append(out, LockHolder{Kind: fields[1], Write: fields[3] == "WRITE", PID: pid, Start: start, End: end})
	}
	return out
}

// lockHoldersText is " (...)" naming the locks of the given kind on fd's
// file, or "" if none is listed.
func lockHoldersText(fd *os.File, kind string) string {
	var says []string
	for _, l := range LockHolders(fd.Fd()) {
		if l.Kind == kind {
			says = append(says, l.String())
		}
	}
	if len(says) == 0 {
		return ""
	}
	return " (" + strings.Join(says, "; ") + ")"
}
