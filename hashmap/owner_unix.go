//go:build unix

package hashmap

import (
	"io/fs"
	"syscall"
)

// fileOwner is the user and group that own the file fi describes; ok is
// false where the platform does not say.
func fileOwner(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
