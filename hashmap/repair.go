package hashmap

import (
	"fmt"
	"slices"
)

// Repaired is what Repair did.
type Repaired struct {
	Recovery Recovery        // what dead processes held, released first
	Rebuilt  []SegmentRepair // the segments rebuilt for damage Check found
	Failed   []Problem       // segments Repair could not rebuild, and why
	// NoRegistry: the file predates the process registry, so Repair could
	// not run Recover (what dead processes hold stays held; see
	// ErrNoRegistry) and only checked and rebuilt the segments.
	NoRegistry bool
	// Orphans is how many parts of large values that no key named, left
	// by processes gone, Repair deleted (see ErrOrphans).
	Orphans int
	// BrokenLarge are the keys whose large values had parts missing or
	// failed their checksum: Repair deleted them with their parts.
	BrokenLarge []string
}

// Repair makes a damaged map sound again, as far as its entries allow: it
// mends the file header and the process registry, runs Recover, then
// rebuilds every segment Check finds damaged from its entries, dropping
// those that do not decode or fail their checksum and keeping every other;
// it also mends a damaged count of overflow tiers handed out. A tier is
// what its stamp says (every file this version creates has them): one a
// damaged link cut off is linked back, one whose stamp does not verify is
// stamped again where its chain alone links it, else given up, its entries
// reported dropped; a segment whose first tier was zeroed is reported
// (SegmentRepair.Zeroed), never read as an empty one. Without stamps, a
// chain is cut at the first tier whose owner and position words do not
// place it there, and tiers no chain reaches are given up, their entries
// reported dropped (`mapctl dump --salvage` before Repair saves what the
// links still reach). It is safe while other processes use the map, which
// wait for each rebuild as for any writer. What is still wrong afterwards
// is for Check to say. Without a process registry it skips Recover
// (Repaired.NoRegistry). It is RepairWith with the default options.
func (m *Map) Repair() (Repaired, error) {
	return m.RepairWith(CheckOptions{})
}

// RepairWith is Repair with options o for the check it runs over every
// segment to find the damaged ones, the part of its work that grows with
// the file: o.Progress reports that check's progress, and o.Workers says
// how many goroutines share it (see CheckOptions).
func (m *Map) RepairWith(o CheckOptions) (Repaired, error) {
	// The order matters: registry slots whose state is garbage become
	// dead processes' for Recover to release; the pool count is mended
	// before the rebuilds, which keep a linked tier whose stamp does not
	// verify only if the count covers it; tiers cut from their chains are
	// relinked after them (files with stamps), and tiers that no chain
	// took back are given up last.
	var rep Repaired
	c, err := m.enterAny(true)
	if err != nil {
		return rep, err
	}
	defer c.Leave()
	if m.reg != nil {
		// Slots with a garbage state become dead processes' first, for
		// Recover to release and free.
		n, err := m.reg.Mend(m.opts.LockTimeout)
		if err != nil {
			return rep, fmt.Errorf("repair %s: %w", m.Path(), err)
		}
		rep.Recovery, err = m.Recover()
		if n > 0 {
			rep.Recovery.Mended = append(rep.Recovery.Mended, fmt.Sprintf("process registry: %s rewritten", countOf(n, "place", "places")))
		}
		if err != nil {
			return rep, err
		}
	} else {
		rep.NoRegistry = true
	}
	// The file header first: a copy that does not verify, or padding that
	// is not zero, rewritten from the header this process opened with.
	headerFixed, err := m.file.RepairHeader()
	rep.Recovery.Mended = append(rep.Recovery.Mended, headerFixed...)
	if err != nil {
		return rep, fmt.Errorf("repair %s: %w", m.Path(), err)
	}
	if from, to, mended := m.table.MendGrowthLog(); mended {
		rep.Recovery.Mended = append(rep.Recovery.Mended, fmt.Sprintf("the growth log: %d steps, now the %d that make sense", from, to))
	}
	m.table.ClearReservedGlobal()
	if from, to, mended := m.table.MendSegmentCount(); mended {
		rep.Recovery.Mended = append(rep.Recovery.Mended, fmt.Sprintf("the count of segments in use: %d, now %d", from, to))
	}
	// Before the rebuilds: a rebuild keeps a linked tier whose stamp does
	// not verify only if the count covers it.
	if from, to, strays, mended := m.table.MendPoolCount(); mended {
		if from != to {
			rep.Recovery.Mended = append(rep.Recovery.Mended, fmt.Sprintf("the count of overflow tiers handed out: %d, now %d", from, to))
		}
		if strays > 0 {
			rep.Recovery.Mended = append(rep.Recovery.Mended, fmt.Sprintf("%s beyond that count, not blank, that no chain keeps: zeroed", countOf(strays, "overflow tier", "overflow tiers")))
		}
	}
	problems, err := m.CheckWith(o)
	if err != nil {
		return rep, err
	}
	done := make(map[int]bool)
	for _, p := range problems {
		if p.Segment < 0 || done[p.Segment] {
			continue
		}
		done[p.Segment] = true
		r, rebuilt, err := m.table.Segment(p.Segment).Repair()
		switch {
		case err != nil:
			rep.Failed = append(rep.Failed, Problem{p.Segment, err})
		case rebuilt:
			rep.Rebuilt = append(rep.Rebuilt, segmentRepairOf(r))
		}
	}
	m.relinkCutTiers(&rep)
	m.giveUpUnverified(&rep)
	rep.BrokenLarge = m.dropBroken()
	rep.Orphans = m.dropOrphans()
	if len(rep.Rebuilt) > 0 {
		m.repairs.Add(1)
	}
	return rep, nil
}

