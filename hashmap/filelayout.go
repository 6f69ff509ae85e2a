package hashmap

import (
	"encoding/binary"
	"fmt"

	"github.com/sharedmap/sharedmap/internal/registry"
	"github.com/sharedmap/sharedmap/offheap"
	"github.com/sharedmap/sharedmap/segment"
)

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
		MaxSize: max(o.MaxSize, 0),
	}
	if o.NoSplits {
		params.MaxSegments = -1
	}
	// The registry's size depends on the count of segments (a ledger and
	// counters per segment in every slot), and the segments' offset on the
	// registry's size: a first layout gives the count.
	layoutAt := func(off int64) (segment.Layout, error) {
		l, err := segment.NewLayout(params, off, !o.NoChecksums)
		l.FastLedgers = l.FastLedgers && !testCreateWithoutFastLedgers
		l.Stamps = l.Stamps && !testCreateWithoutStamps
		return l, err
	}
	l, err := layoutAt(offheap.HeaderSize + locks.bytes)
	if err != nil {
		return segment.Layout{}, lockLayout{}, registry.Layout{}, err
	}
	reg := registry.Layout{Off: offheap.HeaderSize + locks.bytes, Slots: o.MaxProcesses, Ledgers: ledgersPerSlot(l.MaxSegments, l.FastLedgers),
		Counters: countersPerSlot(l.Segments, l.Stats), HighWater: !testCreateWithoutHighWater}
	if reg.Slots == 0 {
		reg.Slots = defaultProcesses(l.End-l.GlobalOff, reg.SlotSize())
	}
	if o.MaxSize == 0 && !o.Cache {
		// Growth moves no area, so the layout without it gives the size
		// the default is a multiple of.
		if l, err = layoutAt(reg.Off + reg.Bytes()); err != nil {
			return segment.Layout{}, lockLayout{}, registry.Layout{}, err
		}
		params.MaxSize = defaultMaxSize(l.End)
		// The first tiers of the segments the map may split into come on
		// top: reserved out of that size, they would take up to half of
		// what the overflow pool may grow into, and a small map that held
		// a large value before splits would no longer hold it.
		if ls, err := layoutAt(reg.Off + reg.Bytes()); err == nil && ls.Splits {
			params.MaxSegments = int(ls.MaxSegments)
			params.MaxSize += (ls.MaxSegments - ls.Segments) * ls.TierSize
		}
	}
	// A map that splits has a ledger per segment it may split into
	// (MaxSegments, which does not depend on where the segments start):
	// the registry is sized for them once the layout says how many, and a
	// default slot count chosen again for slots of that size, then the
	// segments laid out after it.
	settled := false
	for range 4 {
		if l, err = layoutAt(reg.Off + reg.Bytes()); err != nil {
			return segment.Layout{}, lockLayout{}, registry.Layout{}, err
		}
		next := reg
		next.Ledgers, next.Counters = ledgersPerSlot(l.MaxSegments, l.FastLedgers), countersPerSlot(l.Segments, l.Stats)
		if o.MaxProcesses == 0 {
			next.Slots = defaultProcesses(l.End-l.GlobalOff, next.SlotSize())
		}
		if settled = next == reg; settled {
			break
		}
		reg = next
	}
	if !settled {
		return segment.Layout{}, lockLayout{}, registry.Layout{}, fmt.Errorf("%w: no layout settles the registry's size", ErrIncompatible)
	}
	return l, locks, reg, nil
}

// fileLayout is where the parts of a map file lie, as its header's layout
// records say: the lock arena after the file header, then the process
// registry, then the segments, as plan lays out a new file.
type fileLayout struct {
	segments segment.Layout
	locks    lockLayout      // the zero lockLayout: a file from before lock tables
	registry registry.Layout // Slots 0: a file from before the registry
}

