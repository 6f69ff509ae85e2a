package registry

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/offheap"
)

const (
	magic          = "SMREG002"
	magicHighWater = "SMREG003" // an area with a high-water mark (Layout.HighWater)
	areaHeaderSize = 64
	slotHeaderSize = 64 + JournalBytes
	sJournal       = 64

	hSlots      = 8
	hLedgers    = 16
	hGeneration = 24
	hCounters   = 32
	hLockDev    = 40 // the lock file's device and inode number (see LockFilePath)
	hLockIno    = 48
	hHighWater  = 56 // slots ever claimed, in an area with a high-water mark (Layout.HighWater)

	sState      = 0
	sPID        = 8
	sStartTicks = 16
	sGeneration = 24
	sClaimedAt  = 32

	stateFree  = 0
	stateInUse = 1
)

// Errors of the registry.
var (
	// ErrFull: every slot belongs to a live process.
	ErrFull = errors.New("registry: every process slot is in use by a live process")
	// ErrCorrupt: the area does not hold a registry of the expected shape.
	ErrCorrupt = errors.New("registry: damaged process registry")
	// ErrUnsupported: this platform has no OFD locks, so liveness cannot be
	// told safely.
	ErrUnsupported = errors.New("registry: process liveness needs OFD locks (Linux)")
	// ErrRecoveryBusy: LockRecovery's time ran out while another recovery
	// pass (of this process or another) held the recovery lock.
	ErrRecoveryBusy = errors.New("registry: recovery lock busy")
	// ErrLockFile: the companion lock file (LockFilePath) cannot be used:
	// it cannot be opened or made, or processes hold the map through
	// another one.
	ErrLockFile = errors.New("registry: lock file")

	// ErrNoSlot reports a slot index outside the registry: a damaged word
	// that names a process slot (a split claim, a fill token, a lock's
	// party) names none.
	ErrNoSlot = errors.New("registry: no such process slot")
)

// AreaHeaderSize is the size of the area's header, before slot 0: what a
// creator reserves disk blocks for, slots being reserved as claimed.
const AreaHeaderSize = areaHeaderSize

// Layout is where the registry lives in the file and how big it is.
type Layout struct {
	Off      int64 // start of the area in the file
	Slots    int   // processes that can have the file open at once
	Ledgers  int   // ledger words per slot: one per segment lock
	Counters int   // counter words per slot, for the process's own statistics (0 in files from before them)
	// HighWater: the area header keeps a high-water mark of the slots
	// ever claimed (see InUse), which Join raises before it claims a slot
	// past it, so that scans of the slots stop there and the pages of
	// slots nobody claimed are never touched, nor their disk blocks
	// reserved. Areas of files from before it keep the word zero and are
	// scanned whole.
	HighWater bool
}

// areaMagic is the magic of an area laid out as l.
func (l Layout) areaMagic() string {
	if l.HighWater {
		return magicHighWater
	}
	return magic
}

// SlotSize is the size of one slot, a multiple of 64 bytes.
func (l Layout) SlotSize() int64 {
	return (slotHeaderSize + int64(l.Ledgers+l.Counters)*8 + 63) / 64 * 64
}

// Bytes is the size of the whole area, rounded up to whole 4 KiB pages.
func (l Layout) Bytes() int64 {
	return (areaHeaderSize + int64(l.Slots)*l.SlotSize() + 4095) / 4096 * 4096
}

func (l Layout) slotOff(i int) int64 { return l.Off + areaHeaderSize + int64(i)*l.SlotSize() }

// Format writes an empty registry into area, the Bytes() bytes at Off.
func Format(area []byte, l Layout) {
	copy(area, l.areaMagic())
	binary.LittleEndian.PutUint64(area[hSlots:], uint64(l.Slots))
	binary.LittleEndian.PutUint64(area[hLedgers:], uint64(l.Ledgers))
	binary.LittleEndian.PutUint64(area[hCounters:], uint64(l.Counters))
}

