package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/segment"
)

// Large values. In a store map created by this version (Layout.LargeValues)
// a value whose entry is too large for a tier is cut into parts, each an
// entry of its own under a part key, spread over every segment; the key's
// own entry holds a descriptor (segment/large.go). The protocol:
//
//   - A Put inserts every part of a new random id, then swaps the
//     descriptor in under the key's segment lock (SwapLarge), then
//     deletes the parts of the value it replaced, if that was large. A
//     writer killed before the swap leaves the old value in place, and
//     after it the new one: either way some parts no descriptor names
//     (orphans), which take space but are never read as anyone's value.
//   - Parts of an id are never rewritten, only deleted after their
//     descriptor was swapped out. A reader reads the descriptor, then
//     every part, and checks the whole against the descriptor's XXH64. A
//     part missing or a sum that differs means a writer swapped the key
//     meanwhile (the descriptor read again differs: start over) or damage
//     (it is the same: ErrCorrupt). After largeRounds such rounds it reads
//     under the key segment's read lock, which holds every swap off, so
//     the parts stay.
//   - No writer holds two segments' locks; a reader holding the key
//     segment's read lock takes only other segments' read locks. So no
//     cycle of waits can form. Keep it so.

// MaxValueBytes is the largest value a store map takes (in files with
// large values; elsewhere a value must fit a tier).
const MaxValueBytes = 1 << 30

// MaxLargeKeyBytes is the longest key a large value may be stored under.
const MaxLargeKeyBytes = 1 << 16

// largeRounds is how many times a reader of a large value starts over,
// each time because a writer swapped the key under it, before it reads
// under the read lock.
const largeRounds = 4

// largeValues reports whether the map stores values too large for a tier.
func (m *Map) largeValues() bool { return m.layout.LargeValues && m.layout.PartSize() > 0 }

// fitsTier reports whether an entry of key and value fits one tier of a
// store map.
func (m *Map) fitsTier(key, value []byte) bool {
	return int64(16+len(key)+len(value)) <= m.layout.MaxEntryBytes()
}

// wantsLarge reports whether a store that failed with err should go the
// large way: the key holds a large value (ErrLarge), or the value does not
// fit a tier in a map that has large values.
func (m *Map) wantsLarge(err error, key, value []byte) bool {
	return errors.Is(err, segment.ErrLarge) || errors.Is(err, ErrTooLarge) && m.largeValues() && !m.fitsTier(key, value)
}

// checkLarge refuses a large value beyond the limits.
func (m *Map) checkLarge(key, value []byte) error {
	switch {
	case len(value) > MaxValueBytes:
		return fmt.Errorf("%w: value of %d bytes, at most %d (1 GiB)", ErrTooLarge, len(value), MaxValueBytes)
	case len(key) > MaxLargeKeyBytes:
		return fmt.Errorf("%w: key of %d bytes for a large value of %d bytes, at most %d (64 KiB)", ErrTooLarge, len(key), len(value), MaxLargeKeyBytes)
	}
	return nil
}

// newLargeID is a non-zero id for a new large value, never used before in
// the map: in its top 24 bits the low 24 bits of the generation of this
// process's registry slot (the registry counts every claim of a slot;
// 0: none known), so that Repair can tell parts no descriptor names that a
// live writer may still publish from those a writer left behind (see
// dropOrphans); below, 40 bits of a count this process started at random.
func (m *Map) newLargeID() uint64 {
	var tag uint64
	if m.reg != nil && m.reg.Self() >= 0 {
		if s, err := m.reg.Slot(m.reg.Self()); err == nil {
			tag = generationTag(s.Generation)
		}
	}
	for {
		if id := tag<<40 | largeSeq.Add(1)&(1<<40-1); id != 0 {
			return id
		}
	}
}

// generationTag is the part of a registry slot's generation a large
// value's id carries.
func generationTag(gen uint64) uint64 { return gen & (1<<24 - 1) }

// largeSeq numbers the large values this process stores, from a random
// start, so that two claims whose generations agree in their low 24 bits
// are unlikely to meet.
var largeSeq = func() *atomic.Uint64 {
	var n atomic.Uint64
	n.Store(rand.Uint64())
	return &n
}()

// partKey is the key of part i of d, whose owner key hashes to owner, and
// its hash.
func partKey(buf []byte, d *segment.Descriptor, i uint32, owner uint64) ([]byte, uint64) {
	k := segment.PartKey(buf[:0], d.ID, i, owner)
	return k, xxhash.Sum64(k)
}

