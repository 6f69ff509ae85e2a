package offheap

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/edsrzf/mmap-go"
)

// Region is a file mapped MAP_SHARED into this process, with bounds-checked
// typed access. Every process that maps the same file sees the same bytes.
//
// Words handed out by Uint64 and Uint32 must only be accessed with
// sync/atomic: other processes read and write them concurrently, and the race
// detector cannot see accesses to mapped memory.
type Region struct {
	data     mmap.MMap
	readOnly bool
	retired  bool // data is a reservation of zeros now, never to be unmapped (see Retire)
	// key names the map file mapped, for the pool of reservations that
	// retire returns the addresses to (see reserve.go); nil: not a map
	// file's mapping, or the platform cannot tell, and nothing is kept.
	key *reservationKey
	// reused: the addresses are a reservation a retired mapping of the
	// same file left, which that mapping's late readers may still read:
	// Unmap retires them instead of unmapping.
	reused bool
}

// MapRegion maps the first size bytes of f. The file must already be at
// least size bytes long: a mapping past the end of the file faults with
// SIGBUS on access, which this package never lets happen.
//
// Where Open refuses to run, MapRegion does too, with an error wrapping
// ErrUnsupported.
func MapRegion(f *os.File, size int64, writable bool) (*Region, error) {
	if err := checkPlatform(); err != nil {
		return nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	r, err := mapFile(f, size, writable)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	return r, nil
}

// mapFile is MapRegion without the file name in its errors, for callers
// that wrap them in a fileError.
func mapFile(f *os.File, size int64, writable bool) (*Region, error) {
	if size <= 0 || size > maxMapSize {
		return nil, fmt.Errorf("size %d out of range (1..%d)", size, int64(maxMapSize))
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() < size {
		return nil, fmt.Errorf("%w: file is %d bytes, need %d", ErrTruncated, st.Size(), size)
	}
	prot := mmap.RDONLY
	if writable {
		prot = mmap.RDWR
	}
	data, err := mmap.MapRegion(f, int(size), prot, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return &Region{data: data, readOnly: !writable}, nil
}

// mapGrowth maps the bytes of f from from to limit, where a file that
// may grow grows (see OpenOptions.GrowsTo and File.Growth): address space,
// not memory. Pages past the file's end fault (SIGBUS) if touched, until
// the file is lengthened over them. from must be a multiple of the page
// size.
func mapGrowth(f *os.File, from, limit int64, writable bool) (*Region, error) {
	data, err := mapSharedNoReserve(f, from, limit-from, writable)
	if err != nil {
		return nil, fmt.Errorf("mmap of %d bytes (what the map may grow by; a smaller MaxSize needs less address space): %w", limit-from, err)
	}
	return &Region{data: mmap.MMap(data), readOnly: !writable}, nil
}

// Len is the size of the mapping in bytes.
func (r *Region) Len() int64 { return int64(len(r.data)) }

// ReadOnly reports whether the mapping is PROT_READ: a stray write faults
// instead of corrupting the file.
func (r *Region) ReadOnly() bool { return r.readOnly }

// Unmap releases the mapping. Every slice and word obtained from the region
// is invalid afterwards; touching one faults (see File.Retire for a close
// that leaves them readable). After Retire it does nothing. A mapping made
// over a retired one's reservation is retired instead (see release): that
// one's late readers may still read the addresses.
func (r *Region) Unmap() error { return r.release(nil) }

// release is Unmap, with f, the file r maps, for retire's fallback when r
// must be retired (nil: none).
func (r *Region) release(f *os.File) error {
	if r.data == nil || r.retired {
		return nil
	}
	if r.reused {
		return r.retire(f)
	}
	err := r.data.Unmap()
	r.data = nil
	if err != nil {
		return fmt.Errorf("unmap: %w", err)
	}
	return nil
}

// retire lets the file f (mapped by r) go but not the addresses: it maps
// private zero-filled memory over the whole region in one step
// (MAP_FIXED), so that a slice or word obtained from the region reads
// zeros from then on, and writes to it reach nothing, instead of
// faulting. The addresses stay reserved, using memory only for the pages
// something writes to afterwards, until this process maps the same map
// file over them again (see reserve.go).
//
// If the kernel refuses (older kernels may have unmapped the range by
// then), f is mapped back at the same addresses and stays mapped until the
// process ends, which is as safe for late readers but keeps the file's
// inode (and its disk space, should it be deleted); the error says so.
// Without f (nil) there is nothing to map back.
func (r *Region) retire(f *os.File) error {
	if r.data == nil || r.retired {
		return nil
	}
	r.retired = true
	addr, n := unsafe.Pointer(&r.data[0]), uintptr(len(r.data))
	err := mapZerosOver(addr, n)
	if err == nil {
		if r.key != nil {
			keep(*r.key, r.data, !r.readOnly)
		}
		return nil
	}
	if f == nil {
		return fmt.Errorf("retire mapping: %w", err)
	}
	if merr := mapFileOver(f, 0, addr, n, r.readOnly); merr != nil {
		// Nothing is left to fall back on: a reader still running faults.
		return fmt.Errorf("retire mapping: %w; mapping the file back: %v", err, merr)
	}
	return fmt.Errorf("retire mapping (the file stays mapped until the process ends): %w", err)
}

// inBounds reports whether [off, off+n) lies inside the region, without
// overflow.
func (r *Region) inBounds(off, n int64) bool {
	return off >= 0 && n >= 0 && off <= int64(len(r.data)) && n <= int64(len(r.data))-off
}

// Slice returns the n bytes at off, or an error if they are not all inside
// the region. Use it for offsets read from the file, which are untrusted.
func (r *Region) Slice(off, n int64) ([]byte, error) {
	if !r.inBounds(off, n) {
		return nil, &rangeError{Off: off, Len: n, Size: int64(len(r.data))}
	}
	return r.data[off : off+n : off+n], nil
}

// Bytes returns the n bytes at off. The range must come from the validated
// layout; a range outside the region is a bug in the caller and panics.
func (r *Region) Bytes(off, n int64) []byte {
	b, err := r.Slice(off, n)
	if err != nil {
		panic("sharedmap: assertion failed: " + err.Error())
	}
	return b
}

// Uint64 returns the 8-byte aligned word at off, for use with sync/atomic.
// off must come from the validated layout.
func (r *Region) Uint64(off int64) *uint64 {
	return &r.Uint64s(off, 1)[0]
}

// Uint32 returns the 4-byte aligned word at off, for use with sync/atomic.
// off must come from the validated layout.
func (r *Region) Uint32(off int64) *uint32 {
	return &r.uint32s(off, 1)[0]
}

// Uint64s views n 8-byte aligned words starting at off as a slice.
func (r *Region) Uint64s(off, n int64) []uint64 {
	b := r.Bytes(off, n*8)
	if off%8 != 0 {
		panic(fmt.Sprintf("sharedmap: assertion failed: offset %d of a 64-bit word is not 8-aligned", off))
	}
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n)
}

// uint32s views n 4-byte aligned words starting at off as a slice.
func (r *Region) uint32s(off, n int64) []uint32 {
	b := r.Bytes(off, n*4)
	if off%4 != 0 {
		panic(fmt.Sprintf("sharedmap: assertion failed: offset %d of a 32-bit word is not 4-aligned", off))
	}
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), n)
}

