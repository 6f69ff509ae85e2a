//go:build !linux

package main

import "syscall"

// workerProcAttr: elsewhere a worker outlives a killed mapctl until its
// start signal fails to come or its run ends.
func workerProcAttr() *syscall.SysProcAttr { return nil }
