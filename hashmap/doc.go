// Package hashmap is sharedmap's public API: a hash map of byte-string keys
// and values that lives in a memory-mapped file, shared by every process
// that opens the file, read and written at memory speed with no server.
//
// # Overview
//
//	m, err := hashmap.Open("/dev/shm/cache.map", &hashmap.Options{Entries: 1_000_000, AverageKeySize: 16, AverageValueSize: 64})
//	defer m.Close()
//	err = m.Put([]byte("k"), []byte("v"))
//	v, err := m.Get([]byte("k")) // errors.Is(err, hashmap.ErrNotFound) when absent
//
// The map is sized when created (Entries, average key and value sizes) and
// can grow past that by MaxBloatFactor; beyond it Put returns ErrFull and
// writes nothing. The file has its maximal size from the start, but only
// the part every map uses (segment headers and first tiers) takes disk (or
// RAM, on /dev/shm) at once, reserved so that a full disk is an error
// rather than a crash; each overflow tier is reserved when a segment first
// needs it.
//
// # Concurrency
//
// Keys are spread over segments by their XXH64 hash; each segment has a
// read/write/update lock word in the file (Chronicle Map's, see rwulock).
// Writers take the segment's lock; Get takes no lock at all: it reads
// optimistically and validates with the segment's modification sequence,
// falling back to the read lock when writers keep interfering.
// Every completed write is visible to every later Get in any process.
//
// Close may run while other goroutines use the Map: it waits for the calls
// in progress (see Close), and later calls return ErrClosed.
//
// # Batches
//
// GetMany, PutMany and DeleteMany take many keys at once and request every
// key's lines before using the first, so that the lookups' cache misses
// overlap. Each key is still read consistently, or written atomically, on
// its own; a batch is not a transaction. PutAll is the way to fill a map:
// it stores a batch in the file's order rather than the slice's, on every
// core.
//
// # Durability
//
// A completed write survives the death of any process; it reaches the
// disk when the kernel writes the page back, or at Sync. A process killed
// in the middle of a write leaves that key with its old value or its new
// one: a value rewritten in place goes through its segment's undo record,
// from which recovery makes the entry whole (see Options.NoUndo). The same
// holds for a write that did not return because it panicked on a fault of
// the file's pages (a program running with debug.SetPanicOnFault, as
// mapctl does): it may be found done after the next recovery. After a machine
// crash, Check finds entries torn by a partial write-back and Repair
// removes them (see Sync and Repair).
//
// The file's header is kept twice: Open reads a map one of whose header
// copies is damaged, and a writable Open rewrites it from the other. A map
// that Open refuses for its header (both copies lost, the first page
// overwritten) or its size (cut short, extended) can still be read by
// Salvage, which finds the layout from the file itself if it must.
//
// # Caveats
//
//   - Do not fork after Open: the child shares the mapping but not the
//     process's handle state. Open the map in the child instead.
//   - Opening the same file twice in one process works (two mappings),
//     but each writable Open takes one of the file's MaxProcesses slots
//     until Close: share one *Map in a process instead.
//   - Network filesystems do not keep mappings coherent between machines;
//     use a local filesystem or /dev/shm.
//   - A process killed inside Put or Delete leaves its segment's lock held
//     until a survivor repairs it: the next operation that waits
//     LockTimeout for that lock, the next Open, or Recover (mapctl
//     recover) releases what the dead process held and rebuilds the
//     segment if it was changing it. Such a wait lasts up to twice
//     LockTimeout (the wait, the repair, a second wait). A lock of the
//     lock table a dead process held is released likewise (see Lock,
//     LockTimeout and TryLock of LockTable).
//   - Another process truncating the file makes this one crash with SIGBUS.
//   - Resize puts a new file in the map's place while no process writes
//     it. A process that opened the map only for reading before that keeps
//     the old file, which no longer changes, until it opens the path again:
//     readers are not registered, so Resize cannot wait for them.
//   - Compute bodies run while a segment lock is held, as do Update's
//     and DeleteFunc's functions: keep them short, and do not call Close
//     from one (Close waits for the call). Range holds a lock only while
//     it copies a segment, never while its body runs.
//   - Linux only: the package builds on every platform Go supports, but
//     elsewhere Open and Salvage return ErrUnsupported, saying what the
//     platform lacks (OFD locks, futexes, fallocate).
package hashmap
