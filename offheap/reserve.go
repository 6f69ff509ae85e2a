package offheap

import (
	"fmt"
	"hash/maphash"
	"os"
	"slices"
	"sync"
	"unsafe"

	"github.com/edsrzf/mmap-go"
)

// A map's Close retires its mapping (File.Retire): the addresses stay
// reserved, reading zeros, because a lock-free reader may still be reading
// them. Were they never used again, every Open and Close of a map would
// cost the process the mapping's size in address space and one kernel
// mapping for good, and a process that opened and closed a map in a loop
// would fail with ENOMEM once it held vm.max_map_count mappings.
//
// So a retired reservation waits here, and the next mapping of the same
// map file (same inode, same creation, same size) in this process is made
// over it. A late reader of the closed map then reads that file at the
// places it was reading, as it would have if Close had come later, and its
// only writes, a lookup counter and a cache entry's reference bit, are
// ones the file allows any process at any time; it reports ErrClosed all
// the same. A reservation is never used for another file, whose bytes at
// those places would mean something else, nor read-only after a writable
// mapping, whose late writers would fault.

// reservationKey names a map file and its mapping: the file by device and
// inode, and by its creation, so that a file that took the inode of a
// deleted one does not match, with its format version and layout, which
// give its bytes their meaning (an upgrade in place changes them); the
// mapping by its size.
type reservationKey struct {
	dev, ino uint64
	created  int64
	pid      uint32
	version  uint32
	layout   uint64 // maphash of the layout record
	size     int64
}

// layoutSeed hashes layout records for reservationKey, within this process.
var layoutSeed = maphash.MakeSeed()

// reservation is a retired mapping's addresses, reading zeros.
type reservation struct {
	data mmap.MMap
	// writable: the mapping retired was writable, so a late reader may
	// write through it; only a writable mapping may be made over it.
	writable bool
}

var reservations struct {
	sync.Mutex
	free map[reservationKey][]reservation
}

// keyOf is the reservation key of fd, whose header is h, mapped for size
// bytes; ok is false where the platform cannot tell (nothing is reused).
func keyOf(fd *os.File, h *header, size int64) (reservationKey, bool) {
	dev, ino, ok := fileID(fd)
	if !ok {
		return reservationKey{}, false
	}
	return reservationKey{dev: dev, ino: ino, created: h.created, pid: h.pid, version: h.version,
		layout: maphash.Bytes(layoutSeed, h.layout), size: size}, true
}

// keep puts the retired mapping data of key in the pool.
func keep(key reservationKey, data mmap.MMap, writable bool) {
	reservations.Lock()
	defer reservations.Unlock()
	if reservations.free == nil {
		reservations.free = make(map[reservationKey][]reservation)
	}
	reservations.free[key] = append(reservations.free[key], reservation{data: data, writable: writable})
}

// mapMapFile maps the first size bytes of fd, a map file whose header is
// h, over a reservation a mapping of the same file retired when there is
// one that may be used so, else at new addresses. Either way the region
// returns its addresses to the pool when it is retired or released.
func mapMapFile(fd *os.File, h *header, size int64, writable bool) (*Region, error) {
	if key, ok := keyOf(fd, h, size); ok {
		r, err := mapOverReservation(fd, key, writable)
		if r != nil || err != nil {
			return r, err
		}
	}
	return mapNewMapFile(fd, h, size, writable)
}

// mapNewMapFile maps the first size bytes of fd, a map file whose header
// is h, at new addresses, which return to the pool when the region is
// retired (where the platform can name the file).
func mapNewMapFile(fd *os.File, h *header, size int64, writable bool) (*Region, error) {
	r, err := mapFile(fd, size, writable)
	if err != nil {
		return nil, err
	}
	if key, ok := keyOf(fd, h, size); ok {
		r.key = &key
	}
	return r, nil
}

// testMapFileOver, if set, stands in for mapFileOver in
// mapOverReservation, so that tests can make the kernel refuse.
var testMapFileOver func(fd *os.File, off int64, addr unsafe.Pointer, n uintptr, readOnly bool) error

// mapOverReservation maps fd over a reservation of key that a mapping
// writable or not may use, taking it from the pool. It returns nil, and
// no error, when there is none, when the file is shorter than the mapping
// (mapFile then says so), or when the kernel refused but the reservation
// could be made again (it goes back to the pool). It fails only if the
// kernel refused both: the addresses may then be a hole that anything
// mapped later could land in under the late readers, and Open had better
// say so than go on.
func mapOverReservation(fd *os.File, key reservationKey, writable bool) (*Region, error) {
	if st, err := fd.Stat(); err != nil || st.Size() < key.size {
		return nil, nil
	}
	reservations.Lock()
	rs := reservations.free[key]
	// Like for like: a writable mapping takes a read-only mapping's
	// reservation only when no writable one's is left, which a read-only
	// mapping could not use.
	i := slices.IndexFunc(rs, func(r reservation) bool { return r.writable == writable })
	if i < 0 && writable {
		i = len(rs) - 1
	}
	if i < 0 {
		reservations.Unlock()
		return nil, nil
	}
	res := rs[i]
	rs = append(rs[:i], rs[i+1:]...)
	if len(rs) == 0 {
		delete(reservations.free, key)
	} else {
		reservations.free[key] = rs
	}
	reservations.Unlock()
	over := mapFileOver
	if testMapFileOver != nil {
		over = testMapFileOver
	}
	addr, n := unsafe.Pointer(&res.data[0]), uintptr(len(res.data))
	err := over(fd, 0, addr, n, !writable)
	if err == nil {
		return &Region{data: res.data, readOnly: !writable, key: &key, reused: true}, nil
	}
	// A refused MAP_FIXED may or may not have unmapped the range first:
	// reserve it again for the late readers.
	if zerr := mapZerosOver(addr, n); zerr != nil {
		return nil, fmt.Errorf("mmap over a retired mapping's addresses: %w; reserving them again: %v", err, zerr)
	}
	keep(key, res.data, res.writable)
	return nil, nil
}