// MendHeader rewrites the words of the registry's area header that the
// layout determines (its magic and sizes) where they differ from l, zeroes
// its unused words (or, in an area with a high-water mark, lowers nothing:
// a mark past the slots becomes the slot count, which scans them all),
// and returns how many words it rewrote. It is for a
// registry that Attach refuses in a file whose own header records the
// layout: Format writes those words once and only Attach reads them, so
// processes already attached are unaffected. The generation counter and
// the lock file's identity, where any value is legal (an identity that
// names no lock file is recorded anew by the next Join), are left alone.
func MendHeader(f *offheap.File, l Layout) (int, error) {
	if err := l.fits(f); err != nil {
		return 0, err
	}
	want := make([]byte, areaHeaderSize)
	Format(want, l)
	head := f.Uint64s(l.Off, areaHeaderSize/8)
	n := 0
	// The magic last, as it is what makes an area a registry.
	for _, w := range [...]int{hSlots / 8, hLedgers / 8, hCounters / 8, hHighWater / 8, 0} {
		v := binary.LittleEndian.Uint64(want[w*8:])
		if w == hHighWater/8 && l.HighWater {
			// Claimed slots lie below the mark: it may only go up.
			if atomic.LoadUint64(&head[w]) <= uint64(l.Slots) {
				continue
			}
			v = uint64(l.Slots)
		}
		if atomic.LoadUint64(&head[w]) != v {
			atomic.StoreUint64(&head[w], v)
			n++
		}
	}
	return n, nil
}

// fits checks that the layout's area lies in f.
func (l Layout) fits(f *offheap.File) error {
	size := f.Len()
	// Sizes are bounded by the file before they are multiplied, so that a
	// damaged or absurd layout cannot overflow into one that seems to fit.
	if l.Slots <= 0 || l.Ledgers < 0 || l.Counters < 0 || l.Off < 0 || l.Off > size ||
		int64(l.Ledgers) > size/8 || int64(l.Counters) > size/8 ||
		int64(l.Slots) > (size-l.Off)/l.SlotSize() || l.Off+l.Bytes() > size {
		return fmt.Errorf("%w: layout %+v does not fit a file of %d bytes", ErrCorrupt, l, f.Len())
	}
	return nil
}

// Registry is this process's view of the registry of one open file.
type Registry struct {
	file   *offheap.File
	layout Layout
	gen    *uint64
	hwm    *uint64 // the high-water mark; nil in an area without one
	self   int     // our slot, -1 if we hold none
	// tookDead: Join took the slot of a process that died with the file
	// open (its ledgers cleared, so what it held is now unaccounted for).
	tookDead bool

	// recovering serializes the recovery lock among this process's
	// goroutines: an OFD lock never conflicts with its own description.
	recovering sync.Mutex

	// lockFd is the descriptor of the companion lock file
	// (offheap.LockFilePath), on which the locks that decide liveness and
	// exclude recoveries are taken; 0 until useLockFile opened it, and
	// for good in a registry that only reads where it cannot be used.
	lockFd uintptr
}

// Attach checks the registry of f laid out as l, without claiming a slot.
func Attach(f *offheap.File, l Layout) (*Registry, error) {
	if err := l.fits(f); err != nil {
		return nil, err
	}
	head := f.Bytes(l.Off, areaHeaderSize)
	if string(head[:8]) != l.areaMagic() ||
		binary.LittleEndian.Uint64(head[hSlots:]) != uint64(l.Slots) ||
		binary.LittleEndian.Uint64(head[hLedgers:]) != uint64(l.Ledgers) ||
		binary.LittleEndian.Uint64(head[hCounters:]) != uint64(l.Counters) {
		return nil, fmt.Errorf("%w: header does not match the layout", ErrCorrupt)
	}
	r := &Registry{file: f, layout: l, gen: f.Uint64(l.Off + hGeneration), self: -1}
	if l.HighWater {
		r.hwm = f.Uint64(l.Off + hHighWater)
	}
	// So that Slots and Live read liveness from it before Join; an error
	// here is LockRecovery's to report, and a registry that only reads
	// does without.
	_ = r.useLockFile()
	return r, nil
}

