package registry

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Check reports, read-only, what no process could have written: a slot
// state other than free or in use, an in-use slot without a pid, bytes
// after the last slot or in the headers' unused words that are not zero,
// and a high-water mark past the slot count. Slots past the mark are not
// read one by one: their bytes must all be zero, and only those the file
// holds data for are read (see zeroFrom). Journals and ledgers are the
// lock packages' to judge (ipc.Arena.CheckJournal; rwulock ledgers carry a
// version even when free).
func (r *Registry) Check(problem func(error)) int {
	n := 0
	report := func(format string, args ...any) {
		n++
		problem(fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...))
	}
	head := r.file.Uint64s(r.layout.Off, areaHeaderSize/8)
	for w := hLockIno/8 + 1; w < len(head); w++ {
		switch v := atomic.LoadUint64(&head[w]); {
		case w == hHighWater/8 && r.hwm != nil:
			if v > uint64(r.layout.Slots) {
				report("high-water mark %d is past the %d slots", v, r.layout.Slots)
			}
		case v != 0:
			report("area header word %d is %#x, not 0", w, v)
		}
	}
	inUse := r.InUse()
	for i := range inUse {
		off := r.layout.slotOff(i)
		state := atomic.LoadUint64(r.file.Uint64(off + sState))
		switch {
		case state != stateFree && state != stateInUse:
			report("slot %d: state %#x", i, state)
		case state == stateInUse && atomic.LoadUint64(r.file.Uint64(off+sPID)) == 0:
			report("slot %d: in use without a process id", i)
		}
		for w := sClaimedAt/8 + 1; w < sJournal/8; w++ {
			if v := atomic.LoadUint64(r.file.Uint64(off + int64(w)*8)); v != 0 {
				report("slot %d: header word %d is %#x, not 0", i, w, v)
			}
		}
		if pad := r.layout.SlotSize() - slotHeaderSize - int64(r.layout.Ledgers+r.layout.Counters)*8; pad > 0 {
			if b := r.file.Bytes(off+slotHeaderSize+int64(r.layout.Ledgers+r.layout.Counters)*8, pad); !allZero(b) {
				report("slot %d: padding after its ledgers is not zero", i)
			}
		}
	}
	if inUse < r.layout.Slots && !r.zeroFrom(r.layout.slotOff(inUse), false) {
		report("slots %d..%d, past the high-water mark, are not all zero", inUse, r.layout.Slots-1)
	}
	if !r.zeroFrom(r.layout.slotOff(r.layout.Slots), false) {
		report("bytes after the last slot are not zero")
	}
	return n
}

// zeroFrom reports whether the area's bytes from off to its end (or, for
// the slots past the high-water mark, to the end of the last slot) are
// zero, zeroing them if mend is set; it reads only the ranges the file
// holds data for (offheap.File.DataAt): a hole reads as zeros, and reading
// one would bring its pages into memory for nothing.
func (r *Registry) zeroFrom(off int64, mend bool) bool {
	end := r.layout.Off + r.layout.Bytes()
	if off < r.layout.slotOff(r.layout.Slots) {
		end = r.layout.slotOff(r.layout.Slots)
	}
	zero := true
	for off < end {
		start, stop, ok := r.file.DataAt(off)
		if !ok {
			start, stop = off, end
		}
		start, stop = max(start, off), min(stop, end)
		if start >= end {
			break
		}
		if b := r.file.Bytes(start, stop-start); !allZero(b) {
			zero = false
			if mend {
				clear(b)
			}
		}
		off = stop
	}
	return zero
}

// Mend rewrites what Check reports and no process writes: unused words of
// the area header and of the slots' headers, the padding after the ledgers
// and the bytes after the last slot become zero (and those of slots past
// the high-water mark), a mark past the slot count becomes the slot
// count, and a slot's state word that is neither free nor in
// use becomes in use. Such a slot then belongs to a live process, or, if
// its OFD lock says none lives, to one that died with the map open, whose
// locks recovery releases before freeing the slot, as for any other. It
// runs under the recovery lock, so no slot is claimed meanwhile, and
// returns how many places it rewrote. (An in-use slot without a process
// id is left: recovery frees it if its process is dead, and a live
// process's id cannot be told.)
func (r *Registry) Mend(timeout time.Duration) (int, error) {
	unlock, err := r.LockRecovery(timeout)
	if err != nil {
		return 0, err
	}
	defer unlock()
	n, err := MendHeader(r.file, r.layout) // its unused words; the rest Attach checked
	if err != nil {
		return 0, err
	}
	zero := func(b []byte) {
		if !allZero(b) {
			clear(b)
			n++
		}
	}
	ledgersEnd := slotHeaderSize + int64(r.layout.Ledgers+r.layout.Counters)*8
	inUse := r.InUse()
	for i := range inUse {
		off := r.layout.slotOff(i)
		// A CAS: Leave stores free without the recovery lock.
		state := r.file.Uint64(off + sState)
		if v := atomic.LoadUint64(state); v != stateFree && v != stateInUse && atomic.CompareAndSwapUint64(state, v, stateInUse) {
			n++
		}
		zero(r.file.Bytes(off+sClaimedAt+8, sJournal-sClaimedAt-8))
		zero(r.file.Bytes(off+ledgersEnd, r.layout.SlotSize()-ledgersEnd))
	}
	if inUse < r.layout.Slots && !r.zeroFrom(r.layout.slotOff(inUse), true) {
		n++
	}
	if !r.zeroFrom(r.layout.slotOff(r.layout.Slots), true) {
		n++
	}
	return n, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