// decodeFileLayout reads the layout of the file f that Open mapped for o
// (opts as the caller gave them): segRecordLen is the length of the segment
// record that starts the header's layout records. It refuses a file that
// is no cache for a DefaultTTL, and one whose layout disagrees with the
// sizing that opts asks for.
func decodeFileLayout(f *offheap.File, segRecordLen int, o Options, opts *Options) (fileLayout, error) {
	l, locks, regRec, err := readRecords(f, segRecordLen)
	if err != nil {
		return fileLayout{}, classifyOpenError(fmt.Errorf("open %s: %w", f.Path(), err))
	}
	if o.DefaultTTL > 0 && !l.Cache {
		return fileLayout{}, fmt.Errorf("open %s: DefaultTTL: %w", f.Path(), ErrNotCache)
	}
	if !f.Created() && opts != nil {
		if err := conflicts(opts, &l, locks, regRec.slots); err != nil {
			return fileLayout{}, fmt.Errorf("open %s: %w", f.Path(), err)
		}
	}
	reg := registry.Layout{Off: f.DataOffset() + locks.bytes, Slots: regRec.slots, Ledgers: ledgersPerSlot(l.MaxSegments, l.FastLedgers), Counters: countersPerSlot(l.Segments, l.Stats),
		HighWater: regRec.highWater}
	return fileLayout{segments: l, locks: locks, registry: reg}, nil
}

// readRecords decodes the layout records of f's header: the segment
// record, segLen bytes, then, in files that have them, the lock record
// and the registry record. Files from before lock tables have no lock
// record and no arena (the zero lockLayout), nor those from before the
// registry a registry (0 slots).
func readRecords(f *offheap.File, _ int) (segment.Layout, lockLayout, registryRecord, error) {
	rec := f.Layout()
	segLen := segment.RecordLen(rec)
	var locks lockLayout
	var reg registryRecord
	if len(rec) > segLen {
		lockRec := rec[segLen:]
		var err error
		if n := lockRecordLen(lockRec); n < len(lockRec) {
			if reg, err = decodeRegistryRecord(lockRec[n:]); err != nil {
				return segment.Layout{}, lockLayout{}, reg, err
			}
			lockRec = lockRec[:n]
		}
		if locks, err = decodeLockLayout(lockRec); err != nil {
			return segment.Layout{}, lockLayout{}, reg, err
		}
		rec = rec[:segLen]
	}
	regSlots := reg.slots
	var regBytes int64
	if regSlots > 0 {
		// The ledger count is MaxSegments and the counters' the segment
		// count, which the segment record holds; the registry's size does
		// not depend on where it starts (and a wrong count makes
		// DecodeLayout below fail).
		segs, ok := segment.RecordSegments(rec)
		if maxSegs, mok := segment.RecordMaxSegments(rec); ok && mok {
			regBytes = registry.Layout{Slots: regSlots, Ledgers: ledgersPerSlot(maxSegs, segment.RecordHasFastLedgers(rec)), Counters: countersPerSlot(segs, segment.RecordHasStats(rec))}.Bytes()
		}
	}
	l, err := segment.DecodeLayout(rec, f.DataOffset()+locks.bytes+regBytes, f.Size())
	return l, locks, reg, err
}

// testCreateWithoutFastLedgers, set only by tests, makes Open create files
// as builds before fast ledgers did.
var testCreateWithoutFastLedgers bool

// testCreateWithoutHighWater, set only by tests, makes Open create files
// as builds before the registry's high-water mark did: a version-1
// registry record, and every slot's disk blocks reserved at creation.
var testCreateWithoutHighWater bool

// testCreateWithoutStamps, set only by tests, makes Open create files as
// builds before tier stamps did, whose tiers carry owner and position
// words instead.
var testCreateWithoutStamps bool

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

// When Options.MaxSize is zero, a map that is not a cache grows up to
// DefaultMaxGrowth times the size it is created with, bounded by
// MinDefaultMaxSize and MaxDefaultMaxSize. The bound is address space each
// opener maps (not memory), which some platforms have little of (a 39-bit
// arm64 kernel leaves a process 512 GiB) and an emulator pays for by the
// page; far enough that a map sized for too few entries by two orders of
// magnitude still grows.
const (
	DefaultMaxGrowth  = 64
	MinDefaultMaxSize = 64 << 20
	MaxDefaultMaxSize = 1 << 40
)