// storeLarge stores value (too large for a tier) under key by the protocol
// above, provided cond (if not nil) accepts what the key holds at the
// swap. It returns what the key held, and done false if cond refused.
func (m *Map) storeLarge(h uint64, key, value []byte, cond func(segment.Large, []byte) bool) (segment.Large, bool, error) {
	if !m.largeValues() {
		if m.layout.Cache {
			return segment.Large{}, false, fmt.Errorf("%w: key %d + value %d bytes, a tier holds at most %d; a cache map stores no value larger than a tier", ErrTooLarge, len(key), len(value), m.layout.MaxEntryBytes()-16)
		}
		return segment.Large{}, false, fmt.Errorf("%w: key %d + value %d bytes, a tier holds at most %d; this file was made without large values", ErrTooLarge, len(key), len(value), m.layout.MaxEntryBytes()-16)
	}
	if err := m.checkLarge(key, value); err != nil {
		return segment.Large{}, false, err
	}
	p := m.layout.PartSize()
	d := segment.Descriptor{PartSize: uint32(p), Length: uint64(len(value)), Parts: uint32((len(value) + p - 1) / p), ID: m.newLargeID(), Sum: xxhash.Sum64(value)}
	buf := make([]byte, 0, segment.PartKeySize)
	for i := range d.Parts {
		from, to := d.PartBounds(i)
		k, ph := partKey(buf, &d, i, h)
		if err := m.table.For(ph).InsertPart(ph, k, value[from:to]); err != nil {
			m.deleteParts(&d, h, i)
			return segment.Large{}, false, fmt.Errorf("large value of %d bytes: part %d of %d: %w", len(value), i, d.Parts, err)
		}
	}
	old, done, err := m.table.For(h).SwapLarge(h, key, segment.SwapDescriptor, d.Encode(nil), cond)
	if err != nil || !done {
		m.deleteParts(&d, h, d.Parts)
		return old, false, err
	}
	m.dropReplaced(h, old)
	return old, true, nil
}

// dropReplaced deletes the parts of old, what a swap replaced, if it was a
// large value.
func (m *Map) dropReplaced(h uint64, old segment.Large) {
	if old.Large {
		m.deleteParts(&old.Desc, h, old.Desc.Parts)
	}
}

// deleteParts deletes parts 0 to n-1 of d. A part it cannot delete stays
// an orphan (Check reports it, Repair deletes it): the value it belonged
// to is gone already, or was never published.
func (m *Map) deleteParts(d *segment.Descriptor, owner uint64, n uint32) {
	buf := make([]byte, 0, segment.PartKeySize)
	for i := range n {
		k, ph := partKey(buf, d, i, owner)
		_, _ = m.table.For(ph).DeletePart(ph, k)
	}
}

// swapSmall stores a small value over key (op SwapValue), or deletes it
// (SwapDelete), whatever it holds, large or not, provided cond accepts
// it, and deletes the parts of a large value it replaced.
func (m *Map) swapSmall(h uint64, key []byte, op segment.SwapOp, value []byte, cond func(segment.Large, []byte) bool) (segment.Large, bool, error) {
	old, done, err := m.table.For(h).SwapLarge(h, key, op, value, cond)
	if err != nil || !done {
		return old, done, err
	}
	m.dropReplaced(h, old)
	return old, true, nil
}

// putLarge is Put's way when its store met ErrLarge or a value too large
// for a tier: it reports whether the key was absent. IfAbsent leaves a
// present key as it is.
func (m *Map) putLarge(h uint64, key, value []byte, ifAbsent bool) (inserted bool, err error) {
	var cond func(segment.Large, []byte) bool
	if ifAbsent {
		cond = func(cur segment.Large, _ []byte) bool { return !cur.Found }
	}
	var old segment.Large
	var done bool
	if m.fitsTier(key, value) {
		old, done, err = m.swapSmall(h, key, segment.SwapValue, value, cond)
	} else {
		old, done, err = m.storeLarge(h, key, value, cond)
	}
	return done && !old.Found, err
}

