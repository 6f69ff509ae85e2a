//go:build linux

package redistest

import "syscall"

// sysProcAttr kills the server with the test process, so that a test binary
// killed by a timeout leaves no redis-server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
