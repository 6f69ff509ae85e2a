// Package offheap is the implementation beneath hashmap: the map file,
// mapped MAP_SHARED into every process that opens it, its checksummed
// header, race-free create-or-open, and bounds-checked access to its
// bytes. All the unsafe pointer work on the mapping is here; the layers
// above reach shared memory only through this package's accessors.
//
// offheap is not an API for programs, which use hashmap (or typed). Its
// names are exported for segment, hashmap and the tools of this
// repository, and change with them: there is no compatibility promise.
//
// # Overview
//
// [Open] opens or creates a map file and maps all of it, once. The file
// starts with a one-page header (byte map in layout.go): two copies of the
// magic, format version, byte-order marker, creation state, sizes,
// creator, an opaque layout record owned by the layers above, and a
// checksum over them. One copy that verifies is enough to open the file; a
// writable Open rewrites the other from it ([File.HeaderMended]). The data
// area follows at [File.DataOffset]. The file is reserved sparse at its
// full size and never changes size, so no process ever remaps;
// [File.Allocate] turns a range's holes into disk blocks before its first
// use, so a full disk is an error rather than a SIGBUS.
//
// A [Region] is the mapping. Its accessors check every range and hand out
// words for sync/atomic. Offsets read from the file are untrusted: they go
// through [Region.Slice], which returns an error; [Region.Bytes] and the
// word accessors, which panic out of range, are for offsets derived from a
// validated layout. [Span] skips Go's bounds checks for the one lookup
// path that checks every offset it follows itself; a build with the
// sharedmap_checked tag checks them again.
//
// Opening never panics on any file content and never writes to a file
// that fails validation: it returns an error naming the file and wrapping
// one of the sentinels of errors.go. [OpenSalvage] maps such a file
// read-only all the same, for the layers above to get out what it holds.
//
// # Concurrency
//
// Creation is serialized by flock(2) on the file, held only inside Open.
// The creator writes the header as "initializing", runs
// [OpenOptions.Init], syncs, and marks it "ready" before it lets the lock
// go, so every other opener sees nothing or a finished file. A creator
// that dies loses the lock with its descriptor, and the next creating Open
// starts again from zeros.
//
// After Open the header is immutable (a damaged copy is rewritten to the
// same bytes) and the package takes no locks: words in the data area are
// shared with other processes and accessed with sync/atomic only, under
// the protocols of the layers above. The race detector does not see
// memory inside the mapping; multi-process tests are the proof of those
// protocols.
//
// # Caveats
//
// hashmap's caveats (fork, one file opened twice in a process, network
// filesystems) hold here too. Besides:
//
//   - A file truncated while mapped kills the process with SIGBUS when it
//     touches a page past the new end. sharedmap never changes the size.
//   - Writing a page never allocated, on a full disk, raises SIGBUS too:
//     call File.Allocate on a range before its first use.
//   - The format is little-endian only (ErrEndianness).
//   - A file is only as durable as its last File.Sync; Close does not sync.
//   - Linux only: the package builds elsewhere, but Open, OpenSalvage and
//     MapRegion return ErrUnsupported there, naming what is missing.
package offheap