// readLarge appends to dst the value of key (hashed to h), large or not,
// and reports what the key held when read (cur: for a conditional swap).
func (m *Map) readLarge(h uint64, key, dst []byte) ([]byte, segment.Large, error) {
	seg := m.table.For(h)
	start := len(dst)
	for round := 0; round < largeRounds; round++ {
		out, cur, err := seg.ReadLarge(h, key, dst)
		if err != nil || !cur.Found || !cur.Large {
			return out, cur, err
		}
		out, ok, err := m.readParts(&cur.Desc, h, dst)
		switch {
		case err != nil:
			return dst[:start], segment.Large{}, err
		case ok:
			return out, cur, nil
		}
		_, again, err := seg.ReadLarge(h, key, dst[start:start])
		if err != nil {
			return dst[:start], segment.Large{}, err
		}
		if again.Large && again.Desc == cur.Desc {
			return dst[:start], segment.Large{}, m.largeDamage(seg, key, &cur.Desc)
		}
	}
	// Writers keep swapping the key: read under its segment's read lock.
	out, cur, _, err := m.readLargeLocked(seg, h, key, dst, false)
	return out, cur, err
}

// readLargeLocked is readLarge's way once writers kept swapping the key:
// it reads under the key segment's read lock, which holds every change of
// the segment off (on a read-only mapping, which cannot take it, it reads
// again until the parts add up, and with versioned until the segment's
// sequence stays put over the read, or LockTimeout passes). It also
// returns the segment's sequence the value was read at.
func (m *Map) readLargeLocked(seg *segment.Segment, h uint64, key, dst []byte, versioned bool) ([]byte, segment.Large, uint64, error) {
	start := len(dst)
	var out []byte
	var cur segment.Large
	var seq uint64
	deadline := time.Now().Add(m.opts.LockTimeout)
	for {
		held, err := seg.ReadLocked(func() error {
			if m.table.SegmentOf(h) != seg.Index() {
				return errKeyMoved // the lock held is not the key's: a split moved it
			}
			seq = seg.Seq()
			var err error
			out, cur, err = seg.ReadLarge(h, key, dst)
			if err == nil && cur.Found && cur.Large {
				var ok bool
				if out, ok, err = m.readParts(&cur.Desc, h, dst); err == nil && !ok {
					err = errPartsGone
				}
			}
			return err
		})
		moved := versioned && !held && (seq&1 != 0 || seg.SeqAfterReads() != seq)
		switch {
		case err == nil && !moved:
			return out, cur, seq, nil
		case errors.Is(err, errKeyMoved):
			seg = m.table.For(h)
			continue
		case err != nil && !errors.Is(err, errPartsGone):
			return dst[:start], segment.Large{}, 0, err
		case err != nil && held:
			return dst[:start], segment.Large{}, 0, m.largeDamage(seg, key, &cur.Desc)
		case time.Now().After(deadline):
			return dst[:start], segment.Large{}, 0, fmt.Errorf("%w: segment %d: the large value of key %q kept changing under a read-only reader", ErrTimeout, seg.Index(), string(key))
		}
		time.Sleep(time.Millisecond)
	}
}

// errKeyMoved: a split moved the key out of the segment whose lock a
// reader took.
var errKeyMoved = errors.New("key moved by a split")

// errPartsGone: a part of the descriptor read is missing, or the value
// assembled fails its XXH64.
var errPartsGone = errors.New("parts of a large value missing")

// largeDamage is the error for a large value whose descriptor stays while
// its parts are missing or do not add up to its XXH64.
func (m *Map) largeDamage(seg *segment.Segment, key []byte, d *segment.Descriptor) error {
	return fmt.Errorf("%w: segment %d: the large value of key %q (%d bytes in %d parts) has parts missing or fails its checksum; Repair drops the key", ErrCorrupt, seg.Index(), string(key), d.Length, d.Parts)
}

// readParts appends the value d describes to dst from its parts, and
// reports whether every part was there and the whole matches d's XXH64.
func (m *Map) readParts(d *segment.Descriptor, owner uint64, dst []byte) ([]byte, bool, error) {
	start := len(dst)
	if d.Length > MaxValueBytes {
		return dst, false, nil
	}
	dst = slices.Grow(dst, int(d.Length))
	buf := make([]byte, 0, segment.PartKeySize)
	for i := range d.Parts {
		from, to := d.PartBounds(i)
		k, ph := partKey(buf, d, i, owner)
		at := len(dst)
		out, found, err := m.table.For(ph).GetPart(ph, k, dst)
		if err != nil {
			return dst[:start], false, err
		}
		if !found || uint64(len(out)-at) != to-from {
			return dst[:start], false, nil
		}
		dst = out
	}
	if xxhash.Sum64(dst[start:]) != d.Sum {
		return dst[:start], false, nil
	}
	return dst, true, nil
}

