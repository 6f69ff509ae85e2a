package hashmap

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/sharedmap/sharedmap/internal/registry"
	"github.com/sharedmap/sharedmap/ipc"
	"github.com/sharedmap/sharedmap/offheap"
	"github.com/sharedmap/sharedmap/segment"
)

// Salvaged says how Salvage read a map file.
type Salvaged struct {
	// Inferred: no copy of the file header verified, and the layout was
	// found from the file's own areas (see Salvage).
	Inferred bool
	// Notes say how the layout was found and what was read as what, for
	// a person: what a salvage rests on is said, never guessed silently.
	Notes []string
}

// maxRegistrySearch bounds how far past the header Salvage looks for the
// process registry when the lock arena before it is unreadable: the
// largest arena a map makes (2^20 - 1 application locks of ticket-awn)
// ends below it.
const maxRegistrySearch = 1 << 30

// Salvage opens the map file at path read-only, to get its entries out when
// Open refuses it: neither header copy verifies, or the file's length is not
// one its header allows (a missing end reads as zeros, extra bytes are
// left out). It never writes the file. A map whose file grew (Options.MaxSize)
// is read with every tier it grew by, the file's length saying how many, and
// a tier cut short in the middle is read up to where the file ends. Without a verifying header the layout
// is found from the file itself (Salvaged.Notes says what it rests on).
// Every entry read decodes and passes its checksum, as for Range.
// In a map that split, a key met in two segments (a split cut short after
// its commit leaves a stale copy behind) is given from the segment it maps
// to, under the count of segments in use that its two copies record or,
// when neither verifies, that the segments' stamps say; the other copy is
// given only if that segment gave none (its copy failed its checksum, or
// the segment could not be read).
//
// The Map is read-only and has no lock table; Range, RangeView, Get, Len and
// Check work as with Options.ReadOnly. Only LockTimeout of opts is used.
func Salvage(path string, opts *Options) (*Map, Salvaged, error) {
	// Without a verifying header, the lock arena's and the process
	// registry's own headers say where the segments start and how many
	// there are, and the layout whose tiers' entries verify is chosen;
	// Salvaged.Notes says what it rests on. Either way every entry read is
	// one that decodes and passes its checksum, as for Range.
	//
	// The Map is read-only and has no lock table; Range, RangeView, Get,
	// Len and Check work as on a map opened with Options.ReadOnly. Only
	// LockTimeout of opts is used.
	var sv Salvaged
	o := Options{}
	if opts != nil {
		o.LockTimeout = opts.LockTimeout
	}
	o.ReadOnly = true
	o, err := o.withDefaults()
	if err != nil {
		return nil, sv, err
	}
	f, err := offheap.OpenSalvage(path, segment.RecordGrowth)
	if err != nil {
		return nil, sv, classifyOpenError(err)
	}
	m, err := salvageMap(f, o, &sv)
	if err != nil {
		f.Close()
		return nil, sv, classifyOpenError(fmt.Errorf("salvage %s: %w", path, err))
	}
	return m, sv, nil
}

// salvageMap finds the layout of f, opened by OpenSalvage, and makes the
// read-only Map over it.
func salvageMap(f *offheap.File, o Options, sv *Salvaged) (*Map, error) {
	s := f.Salvage()
	if s.Missing > 0 {
		sv.Notes = append(sv.Notes, fmt.Sprintf("the file is %d bytes short of the %d its header records: that end is read as zeros, so the entries that were there are lost", s.Missing, f.Size()))
	}
	switch {
	case s.Extra > 0 && f.Growth == nil:
		sv.Notes = append(sv.Notes, fmt.Sprintf("the file has %d bytes past the %d its header records: left out", s.Extra, f.Size()))
	case s.Extra > 0:
		sv.Notes = append(sv.Notes, fmt.Sprintf("the file has %d bytes past the %d it may grow to: left out", s.Extra, f.Size()+f.Growth.Len()))
	}
	var l segment.Layout
	if s.HeaderLost == nil {
		sv.Notes = append(sv.Notes, "layout: the file header's")
		var err error
		if l, _, _, err = readRecords(f, len((&segment.Layout{}).Encode())); err != nil {
			return nil, err
		}
	} else {
		sv.Inferred = true
		sv.Notes = append(sv.Notes, fmt.Sprintf("the file header is lost (%v): the layout is found from the file's areas", s.HeaderLost))
		bases, notes, err := inferBases(f)
		sv.Notes = append(sv.Notes, notes...)
		if err != nil {
			return nil, err
		}
		inf, err := segment.InferLayout(f.Region, bases, f.Size())
		sv.Notes = append(sv.Notes, inf.Notes...)
		if err != nil {
			return nil, err
		}
		l = inf.Layout
	}
	tb, err := segment.Open(f.Region, l, nil, o.LockTimeout)
	if err != nil {
		return nil, err
	}
	if s.HeaderLost == nil {
		tiers, err := tb.SalvageGrowth(f.Growth, f.Length())
		if err != nil {
			return nil, err
		}
		sv.Notes = append(sv.Notes, tierNotes(tb.Layout(), tiers, f.Size(), s)...)
	}
	if n, stamped := tb.SalvageSegmentCount(); stamped {
		sv.Notes = append(sv.Notes, fmt.Sprintf("neither copy of the count of segments in use verifies: %d, from the stamps of the segments split into, is read (one more than the map had if its last split was cut short before its commit: Range still gives the keys of that split, Get may not)", n))
	}
	m := &Map{file: f, table: tb, layout: tb.Layout(), segMask: uint64(tb.Layout().Segments - 1), opts: o, readOnly: true, salvaged: true}
	if m.lockTable, err = newLockTable(m, f.Region, lockLayout{}); err != nil {
		return nil, err
	}
	return m, nil
}

