package hashmap

import (
	"fmt"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/segment"
)

// Clear removes every entry of the map, one segment at a time, each under
// its own write lock, waited for as any writer waits (LockTimeout).
//
// Each segment is cleared atomically, for every process: a reader sees its
// entries all there or all gone, and a write to a key lands before the Clear
// of its segment (and is removed) or after (and stays). The map as a whole
// is not a snapshot: after Clear returns, it holds exactly the writes that
// came after their segment's clearing. A process killed in the middle leaves
// every segment cleared or as it was (recovery finishes the one it was
// clearing).
//
// Removed entries count as deletes in Len and Stats (expired ones of a cache
// map as expired). Overflow tiers stay linked to their segments, empty. The
// entries' bytes are only made unreachable, as with Delete.
//
// Large values are deleted first, one key at a time as Delete does, so
// that a segment cleared never takes the parts of a value whose key a
// segment not cleared yet still holds. A large value stored during the
// Clear may yet lose parts to it: its key then reads as damaged
// (ErrCorrupt), never as another value.
//
// It stops at the first segment it cannot clear, with the segments after it
// as they were: ErrTimeout when a live process held its lock through the
// wait, ErrCorrupt when its tier chain cannot be followed (Repair). Close
// waits for a Clear in progress.
func (m *Map) Clear() error {
	// Overflow tiers stay linked, empty: the file's pool hands tiers out
	// and never takes them back, so one given up could serve no other
	// segment, while the segment that keeps it refills without linking
	// again.
	c, err := m.enterAny(true)
	if err != nil {
		return err
	}
	defer c.Leave()
	if err := m.clearLarge(); err != nil {
		return fmt.Errorf("clear: %w", err)
	}
	// Up to the segments in use when it ends: a split meanwhile may move
	// keys of a segment not yet cleared into a new one.
	for i := 0; i < int(m.table.Segments()); i++ {
		if _, err := m.table.Segment(i).Clear(); err != nil {
			return fmt.Errorf("clear: %w", err)
		}
	}
	return nil
}

// clearLarge deletes every key holding a large value, with its parts.
func (m *Map) clearLarge() error {
	if !m.largeValues() {
		return nil
	}
	var keys [][]byte
	for i := 0; i < int(m.table.Segments()); i++ {
		keys = keys[:0]
		if _, err := m.table.Segment(i).DeleteFuncLarge(func(_, _ []byte) bool { return false }, func(k []byte) { keys = append(keys, k) }); err != nil {
			return err
		}
		for _, k := range keys {
			if _, _, err := m.swapSmall(xxhash.Sum64(k), k, segment.SwapDelete, nil, nil); err != nil {
				return err
			}
		}
	}
	return nil
}