// relinkCutTiers rebuilds again each segment that an overflow tier of its
// own is cut from (segment.Table.UnlinkedTiers): a segment's rebuild
// cannot take back a tier that another chain's damaged link still
// reaches, and that chain's rebuild, later in the same Repair, cuts the
// link; the second rebuild links the tier back or counts its entries as
// dropped. Each segment is rebuilt again at most once a round, for a few
// rounds: one more rebuild can free one more such tier.
func (m *Map) relinkCutTiers(rep *Repaired) {
	for round := 0; round < 3; round++ {
		var segs []int64
		m.table.UnlinkedTiers(func(seg, _ int64) {
			if !slices.Contains(segs, seg) {
				segs = append(segs, seg)
			}
		})
		if len(segs) == 0 {
			return
		}
		for _, seg := range segs {
			r, err := m.table.Segment(int(seg)).Rebuild()
			if err != nil {
				rep.Failed = append(rep.Failed, Problem{int(seg), err})
				continue
			}
			rep.Rebuilt = mergeRebuilt(rep.Rebuilt, segmentRepairOf(r))
		}
	}
}

// giveUpUnverified gives up the overflow tiers that no chain took back
// (segment.Table.GiveUpUnverified), counting their sound entries as
// dropped in their keys' segments.
func (m *Map) giveUpUnverified(rep *Repaired) {
	n := m.table.GiveUpUnverified(func(seg int64) {
		i := slices.IndexFunc(rep.Rebuilt, func(r SegmentRepair) bool { return r.Segment == seg })
		if i < 0 {
			i = len(rep.Rebuilt)
			rep.Rebuilt = append(rep.Rebuilt, SegmentRepair{Segment: seg, Kept: m.table.Segment(int(seg)).Len()})
		}
		rep.Rebuilt[i].Dropped++
	})
	why := "whose stamp did not verify, that no chain links"
	if !m.layout.Stamps {
		why = "holding entries that no chain reaches"
	}
	if n > 0 {
		rep.Recovery.Mended = append(rep.Recovery.Mended, fmt.Sprintf("%s %s: given up", countOf(n, "overflow tier", "overflow tiers"), why))
	}
}

// mergeRebuilt adds r to list, folding it into an earlier rebuild of the
// same segment: the later one's count of entries kept, the sum of what
// each dropped, relinked, salvaged and freed.
func mergeRebuilt(list []SegmentRepair, r SegmentRepair) []SegmentRepair {
	for i := range list {
		if e := &list[i]; e.Segment == r.Segment {
			e.Kept = r.Kept
			e.Dropped += r.Dropped
			e.Doubled += r.Doubled
			e.Salvaged += r.Salvaged
			e.Relinked += r.Relinked
			e.Freed += r.Freed
			e.Restamped += r.Restamped
			e.Zeroed = e.Zeroed || r.Zeroed
			e.Restored = e.Restored || r.Restored
			e.Cleared = e.Cleared || r.Cleared
			return list
		}
	}
	return append(list, r)
}

// countOf is n with the noun for its number: "1 word", "3 words".
func countOf(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