// getLarge is a lookup's way when the segment answered ErrLarge.
func (m *Map) getLarge(h uint64, key, dst []byte) ([]byte, bool, error) {
	out, cur, err := m.readLarge(h, key, dst)
	return out, cur.Found, err
}

// computeLarge is Compute's and Update's way for a key that holds a large
// value, or whose new value is one: fn runs outside any lock on the value
// read, and its result is stored only if the key still holds what was
// read; otherwise fn runs again. fn returns the value and what to do, or
// an error that ends the call with nothing stored.
func (m *Map) computeLarge(h uint64, key []byte, fn func(old []byte, found bool) ([]byte, segment.Outcome, error)) error {
	for {
		old, cur, err := m.readLarge(h, key, nil)
		if err != nil {
			return err
		}
		value, outcome, err := fn(old, cur.Found)
		if err != nil {
			return err
		}
		same := func(now segment.Large, small []byte) bool {
			switch {
			case now.Found != cur.Found || now.Large != cur.Large:
				return false
			case now.Large:
				return now.Desc == cur.Desc
			}
			return !now.Found || bytes.Equal(small, old)
		}
		var done bool
		switch {
		case outcome == segment.Leave:
			return nil
		case outcome == segment.Remove && !cur.Found:
			return nil
		case outcome == segment.Remove:
			_, done, err = m.swapSmall(h, key, segment.SwapDelete, nil, same)
		case m.fitsTier(key, value):
			_, done, err = m.swapSmall(h, key, segment.SwapValue, value, same)
		default:
			_, done, err = m.storeLarge(h, key, value, same)
		}
		if err != nil || done {
			return err
		}
	}
}

// getLargeVersioned is GetVersioned's way for a key holding a large value:
// the value read between two reads of the key segment's sequence that
// agree (every swap of the key moves it). Any write to the segment moves
// the sequence too, so after largeRounds reads that it moved under it
// reads under the segment's read lock, as readLarge does.
func (m *Map) getLargeVersioned(s *segment.Segment, h uint64, key, dst []byte) ([]byte, bool, uint64, error) {
	for range largeRounds {
		seq := s.Seq()
		if seq&1 != 0 {
			runtime.Gosched()
			continue
		}
		out, found, err := m.getLarge(h, key, dst)
		if err != nil || s.SeqAfterReads() == seq {
			return out, found, seq, err
		}
	}
	out, cur, seq, err := m.readLargeLocked(s, h, key, dst, true)
	return out, cur.Found, seq, err
}

// ErrOrphans: parts of large values that no key's descriptor names. A
// large Put cut short (a process killed, or an error, midway) leaves them;
// so, for a moment, does one under way. They take space but are never
// read as a value; Repair deletes those no live process can still
// publish.
var ErrOrphans = errors.New("parts of large values that no key names")

// largeIndex is what LargeIndex found in every segment: the ids of the
// descriptors, the descriptors by segment, and each segment's parts.
type largeIndex struct {
	unread bool // a segment could not be read: its descriptors are unknown
	ids    map[uint64]bool
	descs  [][]segment.DescriptorEntry // by segment
	parts  [][]segment.PartEntry       // by segment
}

// indexLarge reads every segment's LargeIndex. A segment that cannot be
// read is skipped (the segments' check reports it).
func (m *Map) indexLarge() largeIndex {
	n := int(m.table.Segments())
	x := largeIndex{ids: make(map[uint64]bool), descs: make([][]segment.DescriptorEntry, n), parts: make([][]segment.PartEntry, n)}
	for i := range n {
		descs, parts, err := m.table.Segment(i).LargeIndex()
		if err != nil {
			x.unread = true
			continue
		}
		for _, d := range descs {
			x.ids[d.Desc.ID] = true
		}
		x.descs[i], x.parts[i] = descs, parts
	}
	return x
}

