// Package offheap is the bottom layer of sharedmap: a file mapped
// MAP_SHARED into several processes at once, with a checksummed header,
// race-free create-or-open, and bounds-checked typed access to its bytes.
//
// # Overview
//
// [Open] opens or creates a map file and maps all of it, once. The file
// starts with a one-page header (byte map in layout.go) holding two copies
// of: magic, format version, byte-order marker, creation state, sizes,
// creator, an opaque layout record owned by the layers above, and an XXH64
// checksum over them. One copy that verifies is enough to open the file; a
// writable Open rewrites the other from it ([File.HeaderMended]), and
// [File.HeaderProblems] and [File.RepairHeader] report and mend what is
// left. The data
// area follows at [File.DataOffset]. The file is reserved sparse at its
// full size when created, never grows and never shrinks, so no process
// ever remaps; [File.Allocate] turns holes into disk blocks when the layers
// above start using a range, so a full disk is an error rather than a
// SIGBUS.
//
// A [Region] is the mapping. Its accessors check every range and hand out
// *uint64 and *uint32 words for sync/atomic; this is the only package that
// uses unsafe, so the layers above never do pointer arithmetic on shared
// memory themselves. Offsets read from the file are untrusted: use
// [Region.Slice], which returns a [*RangeError], and keep [Region.Bytes]
// and the word accessors for offsets derived from a validated layout. The
// one exception is [Span], whose loads skip Go's bounds checks for a
// lookup that checks every offset it follows itself; built with the
// sharedmap_checked tag (CI's checked test stage and every fuzz target)
// it checks them again.
//
// Opening never panics on any file content and never writes to a file that
// fails validation: a foreign, truncated, extended, damaged or newer-format
// file gives a [*FileError] wrapping one of the sentinels in errors.go.
// [OpenSalvage] maps such a file read-only all the same, for the layers
// above to get out what it still holds.
//
// # Concurrency
//
// Creation is serialized by flock(2) on the file, held only inside Open:
// exclusively by an Open with Create, shared by the others. The creator
// writes the header with state "initializing", runs [OpenOptions.Init],
// msyncs, and stores state "ready" atomically; only then does it release
// the lock, so every other opener, which waits for the lock (at most
// [OpenOptions.InitTimeout]), sees either nothing or a finished file. A
// creator that dies loses its lock with its descriptor; the next Open with
// Create finds the header not ready under the lock, knows the creator is
// gone, and creates the file again from zeros.
//
// After Open, the header is immutable (a copy found damaged is rewritten
// from the other, to the same bytes) and the package takes no locks:
// words in the data area are shared with other processes and must be
// accessed with sync/atomic only, under whatever protocol the layers above
// define. The race detector does not see memory inside the mapping;
// multi-process tests are the proof of those protocols.
//
// # Caveats
//
//   - fork after Open: the child inherits the mapping and the descriptor
//     but is a different process to every cross-process lock above this
//     package. Open the file again in the child (exec is safest) rather
//     than using the parent's File.
//   - Opening the same file twice in one process gives two independent
//     mappings of the same pages; that is coherent, but locks built on
//     process identity (OFD locks, the process registry) see one process
//     twice. Share one File instead.
//   - Network filesystems (NFS, SMB, FUSE mounts of them): MAP_SHARED is not
//     coherent between machines and flock may be emulated or absent. Use a
//     local filesystem or /dev/shm.
//   - If anything truncates the file while it is mapped, touching a page
//     past the new end kills the process with SIGBUS; no error can be
//     returned for it. Only sharedmap should write the file, and it never
//     changes its size after creation.
//   - A full disk while writing a page that was never allocated also
//     raises SIGBUS; call File.Allocate on a range before first use.
//   - The format is little-endian only: Open refuses to run on a
//     big-endian host and refuses a file written on one (ErrEndianness).
//   - A file is only as durable as its last File.Sync; Close does not sync.
//   - Linux only: the system calls are in sys_linux.go. The package builds
//     elsewhere (sys_other.go), but Open, OpenSalvage and MapRegion return
//     ErrUnsupported there, naming what the platform lacks.
package offheap