// Find reads the layout of a registry at off in f from the registry's own
// area header, for a file whose header, which records it, is lost: the
// area header holds the slot, ledger and counter counts too (Format). It
// fails with ErrCorrupt if there is no registry there, or one whose sizes
// do not fit the file.
func Find(f *offheap.File, off int64) (Layout, error) {
	head, err := f.Slice(off, areaHeaderSize)
	if err != nil || (string(head[:8]) != magic && string(head[:8]) != magicHighWater) {
		return Layout{}, fmt.Errorf("%w: no registry at offset %d", ErrCorrupt, off)
	}
	le := binary.LittleEndian
	slots, ledgers, counters := le.Uint64(head[hSlots:]), le.Uint64(head[hLedgers:]), le.Uint64(head[hCounters:])
	if slots > 1<<20 || ledgers > 1<<32 || counters > 1<<32 {
		return Layout{}, fmt.Errorf("%w: registry at offset %d says %d slots, %d ledgers, %d counters", ErrCorrupt, off, slots, ledgers, counters)
	}
	l := Layout{Off: off, Slots: int(slots), Ledgers: int(ledgers), Counters: int(counters), HighWater: string(head[:8]) == magicHighWater}
	if err := l.fits(f); err != nil {
		return Layout{}, err
	}
	return l, nil
}

// Layout returns the registry's layout.
func (r *Registry) Layout() Layout { return r.layout }

// Self is this process's slot, or -1.
func (r *Registry) Self() int { return r.self }

// Join claims a free slot (or one whose process died) for this process,
// under the recovery lock, and returns its index. The slot's ledgers start
// at zero: what the dead previous owner held stays in the lock words and
// is told apart from the living by recovery, which needs no dead ledger.
//
// Free slots below the high-water mark come first, then a slot past it,
// then a dead process's slot: a dead process's slot stays visible (to
// Check and to recovery) until there is no other room. A slot past the
// mark gets its disk blocks (offheap.File.Allocate) before the mark is
// raised over it, and the mark is raised before the slot is claimed: a
// full disk fails the Join (wrapping offheap.ErrNoSpace) instead of a
// later write to the slot, and a process that dies at any point leaves
// every claimed slot below the mark.
func (r *Registry) Join(timeout time.Duration) (int, error) {
	if r.self >= 0 {
		return r.self, nil
	}
	unlock, err := r.LockRecovery(timeout)
	if err != nil {
		return -1, err
	}
	defer unlock()
	if err := r.adoptLockFile(); err != nil {
		return -1, err
	}
	for pass := range 3 {
		lo, hi := r.joinRange(pass)
		for i := lo; i < hi; i++ {
			inUse := atomic.LoadUint64(r.file.Uint64(r.layout.slotOff(i)+sState)) == stateInUse
			if pass != 1 && inUse != (pass == 2) {
				continue
			}
			if pass == 1 {
				if err := r.raiseHighWater(i); err != nil {
					return -1, err
				}
			}
			ok, err := r.tryLockSlot(i)
			if err != nil {
				return -1, err
			}
			if !ok {
				continue // a live process has it
			}
			r.claim(i, pass == 2)
			return i, nil
		}
	}
	return -1, fmt.Errorf("%w (%d slots)", ErrFull, r.layout.Slots)
}

// joinRange is the range of slots Join's pass looks at: those below the
// high-water mark in passes 0 (free slots) and 2 (dead processes'), those
// past it in pass 1 (none in an area without a mark, whose every slot is
// below).
func (r *Registry) joinRange(pass int) (lo, hi int) {
	lo, hi = 0, r.InUse()
	if pass == 1 {
		lo, hi = hi, r.layout.Slots
	}
	return lo, hi
}

// raiseHighWater reserves slot i's disk blocks and raises the high-water
// mark over it. The caller holds the recovery lock, under which alone the
// mark moves.
func (r *Registry) raiseHighWater(i int) error {
	if err := r.file.Allocate(r.layout.slotOff(i), r.layout.SlotSize()); err != nil {
		return fmt.Errorf("registry: reserve slot %d: %w", i, err)
	}
	if uint64(i+1) > atomic.LoadUint64(r.hwm) {
		atomic.StoreUint64(r.hwm, uint64(i+1))
	}
	return nil
}

// claim writes slot i, whose lock this process took, as this process's:
// its ledgers cleared, its fields, and its state last. dead says the slot
// was a dead process's.
func (r *Registry) claim(i int, dead bool) {
	off := r.layout.slotOff(i)
	clear(r.file.Uint64s(off+slotHeaderSize, int64(r.layout.Ledgers)))
	gen := atomic.AddUint64(r.gen, 1)
	atomic.StoreUint64(r.file.Uint64(off+sPID), uint64(os.Getpid()))
	atomic.StoreUint64(r.file.Uint64(off+sStartTicks), startTicks(os.Getpid()))
	atomic.StoreUint64(r.file.Uint64(off+sGeneration), gen)
	atomic.StoreUint64(r.file.Uint64(off+sClaimedAt), uint64(time.Now().UnixNano()))
	atomic.StoreUint64(r.file.Uint64(off+sState), stateInUse)
	r.self, r.tookDead = i, dead
}

