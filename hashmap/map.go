package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"iter"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/internal/inflight"
	"github.com/sharedmap/sharedmap/internal/keyhash"
	"github.com/sharedmap/sharedmap/internal/registry"
	"github.com/sharedmap/sharedmap/ipc"
	"github.com/sharedmap/sharedmap/offheap"
	"github.com/sharedmap/sharedmap/rwulock"
	"github.com/sharedmap/sharedmap/segment"
)

// Map is a hash map in a memory-mapped file, shared by every process that
// opens the same file. All methods, Close included, are safe for
// concurrent use by many goroutines and processes.
type Map struct {
	file     *offheap.File
	table    *segment.Table
	layout   *segment.Layout
	opts     Options
	readOnly bool
	gate     inflight.Gate // calls in progress, and whether Close has begun (see enter)
	// fastPuts: Put tries segment.TryOverwrite before it counts itself in
	// with the gate. That fast path keeps its lock in the fast ledgers,
	// which Close waits on instead (Table.CloseFastPaths), so it needs
	// neither the gate's two locked instructions nor the ledger's four.
	// Set once the slot is joined, in files with fast ledgers, for plain
	// maps whose writers do not queue locally.
	fastPuts bool
	closing  sync.Mutex // held by Close until the file is let go

	lockLayout lockLayout
	lockTable  *LockTable
	reg        *registry.Registry // nil: a file from before the registry, or damaged (regErr)
	regErr     error              // why a read-only open could not attach the registry (Check reports it)
	counters   []uint64           // this process's hits and misses, two per segment, in its registry slot (nil: none)
	baseCounts []uint64           // what counters held when this process joined its slot (see ownLookups)
	segMask    uint64             // Segments - 1: a hash's low bits pick its segment
	rangeBufs  sync.Pool          // of *rangeBuf, for RangeView
	recoveries atomic.Int64       // recovery passes run after lock timeouts, in this process
	repairs    atomic.Int64       // recovery passes that released something, in this process
	atOpen     Recovery           // what Open repaired of processes that died before it
	mended     []string           // headers Open rewrote from the file's layout (Recovery.Mended)
	admin      ipc.Mutex          // the map's own lock, arena lock 0; nil in files without a lock table
	adminLocal sync.Mutex         // held with admin by this process's writers (adminLock), so that LockTable.Reset can wait for them
	fills      fillGroup          // GetOrLoad's calls in progress in this process, by key
}

// FileSize is the size of the file Open would create for opts (nil: the
// defaults), or the error it would give for them. Most of it is sparse
// until entries are written; what a creation allocates at once is the lock
// arena, the process registry and every segment's first tier.
func FileSize(opts *Options) (int64, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return 0, err
	}
	if o.DefaultTTL > 0 && !o.Cache {
		return 0, fmt.Errorf("DefaultTTL without Cache: %w", ErrNotCache)
	}
	l, _, _, err := plan(o)
	if err != nil {
		return 0, err
	}
	return l.End, nil
}

// plan lays out a new file for o, which has its defaults: the lock arena
// after the file header, then the registry, then the segments. Options too
// large for the format are refused with the largest Entries that fits.
func plan(o Options) (segment.Layout, lockLayout, registry.Layout, error) {
	l, locks, reg, err := planLayout(o)
	if err != nil {
		err = withLargestEntries(o, err)
	}
	return l, locks, reg, err
}

func planLayout(o Options) (segment.Layout, lockLayout, registry.Layout, error) {
	locks, err := newLockLayout(o.Locks, o.LockAlgorithm)
	if err != nil {
		return segment.Layout{}, lockLayout{}, registry.Layout{}, err
	}
	params := segment.Params{
		Entries: o.Entries, AverageKeySize: o.AverageKeySize, AverageValueSize: o.AverageValueSize,
		MaxBloatFactor: o.MaxBloatFactor, Segments: o.Segments, Cache: o.Cache, NoUndo: o.NoUndo,
	}
	// The registry's size depends on the count of segments (a ledger and
	// counters per segment in every slot), and the segments' offset on the
	// registry's size: a first layout gives the count.
	layoutAt := func(off int64) (segment.Layout, error) {
		l, err := segment.NewLayout(params, off, !o.NoChecksums)
		l.FastLedgers = l.FastLedgers && !testCreateWithoutFastLedgers
		return l, err
	}
	l, err := layoutAt(offheap.HeaderSize + locks.bytes)
	if err != nil {
		return segment.Layout{}, lockLayout{}, registry.Layout{}, err
	}
	reg := registry.Layout{Off: offheap.HeaderSize + locks.bytes, Slots: o.MaxProcesses, Ledgers: ledgersPerSlot(l.Segments, l.FastLedgers),
		Counters: countersPerSlot(l.Segments, l.Stats)}
	if l, err = layoutAt(reg.Off + reg.Bytes()); err != nil {
		return segment.Layout{}, lockLayout{}, registry.Layout{}, err
	}
	return l, locks, reg, nil
}

