package hashmap

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"github.com/sharedmap/sharedmap/internal/registry"
	"github.com/sharedmap/sharedmap/ipc"
	"github.com/sharedmap/sharedmap/offheap"
	"github.com/sharedmap/sharedmap/rwulock"
	"github.com/sharedmap/sharedmap/segment"
)

// Open opens the map at path, creating it (sized by opts; nil: defaults) if
// the file does not exist, is empty, or was left half-created by a creator
// that died; opts.NoCreate only opens, opts.CreateNew only creates. Of
// several processes opening one new path at once, exactly one creates it and
// the others wait. Any other file that is not a map is refused
// (ErrNotSharedMap) and left as it is. A symbolic link is followed to an
// existing file, but a map is never created through one (ErrDanglingLink).
//
// The map's liveness for other processes is its descriptor of the file: hand
// no descriptor of it to a child process (exec.Cmd.ExtraFiles, fork without
// exec), or this process's locks outlive it until the child lets go. The map
// is the file, not its path: a file renamed or removed while open stays its
// processes' map, and an Open of the old path creates a new one.
//
// A map rewritten in place of its file (Resize) is the file the path
// names from the rename on: an Open that began while the rewrite ran joins
// the new file, and one that has the old file open keeps it (see Resize).
func Open(path string, opts *Options) (*Map, error) {
	o, err := openOptions(path, opts)
	if err != nil {
		return nil, err
	}
	for range replacedRetries {
		m, err := openOnce(path, o, opts)
		if !errors.Is(err, errPathReplaced) {
			return m, err
		}
	}
	return nil, fmt.Errorf("open %s: %w, %d times in a row", path, errPathReplaced, replacedRetries)
}

// replacedRetries bounds how often Open opens a path again because
// another file was put in its place while it opened the old one: a
// resize, which takes long, so that several in a row mean a loop gone
// wrong.
const replacedRetries = 8

// errPathReplaced is openOnce's answer when, once it has joined the map
// (or mapped it, read-only), the path names another file than the one it
// opened (see Open).
var errPathReplaced = errors.New("the path was given another map file while Open opened it")

// openOnce is one try of Open, with o, opts with its defaults.
func openOnce(path string, o Options, opts *Options) (*Map, error) {
	f, segRecordLen, err := openFile(path, o)
	if err != nil {
		return nil, err
	}
	fl, err := decodeFileLayout(f, segRecordLen, o, opts)
	if err != nil {
		f.Close()
		return nil, err
	}
	m, err := attach(f, fl, o)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := m.joinAndRecover(fl.registry); err != nil {
		// The lock table first: its recovery may have adopted dead
		// processes' lock episodes into this slot's journal and be
		// driving them, which must stop before the slot is free for
		// another process to take (and adopt them too).
		m.lockTable.close()
		if m.reg != nil {
			_ = m.reg.Leave() // the slot it took: else it reads as a process that died with the map open
		}
		f.Close()
		if errors.Is(err, errPathReplaced) {
			return nil, err
		}
		return nil, classifyOpenError(fmt.Errorf("open %s: %w", path, err))
	}
	return m, nil
}

// openOptions is opts with its defaults, or why Open refuses them.
func openOptions(path string, opts *Options) (Options, error) {
	o, err := opts.withDefaults()
	if err == nil && o.DefaultTTL > 0 && !o.Cache && !o.ReadOnly && !o.NoCreate {
		// Refused again by decodeFileLayout for an existing file that is
		// no cache; said here too so that a file about to be created is
		// not left behind as the wrong kind of map.
		if st, serr := os.Stat(path); serr != nil || st.Size() == 0 {
			return o, fmt.Errorf("open %s: DefaultTTL without Cache: %w", path, ErrNotCache)
		}
	}
	return o, err
}