// InUse is how many slots, from slot 0, may have been claimed: the
// high-water mark of an area that keeps one (at most the slot count: a
// mark damaged past it reads as the slot count), else every slot. Every
// slot from InUse on is free and has never been written, so scans stop
// there. The mark only rises, under the recovery lock.
func (r *Registry) InUse() int {
	if r.hwm == nil {
		return r.layout.Slots
	}
	return int(min(atomic.LoadUint64(r.hwm), uint64(r.layout.Slots)))
}

// TookDeadSlot reports whether Join took the slot of a process that died
// with the file open: the caller should then release what that process
// held (a recovery pass), which it may not have seen dead when it looked
// before joining.
func (r *Registry) TookDeadSlot() bool { return r.tookDead }

// Leave marks our slot free and drops its lock. Call it only after every
// lock the process held has been released (its ledgers are zero).
func (r *Registry) Leave() error {
	if r.self < 0 {
		return nil
	}
	atomic.StoreUint64(r.file.Uint64(r.layout.slotOff(r.self)+sState), stateFree)
	err := r.unlockSlot(r.self)
	r.self = -1
	return err
}

// JournalBytes is the size of each slot's lock-episode journal (the ipc
// package's, see ipc.Arena.SetJournals): 32 episodes of 32 bytes.
const JournalBytes = 1024

// Journal returns the lock-episode journal words of slot i. A slot keeps
// its journal when its process dies and another takes the slot: what the
// dead process left there is recovered by the taker.
func (r *Registry) Journal(i int) []uint64 {
	return r.file.Uint64s(r.layout.slotOff(i)+sJournal, JournalBytes/8)
}

// Ledgers returns the ledger words of slot i.
func (r *Registry) Ledgers(i int) []uint64 {
	return r.file.Uint64s(r.layout.slotOff(i)+slotHeaderSize, int64(r.layout.Ledgers))
}

// Counters returns the counter words of slot i: statistics its process
// keeps for itself (no other process writes them). Join leaves them as they
// are: they outlive the process, and whoever reuses the slot counts on.
func (r *Registry) Counters(i int) []uint64 {
	return r.file.Uint64s(r.layout.slotOff(i)+slotHeaderSize+int64(r.layout.Ledgers)*8, int64(r.layout.Counters))
}

// Ledger returns ledger word k of slot i.
func (r *Registry) Ledger(i, k int) *uint64 {
	return r.file.Uint64(r.layout.slotOff(i) + slotHeaderSize + int64(k)*8)
}

// Slot describes one slot.
type Slot struct {
	Index      int
	InUse      bool // its state says a process has the file open
	Alive      bool // a process holds its lock (always true for our own)
	Self       bool
	PID        int
	StartTicks uint64
	Generation uint64
	ClaimedAt  time.Time
}

// Dead reports a slot whose process died with the file open.
func (s Slot) Dead() bool { return s.InUse && !s.Alive }

// ProcessGone reports a live slot (its lock held) whose recorded process
// is not running here: no process has its pid, or one started at another
// time has. Its lock is then held by a descriptor of the lock file that the
// process passed on before it died (exec with the descriptor among the
// child's files, a fork): liveness follows the open file description, and
// the slot lives as long as that descriptor stays open. (A process in
// another pid namespace reads as gone too: the answer is for messages,
// never for recovery.)
func (s Slot) ProcessGone() bool {
	if !s.Alive || s.Self || s.PID <= 0 {
		return false
	}
	now := startTicks(s.PID)
	return now == 0 || (s.StartTicks != 0 && now != s.StartTicks)
}

// Slot reads slot i and asks the kernel whether its process lives. An i
// outside the registry is an error matching ErrNoSlot.
func (r *Registry) Slot(i int) (Slot, error) {
	if i < 0 || i >= r.layout.Slots {
		return Slot{}, fmt.Errorf("%w: slot %d, of %d", ErrNoSlot, i, r.layout.Slots)
	}
	off := r.layout.slotOff(i)
	s := Slot{
		Index:      i,
		InUse:      atomic.LoadUint64(r.file.Uint64(off+sState)) == stateInUse,
		Self:       i == r.self,
		PID:        int(atomic.LoadUint64(r.file.Uint64(off + sPID))),
		StartTicks: atomic.LoadUint64(r.file.Uint64(off + sStartTicks)),
		Generation: atomic.LoadUint64(r.file.Uint64(off + sGeneration)),
		ClaimedAt:  time.Unix(0, int64(atomic.LoadUint64(r.file.Uint64(off+sClaimedAt)))),
	}
	if s.Self {
		s.Alive = true
		return s, nil
	}
	held, err := r.slotHeld(i)
	s.Alive = held
	return s, err
}

