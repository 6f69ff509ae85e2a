package hashmap

import (
	"fmt"

	"github.com/cespare/xxhash/v2"
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
// clearing), but for one that holds parts of large values (below).
//
// Removed entries count as deletes in Len and Stats (expired ones of a cache
// map as expired). Overflow tiers stay linked to their segments, empty. The
// entries' bytes are only made unreachable, as with Delete.
//
// A segment's large values go with it, and their parts after it (the
// parts are spread over every segment). The parts of large values are all
// that a segment's Clear leaves: a large Put under way inserts its parts
// before it swaps the value's descriptor in, and a Clear that took them in
// between would leave the key naming a value that lost parts. So a key
// written with a large value during the Clear reads as absent or as the
// value written, as any key does. A segment that holds parts is cleared
// entry by entry: readers still see it whole or
// empty, but a process killed in the middle of it leaves some of its
// entries, each whole. Parts left by large Puts of processes that died are
// deleted at the end, as Repair deletes them.
//
// No segment splits while Clear runs (Clear waits up to LockTimeout for a
// split under way, or another process's Clear, to end). It stops at the
// first segment it cannot clear, with the segments after it as they were:
// ErrTimeout when a live process held its lock through the wait, ErrCorrupt when its tier chain cannot be followed (Repair). Close
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
	// No segment splits while Clear runs: a split could move a key written
	// after its segment was cleared into a segment cleared later.
	resume, err := m.table.PauseSplits(m.opts.LockTimeout)
	if err != nil {
		return fmt.Errorf("clear: %w", err)
	}
	defer resume()
	for i := range int(m.table.Segments()) {
		_, descs, err := m.table.Segment(i).ClearLarge()
		for _, d := range descs {
			m.deleteParts(&d.Desc, xxhash.Sum64(d.Key), d.Desc.Parts)
		}
		if err != nil {
			return fmt.Errorf("clear: %w", err)
		}
	}
	m.dropOrphans()
	return nil
}
