package rwulock

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestFastLedgerAccountsForTheWriteLock: FindOrphans, reading a live
// process's fast ledger through FastAsLedger, takes a write lock it holds
// as the process's, waits for it in each unsettled state, and finds the
// write lock orphaned only when no ledger holds it.
func TestFastLedgerAccountsForTheWriteLock(t *testing.T) {
	cases := []struct {
		name    string
		state   uint64
		written bool // the lock word holds the write lock
		want    error
		orphan  bool // the write lock is found orphaned
	}{
		{"held", FastHeld, true, nil, false},
		{"empty, a dead process's write lock", FastEmpty, true, nil, true},
		{"closed, a dead process's write lock", FastClosed, true, nil, true},
		{"acquiring, its CAS landed", FastAcquiring, true, ErrUnsettled, false},
		{"acquiring, its CAS not yet", FastAcquiring, false, ErrUnsettled, false},
		{"releasing, its CAS not yet", FastReleasing, true, ErrUnsettled, false},
		{"releasing, its CAS landed", FastReleasing, false, ErrUnsettled, false},
		{"damaged", 5, true, ErrUnsettled, false},
		{"held, but the word is free", FastHeld, false, ErrUnexplained, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			word, sleepers := new(uint64), new(uint32)
			if c.written {
				*word = uint64(writeLocked)
			}
			fast := FastNext(FastNext(0, FastAcquiring), c.state)
			ledger := new(uint64) // the same process's ledger, settled, holding nothing
			live := func(dst []uint64) []uint64 {
				return append(dst, atomic.LoadUint64(ledger), FastAsLedger(atomic.LoadUint64(&fast)))
			}
			rec := AtWithSleepers(word, sleepers)
			_, o, err := rec.FindOrphans(live, time.Now().Add(20*time.Millisecond))
			if !errors.Is(err, c.want) {
				t.Fatalf("FindOrphans: %v, want %v", err, c.want)
			}
			if err == nil && o.Write != c.orphan {
				t.Fatalf("orphans %+v: write orphaned %v, want %v", o, o.Write, c.orphan)
			}
		})
	}
}

// TestFastLedgerVersionsTellChanges: two reads of a fast ledger agree
// through FastAsLedger only if it did not change in between, even when it
// went round to the same state, so that FindOrphans' two snapshots are
// exact.
func TestFastLedgerVersionsTellChanges(t *testing.T) {
	v := FastNext(0, FastHeld)
	round := FastNext(FastNext(FastNext(FastNext(v, FastReleasing), FastEmpty), FastAcquiring), FastHeld)
	if round&FastStateMask != FastHeld || FastAsLedger(round) == FastAsLedger(v) {
		t.Fatalf("a full round reads the same: %#x and %#x", FastAsLedger(v), FastAsLedger(round))
	}
	if held, settled := LedgerHolds(FastAsLedger(v)); !settled || held != makeState(writeLocked, 0) {
		t.Fatalf("FastHeld reads as %#x (settled %v), want the write lock, settled", held, settled)
	}
}

// TestUnnotedWriteLockLeavesTheLedger: the fast path's take and release
// change the lock word as TryWriteLockFair and WriteUnlock do, and leave
// the ledger as it was.
func TestUnnotedWriteLockLeavesTheLedger(t *testing.T) {
	word, sleepers := new(uint64), new(uint32)
	l := AtWithSleepers(word, sleepers)
	ledger := new(uint64)
	l.SetLedger(ledger)
	if !l.TryWriteLockUnnoted() || atomic.LoadUint64(word) != uint64(writeLocked) {
		t.Fatalf("TryWriteLockUnnoted on a free lock: word %#x", atomic.LoadUint64(word))
	}
	if l.TryWriteLockUnnoted() {
		t.Fatal("TryWriteLockUnnoted took a held lock")
	}
	if err := l.WriteUnlockUnnoted(); err != nil || atomic.LoadUint64(word) != 0 {
		t.Fatalf("WriteUnlockUnnoted: %v, word %#x", err, atomic.LoadUint64(word))
	}
	if err := l.WriteUnlockUnnoted(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second WriteUnlockUnnoted: %v, want ErrNotHeld", err)
	}
	if *ledger != 0 {
		t.Fatalf("ledger %#x, want it untouched", *ledger)
	}
}