// openFile maps the file at path, creating it as plan lays it out for o
// when it is absent, empty or half-created (and o allows it). It returns
// the length of the segment layout record that starts the header's
// layout records.
func openFile(path string, o Options) (*offheap.File, int, error) {
	want, wantLocks, wantReg, err := plan(o)
	if err != nil {
		return nil, 0, fmt.Errorf("open %s: %w", path, err)
	}
	segRecord := want.Encode()
	f, err := offheap.Open(path, offheap.OpenOptions{
		Create:      !o.ReadOnly && !o.NoCreate,
		CreateNew:   o.CreateNew,
		ReadOnly:    o.ReadOnly,
		Size:        want.End,
		NoHugePages: o.NoHugePages,
		GrowsTo:     segment.RecordGrowth,
		Mode:        o.Mode,
		Layout:      append(append(segRecord, wantLocks.encode()...), encodeRegistryRecord(wantReg)...),
		// The disk blocks of everything every map writes (the lock
		// arena, the registry's header, the global and segment headers
		// and the first tiers), so that a full disk fails the creation
		// rather than a later write (SIGBUS), and leaves no map that looks
		// ready. A registry slot's blocks are reserved by the Join that
		// first claims it (registry.Layout.HighWater): slots nobody
		// claims take none.
		Reserve: reserveAtCreation(want, wantReg),
		Init: func(r *offheap.Region) error {
			// A sparse file is all zeros: every segment starts empty and
			// unlocked. The lock arena and the registry need headers, and
			// each segment's first tier its stamp (the mark that tells
			// it from a zeroed one).
			segment.Format(r, want)
			registry.Format(r.Bytes(wantReg.Off, wantReg.Bytes()), wantReg)
			return ipc.Format(r.Uint64s(offheap.HeaderSize, wantLocks.words), wantLocks.config())
		},
	})
	if errors.Is(err, offheap.ErrNeedsUpgrade) {
		err = fmt.Errorf("%w; upgrade it in place, with no process using it, by: mapctl upgrade %s", err, path)
	}
	if err != nil {
		return nil, 0, classifyOpenError(err)
	}
	return f, len(segRecord), nil
}

// reserveAtCreation is what a creator reserves disk blocks for in a file
// laid out as l and reg: the lock arena, the registry's header, the
// global and segment headers and the first tiers; with a registry from
// before the high-water mark, every slot too.
func reserveAtCreation(l segment.Layout, reg registry.Layout) []offheap.Extent {
	regEnd := reg.Off + registry.AreaHeaderSize
	if !reg.HighWater {
		regEnd = reg.Off + reg.Bytes()
	}
	return []offheap.Extent{
		{Off: offheap.HeaderSize, Len: regEnd - offheap.HeaderSize},
		{Off: l.GlobalOff, Len: l.TiersOff + l.Segments*l.TierSize - l.GlobalOff},
	}
}

// attach opens the parts of the file that fl lays out, for this process:
// the segment table and the lock table, in a Map that has yet to join the
// process registry.
func attach(f *offheap.File, fl fileLayout, o Options) (*Map, error) {
	l := fl.segments
	if !o.NoPrefault {
		// Every operation touches a segment header and its first tier: in a
		// new file, fault them in here (writable, which allocates their
		// pages) rather than one page at a time inside the first Puts. In
		// an existing file only the headers and counters, a line or two per
		// segment: the first tiers are most of the file, and mapping them
		// in would make Open read the whole of it from the disk when it is
		// not in the page cache, an Open that grows with the map.
		n := l.TiersOff + l.Segments*l.TierSize - l.SegmentsOff
		if !f.Created() {
			n = l.UndoOff - l.SegmentsOff
		}
		_ = f.Region.Prefault(l.SegmentsOff, n, f.Created()) // advisory
	}
	alloc := f.Allocate
	if o.ReadOnly {
		alloc = nil
	}
	tb, err := segment.Open(f.Region, l, alloc, o.LockTimeout)
	if err != nil {
		return nil, err
	}
	tb.SetDataAt(f.DataAt)
	grow := f.Grow
	if o.ReadOnly {
		grow = nil
	}
	if err := tb.SetGrowth(f.Growth, f.Length(), f.Refresh, grow); err != nil {
		return nil, err
	}
	tb.SetLocalQueue(o.QueueWritersLocally)
	if o.Now != nil {
		now := o.Now
		tb.SetClock(func() int64 { return now().UnixNano() })
	}
	m := &Map{file: f, table: tb, layout: tb.Layout(), segMask: uint64(tb.Layout().Segments - 1), opts: o, readOnly: o.ReadOnly, lockLayout: fl.locks}
	m.mended = append(m.mended, f.HeaderMended()...)
	if m.lockTable, err = newLockTable(m, f.Region, fl.locks); err != nil {
		return nil, err
	}
	if m.admin != nil {
		tb.SetAdminLock(adminLock{m})
	}
	return m, nil
}

// joinAndRecover takes this process's place in the process registry laid
// out as l, and releases what processes that died with the map open held
// (see join). A read-only map takes no place (a place is written) but
// reads the registry, so that Check can still see who died with the map
// open. A file from before the registry has none to join.
func (m *Map) joinAndRecover(l registry.Layout) error {
	switch {
	case l.Slots == 0:
		return nil
	case m.readOnly:
		if replaced, err := m.file.Replaced(); err == nil && replaced {
			return errPathReplaced
		}
		m.reg, m.regErr = registry.Attach(m.file, l)
		return nil
	}
	return m.join(l)
}