// advise passes a madvise(2) hint for [off, off+n), rounded out to pages.
// Hints are advisory: an error only means the kernel ignored it.
func (r *Region) advise(off, n int64, advice int) error {
	if !r.inBounds(off, n) {
		return &rangeError{Off: off, Len: n, Size: int64(len(r.data))}
	}
	page := int64(os.Getpagesize())
	start := off &^ (page - 1)
	end := off + n
	if end > int64(len(r.data)) {
		end = int64(len(r.data))
	}
	if err := madvise(r.data[start:end], advice); err != nil {
		return fmt.Errorf("madvise: %w", err)
	}
	return nil
}

// Prefault maps the pages of [off, off+n) into this process now
// (madvise MADV_POPULATE_WRITE, or MADV_POPULATE_READ when write is false
// or the mapping is read-only), so the first operations to touch them do
// not each take a page fault. Writing populates allocate the pages of a
// sparse file; use them on a file just created, since on an existing file
// they would dirty every page. On kernels before 5.14, which lack the
// advice, it does nothing and returns nil.
func (r *Region) Prefault(off, n int64, write bool) error {
	advice := advicePopulateRead
	if write && !r.readOnly {
		advice = advicePopulateWrite
	}
	err := r.advise(off, n, advice)
	if unknownAdvice(err) {
		return nil
	}
	return err
}

// syncRange writes the pages holding [off, off+n) to the file and waits
// (msync MS_SYNC). Other processes see stores at once without it; it only
// orders what reaches the disk, e.g. the data before the flag that
// declares it valid.
func (r *Region) syncRange(off, n int64) error {
	if !r.inBounds(off, n) {
		return &rangeError{Off: off, Len: n, Size: int64(len(r.data))}
	}
	if n == 0 || r.readOnly {
		return nil // a read-only mapping has no dirty pages
	}
	page := int64(os.Getpagesize())
	start := off &^ (page - 1)
	if err := msync(r.data[start : off+n]); err != nil {
		return fmt.Errorf("msync: %w", err)
	}
	return nil
}