// broken calls fn with every descriptor some of whose parts x lacks and
// whose value, read again now, is still damaged (the index is no snapshot:
// a writer may have swapped the key between two segments' reads), with
// the error of that read.
func (m *Map) broken(x *largeIndex, fn func(seg int, d segment.DescriptorEntry, err error)) {
	have := make(map[[2]uint64]bool)
	for _, parts := range x.parts {
		for _, p := range parts {
			if id, i, _, ok := segment.ParsePartKey(p.Key); ok {
				have[[2]uint64{id, uint64(i)}] = true
			}
		}
	}
	for seg, descs := range x.descs {
		for _, d := range descs {
			whole := true
			for i := range d.Desc.Parts {
				if !have[[2]uint64{d.Desc.ID, uint64(i)}] {
					whole = false
					break
				}
			}
			if whole {
				continue
			}
			if _, _, err := m.readLarge(xxhash.Sum64(d.Key), d.Key, nil); errors.Is(err, ErrCorrupt) {
				fn(seg, d, err)
			}
		}
	}
}

// orphans calls fn with every part whose id no descriptor of x names.
func (x *largeIndex) orphans(fn func(seg int, p segment.PartEntry, id, owner uint64)) {
	for seg, parts := range x.parts {
		for _, p := range parts {
			if id, _, owner, ok := segment.ParsePartKey(p.Key); ok && !x.ids[id] {
				fn(seg, p, id, owner)
			}
		}
	}
}

// checkOrphans reports the parts no descriptor names, as one problem:
// leaked space, not damage (it does not match ErrCorrupt).
func (m *Map) checkOrphans(out []Problem) []Problem {
	if !m.largeValues() {
		return out
	}
	x := m.indexLarge()
	m.broken(&x, func(seg int, _ segment.DescriptorEntry, err error) { out = append(out, Problem{seg, err}) })
	if x.unread {
		return out // parts may be named by a segment not read, which is reported
	}
	n, bytes := 0, 0
	x.orphans(func(_ int, p segment.PartEntry, _, _ uint64) { n, bytes = n+1, bytes+p.Bytes })
	if n > 0 {
		out = append(out, Problem{-1, fmt.Errorf("%w: %d parts (%d bytes of values), left by large Puts cut short or under way; Repair deletes those of processes gone", ErrOrphans, n, bytes)})
	}
	return out
}

// dropOrphans deletes the parts no descriptor names whose writer is gone:
// no live process holds a registry slot claimed with the generation the
// id carries. A writer alive may still swap in a descriptor naming parts
// it inserted, so those stay, as do the parts of ids that carry no
// generation. The writer's death is established before the descriptors
// are read again, so a descriptor it swapped in before it died is seen.
// It returns how many parts it deleted.
//
// The recovery of a dead process does not call it: the parts of a Put cut
// short are spread over every segment under keys made from an id the file
// does not record, so finding them means reading every entry of the map,
// twice, which recovery (under the registry's recovery lock, at Open too)
// must not pay for each death. Repair and Clear, which read the whole map
// anyway, do.
func (m *Map) dropOrphans() int {
	if !m.largeValues() || m.reg == nil {
		return 0
	}
	x := m.indexLarge()
	slots, err := m.reg.Slots()
	if err != nil {
		return 0
	}
	live := make(map[uint64]bool) // generation tags of the live processes
	for _, s := range slots {
		if s.Alive {
			live[generationTag(s.Generation)] = true
		}
	}
	gone := make(map[uint64]bool) // ids whose writer is gone
	x.orphans(func(_ int, _ segment.PartEntry, id, _ uint64) {
		tag := id >> 40
		gone[id] = tag != 0 && !live[tag]
	})
	again := m.indexLarge() // after the liveness checks
	if x.unread || again.unread {
		return 0 // a part may belong to a descriptor of a segment not read
	}
	deleted := 0
	x.orphans(func(_ int, p segment.PartEntry, id, _ uint64) {
		if !gone[id] || again.ids[id] {
			return
		}
		h := xxhash.Sum64(p.Key)
		if ok, err := m.table.For(h).DeletePart(h, p.Key); ok && err == nil {
			deleted++
		}
	})
	return deleted
}

// dropBroken deletes every key whose large value has parts missing or
// fails its XXH64, as long as it still holds that descriptor, with the
// parts it has left, and returns the keys it deleted.
func (m *Map) dropBroken() (dropped []string) {
	if !m.largeValues() {
		return nil
	}
	x := m.indexLarge()
	m.broken(&x, func(_ int, d segment.DescriptorEntry, _ error) {
		_, done, err := m.swapSmall(xxhash.Sum64(d.Key), d.Key, segment.SwapDelete, nil, func(now segment.Large, _ []byte) bool {
			return now.Large && now.Desc == d.Desc
		})
		if done && err == nil {
			dropped = append(dropped, string(d.Key))
		}
	})
	return dropped
}