// defaultMaxSize is Options.MaxSize's default for a file created at end
// bytes.
func defaultMaxSize(end int64) int64 {
	return min(max(DefaultMaxGrowth*end, MinDefaultMaxSize), MaxDefaultMaxSize)
}

// NoGrowth, as Options.MaxSize, keeps the file at the size it is created
// with: Put returns ErrFull once the overflow pool is used up.
const NoGrowth = -1

// DefaultMaxProcesses is how many processes may have a new map open for
// writing at once when Options.MaxProcesses is zero, unless the registry
// would then be more than a fifth of the file (see defaultProcesses).
const DefaultMaxProcesses = 4096

// minDefaultProcesses is the fewest slots a default registry has, however
// large a share of the file that makes it: what the default was before
// registries had a high-water mark.
const minDefaultProcesses = 64

// defaultProcesses is the slot count of a new file's registry when
// Options.MaxProcesses is zero: DefaultMaxProcesses, or fewer (never
// fewer than minDefaultProcesses) where slots of slotSize bytes would
// come to more than a quarter of data, the bytes the segments take, and
// so to more than a fifth of the file. A slot grows with the segment
// count (a ledger, a fast ledger and two counters per segment), so in a
// map of a hundred thousand segments 4096 slots would be gigabytes more
// file. The registry is sparse: a slot takes disk blocks only once a
// process claims it, and scans stop at the last one claimed, so the share
// bounds the file's size and address space, not its disk or scan time.
func defaultProcesses(data, slotSize int64) int {
	return int(max(minDefaultProcesses, min(DefaultMaxProcesses, data/4/slotSize)))
}

// The registry's part of the layout record starts with one of these.
// Files from before the registry have none; they open without one, and
// recovery then refuses to run (it could not tell the living from the
// dead). Version 2 says the registry keeps a high-water mark of the slots
// ever claimed (registry.Layout.HighWater): a build that reads only
// version 1 refuses such a file rather than claim a slot past the mark,
// which this build's scans would not see.
const (
	registryRecordMagic          = "SMREGLY1"
	registryRecordMagicHighWater = "SMREGLY2"
)

// registryRecord is what the registry's part of the layout record says.
type registryRecord struct {
	slots     int  // 0: the file has no registry
	highWater bool // its area keeps a high-water mark
}

// encodeRegistryRecord is the record of a new file's registry laid out as
// l: version 2 if it keeps a high-water mark, as every new file's does.
func encodeRegistryRecord(l registry.Layout) []byte {
	magic := registryRecordMagic
	if l.HighWater {
		magic = registryRecordMagicHighWater
	}
	return binary.LittleEndian.AppendUint64([]byte(magic), uint64(l.Slots))
}

func decodeRegistryRecord(b []byte) (registryRecord, error) {
	if len(b) != len(registryRecordMagic)+8 {
		return registryRecord{}, fmt.Errorf("%w: damaged process-registry record in the header", ErrCorrupt)
	}
	var r registryRecord
	switch string(b[:len(registryRecordMagic)]) {
	case registryRecordMagic:
	case registryRecordMagicHighWater:
		r.highWater = true
	default:
		return registryRecord{}, fmt.Errorf("%w: damaged process-registry record in the header", ErrCorrupt)
	}
	slots := binary.LittleEndian.Uint64(b[len(registryRecordMagic):])
	if slots == 0 || slots > maxProcesses {
		return registryRecord{}, fmt.Errorf("%w: process registry of %d slots", ErrCorrupt, slots)
	}
	r.slots = int(slots)
	return r, nil
}

// maxProcesses bounds Options.MaxProcesses. It no longer guards the time
// of a liveness scan, which asks about the slots ever claimed (the
// high-water mark), not every slot: it is a count past what one host
// runs, well within what the format allows (a slot's lock is byte 1 + i
// of the lock file; a lock owner id, slot + 1, has 31 bits).
const maxProcesses = 65536
