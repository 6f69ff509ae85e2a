// Package registry is the file's list of the processes that have the map
// open, so that survivors can tell which processes died and what they held.
//
// Every writable opener takes a slot: its pid, start time and a generation
// number, and an OFD write lock (F_OFD_SETLK) on the slot's byte of the
// map's companion lock file (offheap.LockFilePath: byte 1 + i for slot i),
// held for as long as it keeps the file open. The kernel drops that lock
// when the process exits, however it exits (unless it handed a descriptor
// of the lock file to another process, which then keeps the lock: see
// Slot.ProcessGone), so "is slot i's process alive" is answered by the lock
// and never by kill(pid, 0), which a reused pid fools. A slot whose state
// says "in use" while nobody holds its lock belongs to a process that died
// without closing the map.
//
// The write locks are on the lock file, not on the map file, because any
// user who may read the map file can take read locks on it, over all of it
// and beyond its end, and a write lock there could then be neither taken
// nor told apart from a live process's: one user with read permission
// could keep every writer from opening the map and every dead process from
// being recovered. The lock file is made readable and writable by exactly
// the users who may write the map. On the map file a writer takes only
// read locks, which no reader's lock blocks: one on its slot's first byte
// while it has the map open, so that processes of versions that decided
// liveness by a write lock there see it alive, and so that an opener that
// reaches the map through another lock file (the map renamed, or its lock
// file removed, while processes had it open) sees that someone does and
// refuses the map (ErrLockFile) instead of recovering processes it cannot
// see; and one on byte 8 of the area while it holds the recovery lock,
// which those versions write-lock for theirs. A slot whose byte in the map
// file carries a write lock belongs to a live process of such a version.
// The area header records which lock file (device and inode) the map's
// writers use.
//
// Each slot also holds the process's ledgers: one word per segment lock
// (see rwulock's ledgers), in which the process accounts for what it holds.
// Recovery reads the ledgers of the live slots; whatever a lock word holds
// beyond them belongs to the dead.
//
// Byte 0 of the lock file is the recovery lock: whoever repairs locks or
// claims a slot holds it, so repairs never race each other or a
// half-claimed slot.
//
// Area layout, at the offset the owner of the file gives (every field
// little-endian, 8-byte words):
//
//	offset                size           field
//	0                     8              magic "SMREG002", or "SMREG003" with a high-water mark
//	8                     8              slots
//	16                    8              ledgers per slot
//	24                    8              generation: bumped by every claim
//	32                    8              counter words per slot
//	40                    8              device of the lock file the writers use (0: none recorded)
//	48                    8              inode number of that lock file
//	56                    8              high-water mark: slots ever claimed ("SMREG003"; else reserved, 0)
//	64 + i*SlotSize       SlotSize       slot i:
//	    0                 8              state: 0 free, 1 in use
//	    8                 8              pid
//	    16                8              process start time, clock ticks since boot (/proc/self/stat)
//	    24                8              generation at claim
//	    32                8              claimed at, Unix nanoseconds
//	    40                24             reserved
//	    64                1024           lock-episode journal (ipc.Arena.SetJournals)
//	    1088              ledgers*8      ledger words
//	    1088 + ledgers*8  counters*8     counter words (the process's own statistics)
//
// In an area with a high-water mark (Layout.HighWater), slots are claimed
// from slot 0 up and the mark says how many ever were: Join reserves a
// slot's disk blocks and raises the mark over it before it claims it, so
// every slot at or past the mark is free and was never written, and the
// scans that decide liveness (Live, Slots, Alone, recovery's) ask the
// kernel and read the file only below it. A registry with room for
// thousands of processes then costs each scan what the processes that
// ever had the map open cost, and its slots take disk blocks only once
// claimed.
//
// No lock is stored in the file: they are the kernel's (see above).
package registry