// join takes this process's registry slot, gives the segment locks their
// ledgers, and, if processes died with the map open, releases what they
// held before this process starts using the map.
func (m *Map) join(l registry.Layout) error {
	reg, err := registry.Attach(m.file, l)
	if errors.Is(err, registry.ErrCorrupt) {
		// As for the lock table: the registry header's sizes are copies
		// of what the file header says.
		if n, merr := registry.MendHeader(m.file, l); merr == nil && n > 0 {
			m.mended = append(m.mended, fmt.Sprintf("process registry header: %s rewritten from the file's layout", countOf(n, "word", "words")))
			reg, err = registry.Attach(m.file, l)
		}
	}
	if err != nil {
		return err
	}
	before, err := reg.Slots()
	if err != nil {
		return err
	}
	// A recovery pass holds the recovery lock for up to about LockTimeout
	// (while a live process it waits on stays busy), and passes may follow
	// one another: Join waits through a few before it gives up.
	slot, err := reg.Join(joinWait(m.opts.LockTimeout))
	if errors.Is(err, registry.ErrFull) {
		return fmt.Errorf("%w; a file's process count is fixed when it is created and cannot grow in place: "+
			"create a new map with more (Options.MaxProcesses, mapctl create --max-processes N NEWPATH) and copy the entries over "+
			"(mapctl dump %s | mapctl load NEWPATH -)", err, m.Path())
	}
	if err != nil {
		return err
	}
	// Join waits for the recovery lock, which a resize holds until its new
	// file is in the old one's place: a process that joins the old file
	// after that must not use it (see Resize).
	if replaced, err := m.file.Replaced(); err == nil && replaced {
		_ = reg.Leave()
		return errPathReplaced
	}
	m.reg = reg
	m.joinCounters(reg.Counters(slot))
	inherited := false
	if a := m.lockTable.arena; a != nil {
		journals := make([][]uint64, l.Slots)
		for i := range journals {
			journals[i] = reg.Journal(i)
		}
		// Only the slots ever claimed may hold an episode: scans of the
		// journals stop at the registry's high-water mark.
		if err := a.SetJournalsInUse(journals, slot, reg.InUse); err != nil {
			return err
		}
		// The slot's last process (closed, or dead) may have left locks
		// under its owner id, now ours, or turns still to be taken: a
		// recovery pass sees neither as a dead process's.
		inherited = a.ReleaseInherited(m.lockTable.algorithm)
	}
	m.table.SetLedgers(func(i int) *uint64 { return reg.Ledger(slot, i) })
	if m.layout.FastLedgers {
		// Join left them zero, FastEmpty; they start at a version of
		// their own (rwulock.FastSeed).
		self, err := reg.Slot(slot)
		if err != nil {
			return err
		}
		m.table.SetFastLedgers(func(i int) *uint64 { return m.fastLedger(slot, i) }, rwulock.FastSeed(self.Generation))
		m.fastPuts = !m.layout.Cache && !m.opts.QueueWritersLocally
	}
	m.table.SetRecoverAfterTimeout(m.recoverAfterTimeout)
	if self, err := reg.Slot(slot); err == nil {
		m.table.SetSplitter(splitClaimID(slot, self.Generation), m.splitClaimerGone, m.recoverSplit, m.recoverSplitSegment)
	}
	// A process dead before we joined (we may have taken its slot), or one
	// that died since we looked and whose slot Join gave us, or episodes
	// our slot inherited: release what they held. This is also how a file
	// everyone left by dying is cleaned: its first opener finds only dead
	// slots.
	if !inherited && !reg.TookDeadSlot() && !slices.ContainsFunc(before, registry.Slot.Dead) {
		return nil
	}
	return m.recoverAtOpen()
}

// recoverAtOpen is the recovery pass of an Open that found processes
// dead with the map open, or inherited their lock episodes: what it
// released is RecoveredAtOpen.
func (m *Map) recoverAtOpen() error {
	var err error
	m.atOpen, err = m.recoverSegments(nil)
	if errors.Is(err, rwulock.ErrUnsettled) || errors.Is(err, rwulock.ErrTimeout) || errors.Is(err, registry.ErrRecoveryBusy) {
		// A live process was busy with the lock for the whole wait (a
		// loaded machine), or another recovery pass was (it may be waiting
		// on such a process): what the dead left stays for the next pass,
		// which any lock timeout runs. Not a reason to refuse the map.
		return nil
	}
	return err
}

// joinWait is how long Open waits for its process slot: 3 x LockTimeout,
// or LockTimeout and an hour when that is shorter, and never past what a
// Duration holds (a LockTimeout of centuries, meant as "forever", must not
// wrap into no wait at all).
func joinWait(lockTimeout time.Duration) time.Duration {
	switch {
	case lockTimeout <= 30*time.Minute:
		return 3 * lockTimeout
	case lockTimeout <= math.MaxInt64-time.Hour:
		return lockTimeout + time.Hour
	}
	return math.MaxInt64
}
