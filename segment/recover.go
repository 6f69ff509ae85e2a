package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/rwulock"
)

// SetLedgers gives each segment lock of this table its ledger word in this
// process's registry slot (ledger(i) for segment i), so that what this
// process holds can be told apart if it dies. Call it before any operation.
func (tb *Table) SetLedgers(ledger func(i int) *uint64) {
	for i := range tb.segs {
		tb.segs[i].lock.SetLedger(ledger(i))
	}
}

// Recovered is what one segment's recovery did.
type Recovered struct {
	Segment int64
	Orphans rwulock.Orphans // what dead processes held of its lock
	Rebuilt bool            // a dead process held it exclusively: its data was rebuilt
	Kept    int64           // entries kept by the rebuild
	Dropped int64           // entries dropped: bad checksum or undecodable (damaged neighbours count once), wrong segment, no room
	Doubled int64           // second copies of a key (a move cut short), dropped
}

// Recover releases what dead processes left in segment s's lock word. live
// appends the ledger words of every live process for this segment (this
// process's included). If a dead process held the update or write lock,
// the segment's data may be half changed: Recover takes the lock in its
// place, rebuilds the hash lookup of every tier from the entries
// themselves (dropping entries whose checksum fails, and second copies of
// a key), fixes the counters, and releases it. It gives up with an error if
// live processes keep the lock word moving until deadline.
//
// Callers serialize recoveries (the registry's recovery lock).
func (s *Segment) Recover(live func(dst []uint64) []uint64, deadline time.Time) (Recovered, error) {
	rep := Recovered{Segment: s.index}
	for {
		word, o, err := s.lock.FindOrphans(live, deadline)
		if err != nil {
			return rep, s.lockErr("recover", err)
		}
		rep.Orphans = o
		took, err := s.lock.ReleaseOrphans(word, o)
		if errors.Is(err, rwulock.ErrChanged) {
			continue
		}
		if err != nil {
			return rep, s.lockErr("recover", err)
		}
		if !took {
			return rep, nil
		}
		break
	}
	// We hold update in the dead holder's place; readers may be inside
	// (they saw an even sequence or took the read lock), so wait for them.
	if err := s.lock.UpgradeUpdateToWrite(time.Until(deadline)); err != nil {
		_ = s.lock.UpdateUnlock()
		return rep, s.lockErr("recover", err)
	}
	if atomic.LoadUint64(s.seq)&1 == 0 {
		atomic.AddUint64(s.seq, 1) // odd: optimistic readers retry until we are done
	}
	s.rebuild(&rep)
	atomic.AddUint64(s.seq, 1)
	_ = s.lock.WriteUnlock()
	rep.Rebuilt = true
	return rep, nil
}

// Rebuild rewrites segment s's metadata from its entries, as Recover does
// for a segment a dead process was modifying, for damage that no death
// explains and Check reports: pages of the file torn by a machine crash, a
// stray write. It takes the segment's write lock as any writer does (and
// fails with ErrTimeout if a live process holds it throughout), drops the
// entries that do not decode or fail their checksum and second copies of a
// key, and recounts. An odd sequence left by a writer that died inside
// comes out even.
func (s *Segment) Rebuild() (Recovered, error) {
	return s.rebuildIf(func() bool { return true })
}

// Repair is Rebuild for a segment that Check found damaged, done only if
// Check still finds it damaged once the update lock keeps writers out: a
// Check that raced with a writer (an insert changes no sequence) is not
// damage. It reports whether it rebuilt.
func (s *Segment) Repair() (Recovered, bool, error) {
	rebuilt := false
	rep, err := s.rebuildIf(func() bool {
		s.check(func(error) { rebuilt = true }, true)
		return rebuilt
	})
	return rep, rebuilt, err
}

// rebuildIf takes the update lock and, if damaged says so, the write lock
// and rebuilds (see Rebuild).
func (s *Segment) rebuildIf(damaged func() bool) (Recovered, error) {
	rep := Recovered{Segment: s.index}
	w, err := s.beginUpdate("rebuild")
	if err != nil {
		return rep, err
	}
	if !damaged() {
		w.end()
		return rep, nil
	}
	if err := w.upgrade("rebuild"); err != nil {
		w.end()
		return rep, err
	}
	if atomic.LoadUint64(s.seq)&1 == 0 {
		atomic.AddUint64(s.seq, 1) // odd: optimistic readers retry until we are done
	}
	s.rebuild(&rep)
	s.clearReserved(s.chain())
	rep.Rebuilt = true
	w.end() // the sequence even again
	return rep, nil
}

