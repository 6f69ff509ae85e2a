package rediscache

// What the package keeps in the shared map, all little-endian. Every
// process writes both; Compute (the segment's lock) guards the control
// record, and GetOrLoad's fill token or Delete guards an entry.
//
// The control record, key "\x00rediscache\x00control", 48 bytes, no expiry:
//
//	offset size field      written by
//	0      8    epoch      a takeover, the tracker (new connection, flush, error)
//	8      8    watermark  the tracker when tracking begins and at each PONG (CLOCK_MONOTONIC ns; 0 at takeover)
//	16     8    tracker    a takeover (its pid), the tracker's Close (0)
//	24     8    term       a takeover (CLOCK_MONOTONIC ns of it)
//	32     8    applied    the tracker: invalidations applied
//	40     8    bumps      whoever bumps the epoch
//
// Each cached Redis key, under the same key, expiring with the Redis key
// (at most MaxTTL) or after NegativeTTL:
//
//	offset size field
//	0      8    epoch: the control epoch its fill read before Redis
//	8      1    kind: 1 value, 2 absent in Redis
//	9      7    zero
//	16     n    the Redis value (kind 1)

import (
	"encoding/binary"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// controlKey is the map key of the control record. Redis keys never reach
// it: it is outside every prefix a cache accepts (prefixes may not start
// with a zero byte).
var controlKey = []byte("\x00rediscache\x00control")

const controlSize = 48

// control is the host's record of what the cache may serve: the epoch
// current entries must carry, and the watermark below which every write
// has had its invalidation applied. Only Compute changes it.
type control struct {
	epoch     uint64 // entries of another epoch are misses
	watermark uint64 // CLOCK_MONOTONIC ns; 0: nothing is fresh
	pid       uint64 // the tracker's pid; 0: none
	term      uint64 // the tracker's term: monotonic ns of its takeover
	applied   uint64 // invalidations applied, host-wide
	bumps     uint64 // epoch bumps, host-wide
}

func (ct *control) decode(b []byte) bool {
	if len(b) != controlSize {
		return false
	}
	le := binary.LittleEndian
	*ct = control{le.Uint64(b), le.Uint64(b[8:]), le.Uint64(b[16:]), le.Uint64(b[24:]), le.Uint64(b[32:]), le.Uint64(b[40:])}
	return true
}

func (ct *control) encode() []byte {
	b := make([]byte, 0, controlSize)
	le := binary.LittleEndian
	for _, v := range [...]uint64{ct.epoch, ct.watermark, ct.pid, ct.term, ct.applied, ct.bumps} {
		b = le.AppendUint64(b, v)
	}
	return b
}

// newControl is the record a map without one starts with. Its epoch comes
// from the wall clock rather than 1, so that it differs from the epochs of
// entries left by a record that was lost (evicted), which only +1 steps
// made.
func newControl() control {
	return control{epoch: uint64(time.Now().UnixNano())}
}

// readControl reads the control record without allocating; ok is false
// when the map has none (a lost record: nothing is fresh). A process keeps
// the record it read last with its Version, and reads it again only when
// its segment has changed since: checking one word of the file costs far
// less than the lookup, which would otherwise be half a hit's time.
func (c *Cache) readControl() (ct control, ok bool) {
	if s := c.ctlSnap.Load(); s != nil && c.m.Unchanged(s.v) {
		return s.ct, s.ok
	}
	sc := c.scratch()
	defer c.scratchPool.Put(sc)
	b, v, err := c.m.GetVersioned(sc.ctl[:0], controlKey)
	if err != nil {
		return control{}, false
	}
	ok = ct.decode(b)
	c.ctlSnap.Store(&controlSnap{ct: ct, ok: ok, v: v})
	return ct, ok
}

// controlSnap is a control record as read at a Version of its segment.
type controlSnap struct {
	ct control
	ok bool
	v  hashmap.Version
}

// scratch are buffers for a read: the map's GetInto keeps its arguments
// from living on the stack, and a pooled buffer is what keeps a hit free of
// allocations.
type scratch struct {
	ctl [controlSize]byte
	key []byte
}

func (c *Cache) scratch() *scratch {
	if s, ok := c.scratchPool.Get().(*scratch); ok {
		return s
	}
	return &scratch{key: make([]byte, 0, 64)}
}

// updateControl applies fn to the control record atomically (creating the
// record if it is missing); fn returns false to leave it unchanged. It
// returns the record as fn left it and whether fn changed it.
func (c *Cache) updateControl(fn func(ct *control) bool) (control, bool, error) {
	var out control
	var changed bool
	err := c.m.Compute(controlKey, func(old []byte, found bool) ([]byte, bool) {
		ct := newControl()
		if found && !ct.decode(old) {
			ct = newControl()
			found = false
		}
		if changed = fn(&ct); !changed {
			out = ct
			if !found {
				return nil, false
			}
			return old, true
		}
		out = ct
		return ct.encode(), true
	})
	return out, changed, err
}

// fresh reports whether the record lets a hit be served at now: a
// watermark within maxStale. A watermark ahead of now (a file kept from
// before a reboot restarted the clock) is not fresh.
func (c *Cache) fresh(ct control, now uint64) bool {
	return ct.watermark != 0 && ct.watermark <= now && now-ct.watermark <= c.maxStale
}