// readRecords decodes the layout records of f's header: the segment
// record, segLen bytes, then, in files that have them, the lock record
// and the registry record. Files from before lock tables have no lock
// record and no arena (the zero lockLayout), nor those from before the
// registry a registry (0 slots).
func readRecords(f *offheap.File, segLen int) (segment.Layout, lockLayout, int, error) {
	rec := f.Layout()
	var locks lockLayout
	regSlots := 0
	if len(rec) > segLen {
		lockRec := rec[segLen:]
		var err error
		if n := lockRecordLen(lockRec); n < len(lockRec) {
			if regSlots, err = decodeRegistryRecord(lockRec[n:]); err != nil {
				return segment.Layout{}, lockLayout{}, 0, err
			}
			lockRec = lockRec[:n]
		}
		if locks, err = decodeLockLayout(lockRec); err != nil {
			return segment.Layout{}, lockLayout{}, 0, err
		}
		rec = rec[:segLen]
	}
	var regBytes int64
	if regSlots > 0 {
		// The ledger count is the segment count, which the segment record
		// holds; the registry's size does not depend on where it starts
		// (and a wrong count makes DecodeLayout below fail).
		if segs, ok := segment.RecordSegments(rec); ok {
			regBytes = registry.Layout{Slots: regSlots, Ledgers: ledgersPerSlot(segs, segment.RecordHasFastLedgers(rec)), Counters: countersPerSlot(segs, segment.RecordHasStats(rec))}.Bytes()
		}
	}
	l, err := segment.DecodeLayout(rec, f.DataOffset()+locks.bytes+regBytes, f.Size())
	return l, locks, regSlots, err
}

// testCreateWithoutFastLedgers, set only by tests, makes Open create files
// as builds before fast ledgers did.
var testCreateWithoutFastLedgers bool

