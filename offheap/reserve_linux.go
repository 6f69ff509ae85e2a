package offheap

import "golang.org/x/sys/unix"

// mapNoReserve keeps Retire's reservation out of the kernel's overcommit
// accounting: it is as large as the map file, and nearly all of it is
// never written.
const mapNoReserve = unix.MAP_NORESERVE
