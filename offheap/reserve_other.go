//go:build !linux

package offheap

// mapNoReserve: MAP_NORESERVE is Linux's (see reserve_linux.go).
const mapNoReserve = 0