// survivor is an entry the rebuild keeps.
type survivor struct {
	tier    int64
	chunk   int64
	nch     int64
	tag     uint32
	indexed bool // a slot pointed at it before the rebuild
}

// rebuild rewrites the segment's metadata from its entries. Caller holds
// the write lock with the sequence odd.
func (s *Segment) rebuild(rep *Recovered) {
	tb := s.tb
	l := &tb.layout
	chain := s.chain()
	byKey := make(map[string]int)
	var kept []survivor
	for _, ti := range chain {
		tv := tb.tier(ti)
		indexed := make(map[int64]bool)
		for _, sl := range tv.slots {
			if sl != 0 {
				indexed[slotChunk(sl)] = true
			}
		}
		garbage := false // the chunk before was used but began no entry
		for c := int64(0); c < l.Chunks; {
			if tv.bitmap[c>>6]>>(uint(c)&63)&1 == 0 {
				garbage = false
				c++
				continue
			}
			key, nch, ok := tb.validEntry(&tv, c)
			if !ok {
				// Garbage under a used bit: skip one chunk and look again.
				// A damaged entry is one such stretch, and counts once.
				if !garbage {
					rep.Dropped++
				}
				garbage = true
				c++
				continue
			}
			garbage = false
			h := xxhash.Sum64(key)
			if l.segmentOf(h) != s.index {
				rep.Dropped++
				c += nch
				continue
			}
			e := survivor{tier: ti, chunk: c, nch: nch, tag: uint32(h >> l.segmentBits), indexed: indexed[c]}
			if j, dup := byKey[string(key)]; dup {
				rep.Doubled++
				if e.indexed && !kept[j].indexed {
					kept[j] = e // the copy the index pointed to is the committed one
				}
				c += nch
				continue
			}
			byKey[string(key)] = len(kept)
			kept = append(kept, e)
			c += nch
		}
	}
	// Clear every tier's metadata, then put back what is kept.
	for _, ti := range chain {
		tv := tb.tier(ti)
		clear(tv.slots)
		clear(tv.bitmap)
		atomic.StoreUint64(&tv.header[thEntries/8], 0)
		atomic.StoreUint64(&tv.header[thUsedChunks/8], 0)
		tv.setLowestFree(0)
	}
	var total int64
	for _, e := range kept {
		tv := tb.tier(e.tier)
		if int64(tv.entries()) >= l.MaxTierEntries {
			rep.Dropped++
			continue
		}
		tv.mark(e.chunk, e.nch, true)
		atomic.AddUint64(&tv.header[thUsedChunks/8], uint64(e.nch))
		tb.placeSlot(&tv, e.tag, e.chunk)
		tv.addEntries(1)
		total++
	}
	rep.Kept = total
	atomic.StoreUint64(s.entries, uint64(total))
	atomic.StoreUint64(s.tiers, uint64(len(chain)-1))
}

// chain lists the tiers of the segment, first tier first, stopping at a
// link that leads outside the pool or back into the chain (and cutting it
// there, since nothing can follow it safely). Caller holds write.
func (s *Segment) chain() []int64 {
	tb := s.tb
	l := &tb.layout
	out := []int64{s.index}
	seen := map[int64]bool{s.index: true}
	for {
		tv := tb.tier(out[len(out)-1])
		next := tv.next()
		if next == 0 {
			return out
		}
		t := int64(next - 1)
		if next > uint64(l.Tiers) || t < l.Segments || seen[t] {
			atomic.StoreUint64(&tv.header[thNext/8], 0)
			return out
		}
		seen[t] = true
		out = append(out, t)
	}
}