// tierNotes says what a salvage whose header verified reads of the
// tiers of a file laid out as l, recorded bytes long by its header and
// holding tiers of them, opened as s says:
// the tiers it grew by, a tier it holds only in part, and tiers the pool
// handed out that lie past its end.
func tierNotes(l *segment.Layout, tiers segment.SalvagedTiers, recorded int64, s offheap.Salvage) []string {
	if !l.Grows {
		return nil
	}
	var notes []string
	if tiers.Whole > l.Tiers {
		notes = append(notes, fmt.Sprintf("the file grew past the %d bytes its header records: it holds %d tiers whole (%d at creation, %d at most), and every one is read", recorded, tiers.Whole, l.Tiers, l.MaxTiers))
	}
	read := max(tiers.Whole, l.Tiers)
	if s.Missing == 0 && tiers.Partial > 0 && tiers.Whole >= l.Tiers && tiers.Whole < l.MaxTiers {
		missing := l.TierSize - tiers.Partial
		if tiers.Whole < tiers.HandedOut {
			notes = append(notes, fmt.Sprintf("the file ends %d bytes into tier %d, which the pool handed out: it is %d bytes short of that tier's end, which is read as zeros, so the entries that were there are lost", tiers.Partial, tiers.Whole, missing))
		} else {
			notes = append(notes, fmt.Sprintf("the file has %d bytes past the %d of its last whole tier, where the pool has handed out no tier: left out", tiers.Partial, l.TiersOff+tiers.Whole*l.TierSize))
		}
		read++
	}
	if past := min(tiers.HandedOut, l.MaxTiers) - read; past > 0 {
		notes = append(notes, fmt.Sprintf("the pool handed out %d tiers past the file's end (the global state counts %d in use, the file holds %d in whole or in part): they are read as empty, so the entries that were in them are lost", past, tiers.HandedOut, read))
	}
	return notes
}

// inferBases reads, from the lock arena's and the process registry's own
// headers, where the segments of f start and how many there are: the
// segment count is what the registry's ledgers and counters per process
// say.
func inferBases(f *offheap.File) ([]segment.InferBase, []string, error) {
	var notes []string
	regOff := int64(-1)
	words := f.Uint64s(offheap.HeaderSize, (f.Len()-offheap.HeaderSize)/8)
	if cfg, n, err := ipc.Measure(words); err == nil {
		arena := (int64(n)*8 + 4095) / 4096 * 4096
		regOff = offheap.HeaderSize + arena
		notes = append(notes, fmt.Sprintf("lock arena: %d locks, %d bytes, at %d (the lock algorithm is not recorded there: reading needs none)", cfg.Locks-1, arena, offheap.HeaderSize))
	} else {
		notes = append(notes, fmt.Sprintf("lock arena: unreadable at %d (%v); looking for the process registry after it", offheap.HeaderSize, err))
	}
	var reg registry.Layout
	var rerr error = errors.New("not found")
	if regOff >= 0 {
		reg, rerr = registry.Find(f, regOff)
	}
	for off := int64(offheap.HeaderSize); rerr != nil && regOff < 0 && off < min(f.Len(), maxRegistrySearch); off += 4096 {
		reg, rerr = registry.Find(f, off)
	}
	if rerr != nil {
		return nil, notes, fmt.Errorf("%w: no process registry where a map keeps one (%v): a file from before the registry, or not a map", segment.ErrBadLayout, rerr)
	}
	global := reg.Off + reg.Bytes()
	notes = append(notes, fmt.Sprintf("process registry: %d slots at %d; the segments' areas start at %d", reg.Slots, reg.Off, global))
	pow2 := func(n int) bool { return n > 0 && bits.OnesCount(uint(n)) == 1 }
	var bases []segment.InferBase
	add := func(segs int, stats, fast bool) {
		if pow2(segs) && ledgersPerSlot(int64(segs), fast) == reg.Ledgers && countersPerSlot(int64(segs), stats) == reg.Counters {
			bases = append(bases, segment.InferBase{GlobalOff: global, Segments: int64(segs), Stats: stats, FastLedgers: fast})
		}
		// A map that splits has ledgers for the segments it may split
		// into and counters for those it was created with.
		for _, ms := range []int{reg.Ledgers, reg.Ledgers / 2} {
			if stats && pow2(segs) && pow2(ms) && ms > segs && ledgersPerSlot(int64(ms), fast) == reg.Ledgers && countersPerSlot(int64(segs), stats) == reg.Counters {
				bases = append(bases, segment.InferBase{GlobalOff: global, Segments: int64(segs), MaxSegments: int64(ms), Stats: stats, FastLedgers: fast})
			}
		}
	}
	if reg.Counters > 0 {
		add(reg.Counters/2, true, true)
		add(reg.Counters/2, true, false)
	} else {
		add(reg.Ledgers, false, false)
		add(reg.Ledgers/2, false, true)
	}
	if len(bases) == 0 {
		return nil, notes, fmt.Errorf("%w: the process registry's %d ledgers and %d counters per process fit no segment count", segment.ErrBadLayout, reg.Ledgers, reg.Counters)
	}
	return bases, notes, nil
}
