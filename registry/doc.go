// Package registry is the file's list of the processes that have the map
// open, so that survivors can tell which processes died and what they held.
//
// Every writable opener takes a slot: its pid, start time and a generation
// number, and an OFD byte-range lock (F_OFD_SETLK) on the slot's first byte,
// held for as long as it keeps the file open. The kernel drops that lock
// when the process exits, however it exits (unless it handed a descriptor
// of the file to another process, which then keeps the lock: see
// Slot.ProcessGone), so "is slot i's process alive" is answered by the lock
// and never by kill(pid, 0), which a reused pid fools. A slot whose state says "in use" while nobody holds its lock
// belongs to a process that died without closing the map.
//
// Each slot also holds the process's ledgers: one word per segment lock
// (see rwulock's ledgers), in which the process accounts for what it holds.
// Recovery reads the ledgers of the live slots; whatever a lock word holds
// beyond them belongs to the dead.
//
// One more byte of the area is the recovery lock: whoever repairs locks or
// claims a slot holds it, so repairs never race each other or a half-claimed
// slot.
//
// Area layout, at the offset the owner of the file gives (every field
// little-endian, 8-byte words):
//
//	offset                size           field
//	0                     8              magic "SMREG002"
//	8                     8              slots
//	16                    8              ledgers per slot
//	24                    8              generation: bumped by every claim
//	32                    8              counter words per slot
//	40                    24             reserved
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
// The OFD lock of slot i is on its first byte; the recovery lock is on byte
// 8 of the area (the slots word, which never changes).
package registry