// validEntry decodes the entry at chunk c and checks its checksum (when the
// map keeps them).
func (tb *Table) validEntry(t *tier, c int64) (key []byte, nch int64, ok bool) {
	klen, vlen, nch, ok := tb.entryAt(t, c)
	if !ok {
		return nil, 0, false
	}
	key = tb.entryKey(t, c, klen)
	if tb.layout.Checksums {
		off := c * tb.layout.ChunkSize
		stored := binary.LittleEndian.Uint32(t.space[off+ehChecksum:])
		if stored != entryChecksum(t.space[off:off+ehChecksum], key, tb.entryValue(t, c, klen, vlen)) {
			return nil, 0, false
		}
	}
	return key, nch, true
}

// Check verifies segment s without taking its lock or writing anything,
// and calls problem for each thing no correct writer leaves behind: lock
// and sequence states (which a live writer may show for an instant),
// chain links, slots, entries and their checksums, keys in the wrong
// segment or present twice, and counters that disagree. It returns the
// number of entries it found.
func (s *Segment) Check(problem func(error)) int64 {
	return s.check(problem, false)
}

// check is Check; updating says that the caller holds the update lock,
// which the lock word then shows.
func (s *Segment) check(problem func(error), updating bool) int64 {
	tb := s.tb
	l := &tb.layout
	report := func(t int64, format string, args ...any) { problem(s.corrupt(t, fmt.Sprintf(format, args...))) }
	if st := s.lock.State(); !st.Free() && !updating {
		report(-1, "lock word not free: %v", st)
	}
	if atomic.LoadUint64(s.seq)&1 != 0 {
		report(-1, "modification sequence is odd: a writer is inside or died inside")
	}
	head, reserved, counters := s.reserved()
	if atomic.LoadUint64(&head[shSleepers/8])>>32 != 0 || !reservedZero(reserved) {
		report(-1, "reserved header bytes are not zero")
	}
	if !reservedZero(counters) {
		report(-1, "reserved bytes of the counters are not zero")
	}
	keys := make(map[string]bool)
	var total, tiers int64
	t := s.index
	seen := map[int64]bool{}
	for {
		seen[t] = true
		tiers++
		tv := tb.tier(t)
		if t >= l.Segments {
			if owner := atomic.LoadUint64(&tv.header[thOwner/8]); owner != uint64(s.index)+1 {
				report(t, "overflow tier owned by %d, linked from segment %d", int64(owner)-1, s.index)
			}
		}
		if !reservedZero(tv.header[thOrder/8+1:]) {
			report(t, "reserved tier header bytes are not zero")
		}
		var entries, chunks int64
		used := make([]uint64, len(tv.bitmap))
		for pos, sl := range tv.slots {
			if sl == 0 {
				continue
			}
			c := slotChunk(sl)
			klen, vlen, nch, ok := tb.entryAt(&tv, c)
			if !ok {
				report(t, "slot %d: entry at chunk %d is undecodable", pos, c)
				continue
			}
			key := tb.entryKey(&tv, c, klen)
			if _, _, ok := tb.userValue(tb.entryValue(&tv, c, klen, vlen)); !ok {
				report(t, "slot %d: cache entry at chunk %d is too short for its expiry", pos, c)
			}
			if _, _, ok := tb.validEntry(&tv, c); !ok {
				// Still an entry for the counts below: one problem, not four.
				report(t, "slot %d: entry at chunk %d fails its checksum", pos, c)
			}
			h := xxhash.Sum64(key)
			if l.segmentOf(h) != s.index || uint32(h>>l.segmentBits) != slotTag(sl) {
				report(t, "slot %d: key %q does not hash to this segment and tag", pos, key)
			}
			if keys[string(key)] {
				report(t, "key %q stored twice", key)
			}
			keys[string(key)] = true
			for i := c; i < c+nch; i++ {
				if used[i>>6]>>(uint(i)&63)&1 != 0 {
					report(t, "chunk %d belongs to two entries", i)
					break
				}
				used[i>>6] |= 1 << (uint(i) & 63)
			}
			if tv.bitmap[c>>6]>>(uint(c)&63)&1 == 0 {
				report(t, "entry at chunk %d is marked free in the bitmap", c)
			}
			entries++
			chunks += nch
		}
		var leaked int64
		for i, w := range tv.bitmap {
			leaked += int64(bits.OnesCount64(w &^ used[i]))
		}
		if leaked != 0 {
			report(t, "%d chunks marked used that no entry occupies", leaked)
		}
		if n := int64(tv.entries()); n != entries {
			report(t, "header counts %d entries, slots hold %d", n, entries)
		}
		if n := int64(tv.usedChunks()); n != chunks+leaked {
			report(t, "header counts %d used chunks, bitmap has %d", n, chunks+leaked)
		}
		total += entries
		next := tv.next()
		if next == 0 {
			break
		}
		nt := int64(next - 1)
		if next > uint64(l.Tiers) || nt < l.Segments || seen[nt] {
			report(t, "next-tier link %d leads outside the pool or back into the chain", next)
			break
		}
		t = nt
	}
	if n := s.Len(); n != total {
		report(-1, "header counts %d entries, tiers hold %d", n, total)
	}
	if n := s.Tiers(); n != tiers {
		report(-1, "header counts %d tiers, chain has %d", n, tiers)
	}
	return total
}