// Slots reads every slot that is in use or alive (those below InUse).
func (r *Registry) Slots() ([]Slot, error) {
	var out []Slot
	for i := range r.InUse() {
		s, err := r.Slot(i)
		if err != nil {
			return nil, err
		}
		if s.InUse || s.Alive {
			out = append(out, s)
		}
	}
	return out, nil
}

// Live appends the indexes of slots whose process is alive (ours included).
// A slot held by a process still claiming it counts as live; its ledgers
// are zero until it has claimed it, since claims happen under the recovery
// lock, which recoverers hold. Only the slots below InUse are asked about:
// a claim raises the mark first.
func (r *Registry) Live(dst []int) ([]int, error) {
	for i := range r.InUse() {
		if i == r.self {
			dst = append(dst, i)
			continue
		}
		held, err := r.slotHeld(i)
		if err != nil {
			return dst, err
		}
		if held {
			dst = append(dst, i)
		}
	}
	return dst, nil
}

// Alone reports whether no other process has the file open (writable).
func (r *Registry) Alone() (bool, error) {
	live, err := r.Live(nil)
	return len(live) == 1 && live[0] == r.self || len(live) == 0, err
}

// MarkDeadRecovered frees the slots of dead processes once the caller has
// repaired everything they held, so they are not reported again: the slots
// of recovered (as Slots listed them when the repair began) that are still
// dead. A process that died while the repair ran was repaired as a live
// one, so its slot stays for the next repair to see.
func (r *Registry) MarkDeadRecovered(recovered []Slot) (int, error) {
	n := 0
	for _, d := range recovered {
		s, err := r.Slot(d.Index)
		if err != nil {
			return n, err
		}
		if d.Dead() && s.Dead() && s.Generation == d.Generation {
			atomic.StoreUint64(r.file.Uint64(r.layout.slotOff(d.Index)+sState), stateFree)
			n++
		}
	}
	return n, nil
}

// startTicks is the start time of process pid in clock ticks since boot
// (field 22 of /proc/pid/stat), 0 if unknown. Recorded beside the pid so a
// human reading the registry can tell a reused pid apart.
func startTicks(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces and parentheses: fields
	// are counted after its last ')'.
	i := len(b) - 1
	for i >= 0 && b[i] != ')' {
		i--
	}
	var v uint64
	field := 2
	for _, c := range b[i+1:] {
		switch {
		case c == ' ':
			field++
			if field > 22 {
				return v
			}
		case field == 22 && c >= '0' && c <= '9':
			v = v*10 + uint64(c-'0')
		}
	}
	return v
}

// lockLocal takes the process-local half of the recovery lock by deadline.
func (r *Registry) lockLocal(deadline time.Time) bool {
	for !r.recovering.TryLock() {
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
	return true
}

// StrayLocks describes, for a person, the locks on the map file that no
// writer of the map takes: a reader's flock, or read locks over ranges
// other than a slot's or the recovery lock's byte. They stop no writer and
// no recovery (see the package doc); they are named so that nobody
// waiting on a map mistakes them for the cause.
func (r *Registry) StrayLocks() []string {
	var out []string
	for _, l := range offheap.LockHolders(r.file.Fd()) {
		if l.Kind == "OFDLCK" && l.Start == l.End && r.isWritersByte(l.Start) {
			continue
		}
		out = append(out, l.String()+": not a writer's lock; it stops no writer")
	}
	return out
}

// isWritersByte reports whether off is a byte of the map file on which
// writers take locks: a slot's first byte, or the area's byte 8.
func (r *Registry) isWritersByte(off int64) bool {
	if off == r.layout.Off+hSlots {
		return true
	}
	rel := off - r.layout.slotOff(0)
	return rel >= 0 && rel%r.layout.SlotSize() == 0 && rel/r.layout.SlotSize() < int64(r.layout.Slots)
}
