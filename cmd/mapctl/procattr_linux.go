package main

import "syscall"

// workerProcAttr makes a worker process die with the process that started
// it, so that a killed mapctl leaves no worker running.
func workerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