// reserved returns segment s's header and the words of it and of its
// counters that no writer uses (words nobody writes, so anything in them is
// damage). The sleepers word's high half is reserved too.
func (s *Segment) reserved() (head, header, counters []uint64) {
	l := &s.tb.layout
	head = s.tb.region.Uint64s(l.SegmentsOff+s.index*segmentHeaderSize, segmentHeaderSize/8)
	if !l.Cache {
		header = head[shTiers/8+1:] // a cache map keeps its hand and eviction counters there
	}
	if s.counters != nil {
		from := stLockTimeouts/8 + 1
		if l.MoveCounters {
			from = stRelocations/8 + 1
		}
		counters = s.counters[from:]
	}
	return head, header, counters
}

// clearReserved zeroes what reserved returns and the reserved words of
// every tier of the chain. Caller holds the write lock.
func (s *Segment) clearReserved(chain []int64) {
	head, header, counters := s.reserved()
	atomic.AndUint64(&head[shSleepers/8], 1<<32-1)
	for _, w := range [][]uint64{header, counters} {
		for i := range w {
			atomic.StoreUint64(&w[i], 0)
		}
	}
	for _, t := range chain {
		tv := s.tb.tier(t)
		for i := range tv.header[thOrder/8+1:] {
			atomic.StoreUint64(&tv.header[thOrder/8+1+i], 0)
		}
	}
}

// ClearReservedGlobal zeroes the words of the table's global state and the
// padding before the tiers, which nothing writes (see CheckGlobal): part of
// repairing a damaged file.
func (tb *Table) ClearReservedGlobal() {
	global, padding := tb.reservedGlobal()
	for _, w := range [][]uint64{global, padding} {
		for i := range w {
			atomic.StoreUint64(&w[i], 0)
		}
	}
}

// reservedGlobal returns the words of the global state that nothing writes
// and the padding between the counters and the tiers.
func (tb *Table) reservedGlobal() (global, padding []uint64) {
	l := &tb.layout
	end := l.StatsOff
	if l.Stats {
		end += l.Segments * statsLineSize
	}
	return tb.region.Uint64s(l.GlobalOff+gExtraTiersUsed+8, globalSize/8-1), tb.region.Uint64s(end, (l.TiersOff-end)/8)
}

// CheckGlobal verifies, read-only, the table's global state: the count of
// overflow tiers handed out is within the pool, and the reserved bytes are
// zero (nothing writes them, so anything else is damage).
func (tb *Table) CheckGlobal(problem func(error)) {
	l := &tb.layout
	if n := atomic.LoadUint64(tb.extraTiers); n > uint64(l.Tiers-l.Segments) {
		problem(fmt.Errorf("%w: %d overflow tiers handed out, the pool has %d", ErrCorrupt, n, l.Tiers-l.Segments))
	}
	global, padding := tb.reservedGlobal()
	if !reservedZero(global) {
		problem(fmt.Errorf("%w: reserved bytes of the global state are not zero", ErrCorrupt))
	}
	if !reservedZero(padding) {
		problem(fmt.Errorf("%w: the padding before the tiers is not zero", ErrCorrupt))
	}
}

// reservedZero reports whether every word of a reserved field is zero.
func reservedZero(w []uint64) bool {
	for i := range w {
		if atomic.LoadUint64(&w[i]) != 0 {
			return false
		}
	}
	return true
}