// Open opens the map at path, creating it (sized by opts) if the file does
// not exist or is empty (as os.CreateTemp leaves it), or was left
// half-created by a creator that died; opts.NoCreate opens only an existing
// map, and opts.CreateNew only creates, in an absent or empty file. nil
// opts means all defaults. When several processes open the same new path at once, exactly
// one creates it and the others wait for it. Any other file that is not a
// map is refused (ErrNotSharedMap) and left as it is. A symbolic
// link at path is followed to an existing file, but a map is never created
// through one: a link whose target does not exist is refused
// (ErrDanglingLink, naming the target) rather than followed, since
// in a directory others may write to, such a link would have Open create a
// file wherever it points.
//
// The map's liveness for other processes is its descriptor of the file:
// hand no descriptor of it to a child process (exec.Cmd.ExtraFiles, a
// fork without exec). A child that keeps one keeps this process's locks
// alive after it dies, until the child lets the descriptor go
// (docs/RELIABILITY.md). Likewise the map is the file, not its path: a
// file renamed or removed while processes have it open stays their map,
// and an Open of the old path then creates a new, empty one beside it.
func Open(path string, opts *Options) (*Map, error) {
	o, err := opts.withDefaults()
	if err == nil && o.DefaultTTL > 0 && !o.Cache && !o.ReadOnly && !o.NoCreate {
		// Refused again below for an existing file that is no cache; said
		// here too so that a file about to be created is not left behind
		// as the wrong kind of map.
		if st, serr := os.Stat(path); serr != nil || st.Size() == 0 {
			return nil, fmt.Errorf("open %s: DefaultTTL without Cache: %w", path, ErrNotCache)
		}
	}
	if err != nil {
		return nil, err
	}
	want, wantLocks, wantReg, err := plan(o)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	segRecord := want.Encode()
	f, err := offheap.Open(path, offheap.OpenOptions{
		Create:      !o.ReadOnly && !o.NoCreate,
		CreateNew:   o.CreateNew,
		ReadOnly:    o.ReadOnly,
		Size:        want.End,
		NoHugePages: o.NoHugePages,
		Mode:        o.Mode,
		Layout:      append(append(segRecord, wantLocks.encode()...), encodeRegistryRecord(wantReg.Slots)...),
		// The disk blocks of everything every map writes (the lock
		// arena, the registry with every process's slot, ledgers and
		// counters, the global and segment headers and the first tiers),
		// so that a full disk fails the creation rather than a later write
		// (SIGBUS), and leaves no map that looks ready.
		ReserveOff: offheap.HeaderSize,
		ReserveLen: want.TiersOff + want.Segments*want.TierSize - offheap.HeaderSize,
		Init: func(r *offheap.Region) error {
			// A sparse file is all zeros: every segment starts empty and
			// unlocked. Only the lock arena and the registry need headers.
			registry.Format(r.Bytes(wantReg.Off, wantReg.Bytes()), wantReg)
			return ipc.Format(r.Uint64s(offheap.HeaderSize, wantLocks.words), wantLocks.config())
		},
	})
	if err != nil {
		return nil, classifyOpenError(err)
	}
	l, locks, regSlots, err := readRecords(f, len(segRecord))
	if err != nil {
		f.Close()
		return nil, classifyOpenError(fmt.Errorf("open %s: %w", path, err))
	}
	if o.DefaultTTL > 0 && !l.Cache {
		f.Close()
		return nil, fmt.Errorf("open %s: DefaultTTL: %w", path, ErrNotCache)
	}
	if !f.Created() && opts != nil {
		if err := conflicts(opts, &l, locks, regSlots); err != nil {
			f.Close()
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	if !o.NoPrefault {
		// Every operation touches a segment header and its first tier; fault
		// them in here rather than one page at a time inside Puts.
		_ = f.Region.Prefault(l.SegmentsOff, l.TiersOff+l.Segments*l.TierSize-l.SegmentsOff, f.Created()) // advisory
	}
	alloc := f.Allocate
	if o.ReadOnly {
		alloc = nil
	}
	tb, err := segment.Open(f.Region, l, alloc, o.LockTimeout)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	tb.SetLocalQueue(o.QueueWritersLocally)
	if o.Now != nil {
		now := o.Now
		tb.SetClock(func() int64 { return now().UnixNano() })
	}
	m := &Map{file: f, table: tb, layout: tb.Layout(), segMask: uint64(tb.Layout().Segments - 1), opts: o, readOnly: o.ReadOnly, lockLayout: locks}
	m.mended = append(m.mended, f.HeaderMended()...)
	if m.lockTable, err = newLockTable(m, f.Region, locks); err != nil {
		f.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if m.admin != nil {
		tb.SetAdminLock(adminLock{m})
	}
	regLayout := registry.Layout{Off: f.DataOffset() + locks.bytes, Slots: regSlots, Ledgers: ledgersPerSlot(l.Segments, l.FastLedgers), Counters: countersPerSlot(l.Segments, l.Stats)}
	if regSlots > 0 && o.ReadOnly {
		// Read-only: no slot (a slot is written), but Check can still
		// see who died with the map open.
		m.reg, m.regErr = registry.Attach(f, regLayout)
	}
	if regSlots > 0 && !o.ReadOnly {
		if err := m.join(regLayout); err != nil {
			// The lock table first: its recovery may have adopted dead
			// processes' lock episodes into this slot's journal and be
			// driving them, which must stop before the slot is free for
			// another process to take (and adopt them too).
			m.lockTable.close()
			if m.reg != nil {
				_ = m.reg.Leave() // the slot it took: else it reads as a process that died with the map open
			}
			f.Close()
			return nil, classifyOpenError(fmt.Errorf("open %s: %w", path, err))
		}
	}
	return m, nil
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
	if err != nil {
		return err
	}
	m.reg = reg
	m.joinCounters(reg.Counters(slot))
	inherited := false
	if a := m.lockTable.arena; a != nil {
		journals := make([][]uint64, l.Slots)
		for i := range journals {
			journals[i] = reg.Journal(i)
		}
		if err := a.SetJournals(journals, slot); err != nil {
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
	// A process dead before we joined (we may have taken its slot), or one
	// that died since we looked and whose slot Join gave us, or episodes
	// our slot inherited: release what they held. This is also how a file
	// everyone left by dying is cleaned: its first opener finds only dead
	// slots.
	if !inherited && !reg.TookDeadSlot() && !slices.ContainsFunc(before, registry.Slot.Dead) {
		return nil
	}
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

// conflicts reports sizing options that disagree with an existing map.
func conflicts(o *Options, l *segment.Layout, locks lockLayout, processes int) error {
	var diffs []string
	check := func(name string, asked, has int) {
		if asked != 0 && asked != has {
			diffs = append(diffs, fmt.Sprintf("%s %d (the file has %d)", name, asked, has))
		}
	}
	check("Entries", o.Entries, l.Entries)
	check("AverageKeySize", o.AverageKeySize, l.AverageKeySize)
	check("AverageValueSize", o.AverageValueSize, l.AverageValueSize)
	check("Segments", o.Segments, int(l.Segments))
	check("Locks", o.Locks, locks.locks)
	check("MaxProcesses", o.MaxProcesses, processes)
	if o.LockAlgorithm != "" && o.LockAlgorithm != locks.algorithm {
		diffs = append(diffs, fmt.Sprintf("LockAlgorithm %q (the file has %q)", o.LockAlgorithm, locks.algorithm))
	}
	if o.Cache && !l.Cache {
		diffs = append(diffs, "Cache (the file is not a cache map)")
	}
	if o.MaxBloatFactor != 0 && o.MaxBloatFactor != l.MaxBloatFactor {
		diffs = append(diffs, fmt.Sprintf("MaxBloatFactor %v (the file has %v)", o.MaxBloatFactor, l.MaxBloatFactor))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%w: asked for %v; open with those fields zero to use the file's layout", ErrIncompatible, diffs)
	}
	return nil
}

// Close lets the file go. The data stays in the file (and in the page
// cache); Close does not force it to disk (see Sync). Calls made after
// Close has begun return ErrClosed (or a zero Len, Stats, Segments);
// calls already running when it begins finish first, and Close waits for
// them: for a Compute's function too, so a Compute function that calls
// Close waits for itself forever, and for a LockTable.Lock or LockTimeout
// still waiting, which gives up (ErrClosed) within LockTimeout (Close then
// gives the turn it leaves in a FIFO lock's queue a short, bounded time
// to pass). Other processes are not affected. Calling Close again waits
// for the first to finish and returns nil.
//
// The addresses the file was mapped at stay reserved, filled with zeros
// and using no memory, for as long as the process lives: a lock-free Get
// still running on another goroutine reads those zeros, not unmapped
// memory, and returns ErrClosed.
func (m *Map) Close() error {
	m.closing.Lock()
	defer m.closing.Unlock()
	if !m.gate.Close() { // waits for the calls in progress
		return nil
	}
	m.table.CloseFastPaths() // and for Puts on the fast path, which the gate does not count
	m.lockTable.close()
	if m.reg != nil {
		_ = m.reg.Leave() // closing the file drops its lock anyway
	}
	return m.file.Retire()
}

// Sync writes every change made to the map so far, by any process, to the
// file's disk and waits for it (msync). Without it, changes are visible to
// every process at once and survive any process's death, but reach the
// disk only when the kernel writes dirty pages back: a machine crash may
// lose the latest of them, or leave an entry half written, which Check
// reports and Repair removes. Sync costs a write of every page dirtied
// since the last one; call it at the points that must survive a crash.
func (m *Map) Sync() error {
	c, err := m.enterAny(false)
	if err != nil {
		return err
	}
	defer c.Leave()
	return m.file.Sync()
}

// Path is the file the map lives in.
func (m *Map) Path() string { return m.file.Path() }

// Get returns a copy of the value stored under key, or an error matching
// ErrNotFound.
func (m *Map) Get(key []byte) ([]byte, error) {
	v, err := m.GetInto(nil, key)
	if err == nil && v == nil {
		v = []byte{}
	}
	return v, err
}

// GetInto appends the value stored under key to dst and returns the extended
// slice; with enough capacity in dst it allocates nothing. ErrNotFound if
// the key is absent (dst is returned unchanged). key may lie in dst's
// spare capacity (one buffer for both): the lookup then copies the key
// first, an allocation.
func (m *Map) GetInto(dst, key []byte) ([]byte, error) {
	if m.gate.Closed() {
		return dst, ErrClosed
	}
	key = keyApart(dst, key)
	h := keyhash.Inline(key) // see keyhash: a call here costs more than hashing
	if h == 0 {
		h = xxhash.Sum64(key)
	}
	// getCounted, written out: one frame less on every Get's path (see
	// segment.Table.Get for why instructions count there).
	// Uncounted (see enter): if Close began meanwhile, what was read may
	// be the zeros it leaves behind.
	v, answer := m.table.TryGet(h, key, dst)
	if answer == segment.Unsure {
		return m.getSlow(h, key, dst)
	}
	m.countLookup(h, answer == segment.Found)
	switch {
	case m.gate.Closed():
		return dst, ErrClosed
	case answer != segment.Found:
		return dst, ErrNotFound
	}
	return v, nil
}

// GetChecked is GetInto that also verifies the entry's checksum: a value
// whose bytes changed after it was written (damage on disk, or a write torn
// by a machine crash) gives an error matching ErrCorrupt, naming the key,
// instead of the bytes. Other lookups trust the file; this one reads by
// the general path and hashes the entry, and took 1.6x a GetInto's time
// with 1 KiB values and 2.4x with 64-byte ones (100k random keys, a
// scratch benchmark, medians of 3). mapctl get uses it. In a map created with
// NoChecksums it verifies nothing.
func (m *Map) GetChecked(dst, key []byte) ([]byte, error) {
	h := xxhash.Sum64(key)
	key = keyApart(dst, key)
	return m.lookupEntered(h, dst, func() ([]byte, bool, error) { return m.table.For(h).GetChecked(h, key, dst) })
}

// keyApart returns key, or a copy of it if it lies in dst's spare
// capacity, where a lookup appends the value: an optimistic read appends
// before it knows whether a writer spoiled it, and its next look must
// compare the key's own bytes, not the value's.
func keyApart(dst, key []byte) []byte {
	if offheap.InSpare(dst, key) {
		return bytes.Clone(key)
	}
	return key
}

// getSlow is GetInto after an unsure TryGet.
func (m *Map) getSlow(h uint64, key, dst []byte) ([]byte, error) {
	return m.lookupEntered(h, dst, func() ([]byte, bool, error) { return m.table.GetSlow(h, key, dst) })
}

// lookupEntered runs a lookup of the key hashed to h, appending to dst,
// inside the in-flight gate, counts it as a hit or a miss and answers as
// GetInto does.
func (m *Map) lookupEntered(h uint64, dst []byte, lookup func() ([]byte, bool, error)) ([]byte, error) {
	c, err := m.enter(h, false)
	if err != nil {
		return dst, err
	}
	defer c.Leave()
	v, found, err := lookup()
	if err != nil {
		return dst, err
	}
	m.countLookup(h, found)
	if !found {
		return dst, ErrNotFound
	}
	return v, nil
}

// getCounted is the table lookup of key (hashed to h) into dst, counted as
// a hit or a miss.
func (m *Map) getCounted(h uint64, key, dst []byte) ([]byte, bool, error) {
	key = keyApart(dst, key)
	v, answer := m.table.TryGet(h, key, dst)
	found := answer == segment.Found
	if answer == segment.Unsure {
		var err error
		if v, found, err = m.table.GetSlow(h, key, dst); err != nil {
			return dst, false, err
		}
	}
	m.countLookup(h, found)
	return v, found, nil
}

// GetMany looks up every key and sets values[i] to the value of keys[i],
// appended to values[i][:0] so that its capacity is reused (with enough of
// it, GetMany allocates nothing), or to nil when the key is absent (a
// present empty value is non-nil; an absent key's buffer is let go, so a
// caller that reuses values across calls and expects misses keeps its
// buffers elsewhere). It answers what a GetInto per key would, each key
// read consistently on its own, but it overlaps the lookups' cache misses:
// for random keys in a map larger than the CPU's caches, a key cost 0.67x
// a lone GetInto with 64-byte values in the peer benchmark (149 against
// 224 ns, bench/results/amd-0a260da; with 1 KiB values, whose copies are
// most of the time, about the same). values must be as long as keys.
// values[i] may hold keys[i] in its spare capacity (see GetInto), but must
// not share memory with another key of the batch. An error in a key's
// lookup (damage in its segment, ErrCorrupt, say) stops the batch: the
// error names the key's index, and only the values before it are set (the
// rest keep their slices, though the failing key's may hold part of a
// read).
func (m *Map) GetMany(keys, values [][]byte) error {
	if len(values) != len(keys) {
		return fmt.Errorf("GetMany: %d values for %d keys", len(values), len(keys))
	}
	c, err := m.enterAny(false)
	if err != nil {
		return err
	}
	defer c.Leave()
	b := keyBatches{keys: keys}
	for b.next(m.table) {
		for i, k := range b.batch {
			v, found, err := m.getCounted(b.hashes[i], k, values[b.start+i][:0])
			if err != nil {
				return fmt.Errorf("GetMany: key %d: %w", b.start+i, err)
			}
			switch {
			case !found:
				v = nil
			case v == nil:
				v = []byte{}
			}
			values[b.start+i] = v
		}
	}
	return nil
}

// keyBatches walks the keys of a batch call (GetMany, PutMany, DeleteMany)
// getManyBatch at a time: next hashes a batch and requests every key's
// slot and home runs (segment.Table.Prefetch) before the caller looks any
// of them up, so the lookups overlap their cache misses. A value, not a
// closure, so that the hashes stay on the caller's stack.
type keyBatches struct {
	keys   [][]byte
	start  int      // index in keys of batch[0]
	batch  [][]byte // the current batch
	hashes [getManyBatch]uint64
}

// next moves to the next batch and requests its lines; false after the
// last.
func (b *keyBatches) next(t *segment.Table) bool {
	b.start += len(b.batch)
	if b.start >= len(b.keys) {
		return false
	}
	b.batch = b.keys[b.start:min(b.start+getManyBatch, len(b.keys))]
	for i, k := range b.batch {
		b.hashes[i] = xxhash.Sum64(k)
	}
	t.Prefetch(b.hashes[:len(b.batch)], b.batch)
	return true
}

// PutMany stores values[i] under keys[i] for every i, in order, as a Put
// of each would: each key's write is atomic and visible to every process
// as soon as it is done, but the batch is not a transaction. Like GetMany
// it overlaps the cache misses of the lookups every write begins with,
// so for random keys in a map larger than the CPU's caches a key costs a
// fraction of a lone Put. It stops at the first error, returning how many
// keys it stored before it; the error names the key's index and matches
// what Put would return (ErrFull, ErrTooLarge, ...). values must be as
// long as keys.
func (m *Map) PutMany(keys, values [][]byte) (stored int, err error) {
	stored, _, err = m.PutManyAdded(keys, values)
	return stored, err
}

// PutManyAdded is PutMany that also says how many of the keys it stored
// were absent until then (added); it replaced the values of the others.
// Each key is counted as its own write finds it, so the counts are exact
// whatever other processes write at the same time (a key stored twice in
// one batch is added once and replaced once).
func (m *Map) PutManyAdded(keys, values [][]byte) (stored, added int, err error) {
	if len(values) != len(keys) {
		return 0, 0, fmt.Errorf("PutMany: %d values for %d keys", len(values), len(keys))
	}
	c, err := m.enterAny(true)
	if err != nil {
		return 0, 0, err
	}
	defer c.Leave()
	b := keyBatches{keys: keys}
	for b.next(m.table) {
		expiry := m.expiry(m.opts.DefaultTTL) // per batch: a long call must not age later keys
		for i, k := range b.batch {
			inserted, err := m.table.For(b.hashes[i]).PutExpiring(b.hashes[i], k, values[b.start+i], expiry, segment.Replace)
			if err != nil {
				return b.start + i, added, fmt.Errorf("PutMany: key %d: %w", b.start+i, err)
			}
			if inserted {
				added++
			}
		}
	}
	return len(keys), added, nil
}

// getManyBatch is how many lookups GetMany overlaps: enough to keep many
// misses in flight, few enough that a key's lines are still in cache when
// its turn comes (4, 8 and 16 measured alike; 16 slightly ahead).
const getManyBatch = 16

// Contains reports whether key is present, without copying its value.
func (m *Map) Contains(key []byte) (bool, error) {
	h := xxhash.Sum64(key)
	c, err := m.enter(h, false)
	if err != nil {
		return false, err
	}
	defer c.Leave()
	found, err := m.table.For(h).Has(h, key)
	if err == nil {
		m.countLookup(h, found)
	}
	return found, err
}

// Put stores value under key, replacing any value. Both are copied into the
// file. It fails with ErrFull when the map is at its bloat limit and
// ErrTooLarge for an entry larger than a tier; nothing is written then. In
// a cache map the entry lives for DefaultTTL, and Put never fails with
// ErrFull: it evicts.
func (m *Map) Put(key, value []byte) error {
	h := keyhash.Inline(key)
	if h == 0 {
		h = xxhash.Sum64(key)
	}
	seg := m.table.For(h)
	// Not once Close has begun (the gate closed): such a call returns
	// ErrClosed. One that checked before is a call already running, which
	// CloseFastPaths waits for.
	tried := m.fastPuts && !m.gate.Closed()
	if tried && seg.TryOverwrite(h, key, value) {
		return nil // see fastPuts
	}
	c, err := m.enter(h, true)
	if err != nil {
		return err
	}
	defer c.Leave()
	if tried {
		_, err = seg.PutAfterTry(h, key, value, m.expiry(m.opts.DefaultTTL))
	} else {
		_, err = seg.PutExpiring(h, key, value, m.expiry(m.opts.DefaultTTL), segment.Replace)
	}
	return err
}

// NoExpiry, as PutWithTTL's ttl, stores an entry that never expires (it
// may still be evicted), whatever the map's DefaultTTL.
const NoExpiry = time.Duration(math.MaxInt64)

// PutWithTTL is Put for a cache map, with an entry that expires ttl from
// now: from then on no process sees it, and its space is reclaimed when
// needed. ttl must be positive (NoExpiry: never); ErrNotCache on a map
// created without Options.Cache.
func (m *Map) PutWithTTL(key, value []byte, ttl time.Duration) error {
	h := xxhash.Sum64(key)
	c, err := m.enter(h, true)
	if err != nil {
		return err
	}
	defer c.Leave()
	if !m.layout.Cache {
		return ErrNotCache
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: TTL %v must be positive (hashmap.NoExpiry for an entry that never expires)", ErrBadOptions, ttl)
	}
	_, err = m.table.For(h).PutExpiring(h, key, value, m.expiry(ttl), segment.Replace)
	return err
}

// expiry is the expiry time of an entry stored now to live ttl (0: never,
// as for NoExpiry).
func (m *Map) expiry(ttl time.Duration) int64 {
	if ttl <= 0 || ttl == NoExpiry || !m.layout.Cache {
		return 0
	}
	now := m.table.Now()
	if now > 0 && int64(ttl) > math.MaxInt64-now {
		return math.MaxInt64 // centuries away: as good as never, and not in the past
	}
	return now + int64(ttl)
}

// PutIfAbsent stores value under key only if the key is absent (or, in a
// cache map, expired), and reports whether it did.
func (m *Map) PutIfAbsent(key, value []byte) (bool, error) {
	h := xxhash.Sum64(key)
	c, err := m.enter(h, true)
	if err != nil {
		return false, err
	}
	defer c.Leave()
	return m.table.For(h).PutExpiring(h, key, value, m.expiry(m.opts.DefaultTTL), segment.IfAbsent)
}

// Delete removes key and reports whether it was present.
func (m *Map) Delete(key []byte) (existed bool, err error) {
	h := xxhash.Sum64(key)
	c, err := m.enter(h, true)
	if err != nil {
		return false, err
	}
	defer c.Leave()
	return m.table.For(h).Delete(h, key)
}

// DeleteMany removes every key in keys, as a Delete of each in turn would
// (each removal atomic on its own; the batch is not a transaction), with
// the lookups' cache misses overlapped as in GetMany. It returns how many
// of the keys were present, and stops at the first error, which names the
// key's index.
func (m *Map) DeleteMany(keys [][]byte) (deleted int, err error) {
	c, err := m.enterAny(true)
	if err != nil {
		return 0, err
	}
	defer c.Leave()
	b := keyBatches{keys: keys}
	for b.next(m.table) {
		for i, k := range b.batch {
			existed, err := m.table.For(b.hashes[i]).Delete(b.hashes[i], k)
			if err != nil {
				return deleted, fmt.Errorf("DeleteMany: key %d: %w", b.start+i, err)
			}
			if existed {
				deleted++
			}
		}
	}
	return deleted, nil
}

// Compute atomically replaces the value of key with what fn returns. fn gets
// a copy of the current value (found false if absent); it returns the new
// value and keep: keep false removes the key (or leaves it absent). No other
// writer, in any process, changes the key between the read and the write.
//
// fn runs under the lock of the key's segment: keep it short, and do not
// write to the map from it. A write to the same segment waits for fn's own
// lock and fails with ErrTimeout after up to twice LockTimeout; reads and
// writes to other segments work, but which segment a key falls in is not
// for the caller to know.
//
// In a cache map an entry Compute changes keeps its expiry (a counter of
// requests in a fixed window stays in its window), and one it creates lives
// for DefaultTTL; PutWithTTL sets a new expiry.
func (m *Map) Compute(key []byte, fn func(old []byte, found bool) (value []byte, keep bool)) error {
	if fn == nil {
		return fmt.Errorf("%w: Compute with a nil function", ErrBadOptions)
	}
	h := xxhash.Sum64(key)
	c, err := m.enter(h, true)
	if err != nil {
		return err
	}
	defer c.Leave()
	return m.table.For(h).ComputeExpiring(h, key, m.expiry(m.opts.DefaultTTL), fn)
}

// Update is Compute that can give up and allocates nothing: fn gets the
// current value (found false if absent) in a buffer valid only while fn
// runs (copy what you keep; the value fn returns may be a slice of it),
// and returns the new value and keep, as for Compute, or an error: then
// nothing is written, and Update returns that error. In a cache map an entry
// it changes keeps its expiry, as with Compute.
func (m *Map) Update(key []byte, fn func(old []byte, found bool) (value []byte, keep bool, err error)) error {
	if fn == nil {
		return fmt.Errorf("%w: Update with a nil function", ErrBadOptions)
	}
	h := xxhash.Sum64(key)
	c, err := m.enter(h, true)
	if err != nil {
		return err
	}
	defer c.Leave()
	var ferr error
	err = m.table.For(h).Update(h, key, m.expiry(m.opts.DefaultTTL), func(old []byte, found bool) ([]byte, segment.Outcome) {
		value, keep, err := fn(old, found)
		switch {
		case err != nil:
			ferr = err
			return nil, segment.Leave
		case !keep:
			return nil, segment.Remove
		}
		return value, segment.Store
	})
	if ferr != nil {
		return ferr
	}
	return err
}

// Range iterates over every entry, one segment at a time. Each segment is
// copied out consistently (see Get) and yielded from the copy, so no lock is
// held while the loop body runs and it may call the map. The view is
// consistent per segment, not across segments. The yielded slices stay
// valid after the loop. The iteration sets *errp to nil first, and to
// ErrClosed if the map is closed, which stops it. A nil errp says the
// caller does not want the error: the iteration is the same, and what it
// left out, or why it stopped, goes unsaid (check Len, or Check, if that
// matters).
//
// Neither damage nor a stuck lock stops it. An entry that fails its
// checksum (a map created with checksums, the default) or whose header
// does not decode is not yielded, nor are the entries of a segment whose
// chain of tiers cannot be followed, or whose lock stays held through the
// whole wait (see LockTimeout: in a map opened read-only, a process that
// died holding it keeps it until a writer's recovery releases it). The
// iteration goes on without them, and at its end (or with an error that
// stops it) stores in *errp an error matching ErrCorrupt or ErrTimeout
// that counts what was left out and names the first of each kind (Repair
// drops damaged entries and rebuilds such segments, keeping what it can).
// A loop that breaks early hears of none.
//
// The check hashes every entry: a RangeView of 200k entries took about
// 1.4x the time with 64-byte values and 1.55x with 1 KiB ones (medians of
// 5 runs of each build taking turns: 25 against 18 ms, 68 against 44); a
// map created with NoChecksums skips it.
func (m *Map) Range(errp *error) iter.Seq2[[]byte, []byte] { return m.rangeSegments(errp, false) }

// RangeView is Range for loops that use each entry at once: the slices it
// yields are valid only until the loop body returns (one buffer is reused
// for every segment, and by later RangeViews), so the iteration allocates
// next to nothing once that buffer has grown to the largest segment.
func (m *Map) RangeView(errp *error) iter.Seq2[[]byte, []byte] { return m.rangeSegments(errp, true) }

// rangeBuf is a RangeView's copy of a segment, kept for the next one.
type rangeBuf struct {
	arena []byte
	ends  []int
}

func (m *Map) rangeSegments(errp *error, reuse bool) iter.Seq2[[]byte, []byte] {
	if errp == nil {
		errp = new(error) // the caller does not want the error
	}
	return func(yield func(key, value []byte) bool) {
		*errp = nil // an error variable reused from an earlier call must not show through
		if m.gate.Closed() {
			*errp = ErrClosed
			return
		}
		var arena []byte
		var ends []int
		var bad segment.Damaged // entries left out
		var unread error        // the first segment that could not be read
		skipped := 0            // segments that could not be read
		// damage is the end's error: the entries left out and the
		// segments skipped so far.
		damage := func() error {
			var errs []error
			switch {
			case skipped == 1:
				errs = append(errs, fmt.Errorf("%w; its entries were left out", unread))
			case skipped > 1:
				errs = append(errs, fmt.Errorf("%w; its entries, and those of %d more segments that could not be read, were left out", unread, skipped-1))
			}
			if bad.Any() {
				errs = append(errs, fmt.Errorf("%w: %v; Repair drops them", ErrCorrupt, bad))
			}
			return errors.Join(errs...)
		}
		// fail ends the iteration with err, and with the damage met so
		// far, which the end would have reported.
		fail := func(err error) {
			if d := damage(); d != nil {
				err = errors.Join(err, d)
			}
			*errp = err
		}
		if reuse {
			if b, ok := m.rangeBufs.Get().(*rangeBuf); ok {
				arena, ends = b.arena, b.ends
			}
			defer func() {
				if cap(arena) <= 1<<24 {
					m.rangeBufs.Put(&rangeBuf{arena[:0], ends[:0]})
				}
			}()
		}
		for i := range int(m.layout.Segments) {
			if !reuse {
				arena = nil // fresh per segment: slices already yielded keep theirs
			}
			var damaged segment.Damaged
			var err error
			arena, ends, damaged, err = m.copySegment(i, arena, ends)
			switch {
			case errors.Is(err, ErrCorrupt), errors.Is(err, ErrTimeout):
				// A chain that cannot be followed, or a lock held
				// throughout the wait (a process that died holding
				// it, in a map opened read-only, which cannot release
				// it): the other segments are still worth reading
				// (mapctl dump saves what it can).
				if skipped++; unread == nil {
					unread = err
				}
				continue
			case err != nil:
				fail(err)
				return
			}
			bad.Add(damaged)
			for j := 0; j+3 < len(ends); j += 4 {
				if !yield(arena[ends[j]:ends[j+1]:ends[j+1]], arena[ends[j+2]:ends[j+3]:ends[j+3]]) {
					return
				}
			}
		}
		if d := damage(); d != nil {
			*errp = d
		}
	}
}

// copySegment is one segment's AppendEntries for rangeSegments, inside
// the in-flight gate but not across the loop body's yield, which may close
// the map. The deferred Leave matters: mapctl reads under
// debug.SetPanicOnFault, and a fault on a file truncated under it panics
// out of AppendEntries; without the Leave, the Close that follows waits for
// this call for good.
func (m *Map) copySegment(i int, arena []byte, ends []int) ([]byte, []int, segment.Damaged, error) {
	c, err := m.enterAny(false)
	if err != nil {
		return arena, ends, segment.Damaged{}, err
	}
	defer c.Leave()
	return m.table.Segment(i).AppendEntries(arena[:0], ends[:0])
}

// Len is the number of entries (0 once the map is closed). It takes no
// lock: while other processes write, it is a close estimate. In a cache
// map it counts expired entries whose space has not been reclaimed yet.
func (m *Map) Len() int {
	c, err := m.enterAny(false)
	if err != nil {
		return 0
	}
	defer c.Leave()
	return int(m.table.Len())
}

// Version says what state of its segment a value was read at; see
// GetVersioned. The zero Version is never current.
type Version struct {
	valid   bool
	segment int
	seq     uint64
	expiry  int64
}

// GetVersioned is GetInto that also returns the Version the value was read
// at, for caches of decoded values: as long as Unchanged(v) reports true,
// the value is still the key's value in the file, for every process. Any
// write that changes or removes a value of the key's segment (in any
// process) ends that, as does the entry's expiry in a cache map.
func (m *Map) GetVersioned(dst, key []byte) ([]byte, Version, error) {
	h := xxhash.Sum64(key)
	c, err := m.enter(h, false)
	if err != nil {
		return dst, Version{}, err
	}
	defer c.Leave()
	s := m.table.For(h)
	v, found, seq, expiry, err := s.GetVersioned(h, keyApart(dst, key), dst)
	if err != nil {
		return dst, Version{}, err
	}
	m.countLookup(h, found)
	if !found {
		return dst, Version{}, ErrNotFound
	}
	return v, Version{valid: true, segment: int(s.Index()), seq: seq, expiry: expiry}, nil
}

// Unchanged reports whether a value read at v is still current: no write
// has changed or removed a value of its segment since, and it has not
// expired. It reads one word of the file (and the clock, for entries that
// expire).
func (m *Map) Unchanged(v Version) bool {
	if !v.valid || v.segment >= int(m.layout.Segments) || m.gate.Closed() {
		return false
	}
	// Uncounted, as GetInto's fast path: after Close the word may read as
	// the zeros it leaves behind.
	if m.table.Segment(v.segment).Seq() != v.seq || m.gate.Closed() {
		return false
	}
	return v.expiry == 0 || m.table.Now() < v.expiry
}
