package hashmap

import (
	"bytes"
	"fmt"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/segment"
)

// DeleteFunc removes every entry for which fn returns true and returns how
// many it removed, one segment at a time: under a segment's update lock
// (readers go on, writers wait) it calls fn on each live entry, then removes
// those fn chose under the write lock, all at once for readers of that
// segment in every process. No writer changes a segment between fn's look
// and the removal. Across segments it is not a snapshot: an entry written to
// a segment already passed stays.
//
// fn gets the key and the value (as Get returns it) in buffers reused for
// the next entry: copy what you keep. It runs under the segment's lock, as
// Compute's function does: keep it short, and do not write to the map or
// Close it from fn (a write to the same segment fails with ErrTimeout after
// up to twice LockTimeout; Close waits forever). A panic in fn leaves the
// segment it was looking at as it was, and the segments before it done.
//
// A key holding a large value (stored in parts) is looked at after its
// segment's lock is released: fn gets the value as read then, outside any
// lock, and the key is removed if fn chooses it and it still holds that
// value.
//
// A process killed in the middle leaves every entry removed or whole.
// DeleteFunc stops at the first segment it cannot lock (ErrTimeout) or read
// (ErrCorrupt), returning how many it removed before.
func (m *Map) DeleteFunc(fn func(key, value []byte) bool) (deleted int, err error) {
	if fn == nil {
		return 0, fmt.Errorf("%w: DeleteFunc with a nil function", ErrBadOptions)
	}
	c, err := m.enterAny(true)
	if err != nil {
		return 0, err
	}
	defer c.Leave()
	var large [][]byte
	// Segments split meanwhile are visited too, after those in use at the
	// start (n0), up to those in use at its end; a key found in one of them
	// is left alone if an ancestor segment held it when visited (visits:
	// the segments in use then, read under that segment's lock), as Range
	// leaves it out (splitSeen), so that fn judges a key present
	// throughout once.
	n0 := int(m.table.Segments())
	var visits []int64
	for i := 0; i < int(m.table.Segments()); i++ {
		large = large[:0]
		judge, collect := fn, func(key []byte) { large = append(large, key) }
		if i >= n0 {
			judge = func(key, value []byte) bool { return !m.splitSeen(key, i, visits) && fn(key, value) }
			collect = func(key []byte) {
				if !m.splitSeen(key, i, visits) {
					large = append(large, key)
				}
			}
		}
		n, at, err := m.table.Segment(i).DeleteFuncLargeSeen(judge, collect)
		visits = append(visits, at)
		deleted += int(n)
		if err != nil {
			return deleted, fmt.Errorf("DeleteFunc: %w", err)
		}
		for _, k := range large {
			gone, err := m.deleteLargeIf(k, fn)
			if err != nil {
				return deleted, fmt.Errorf("DeleteFunc: %w", err)
			}
			if gone {
				deleted++
			}
		}
	}
	return deleted, nil
}

// deleteLargeIf is DeleteFunc's look at a key whose value was large when
// its segment was walked: fn gets the value as read now, outside any lock,
// and the key is deleted if fn chooses it and the key still holds what fn
// saw.
func (m *Map) deleteLargeIf(key []byte, fn func(key, value []byte) bool) (bool, error) {
	h := xxhash.Sum64(key)
	v, cur, err := m.readLarge(h, key, nil)
	if err != nil || !cur.Found || !fn(key, v) {
		return false, err
	}
	old, done, err := m.swapSmall(h, key, segment.SwapDelete, nil, func(now segment.Large, small []byte) bool {
		if now.Large || cur.Large {
			return now.Large == cur.Large && now.Desc == cur.Desc
		}
		return now.Found && bytes.Equal(small, v)
	})
	return done && old.Found, err
}

// DeletePrefix removes every entry whose key begins with prefix and
// returns how many it removed: DeleteFunc with bytes.HasPrefix, with its
// promises. An empty prefix removes every entry, as Clear does but one
// entry at a time (Clear is the cheaper way).
func (m *Map) DeletePrefix(prefix []byte) (int, error) {
	return m.DeleteFunc(func(key, _ []byte) bool { return bytes.HasPrefix(key, prefix) })
}
