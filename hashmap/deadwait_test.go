package hashmap

import (
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestLockTimeoutsCountsWaitsThatRanOut: Stats.LockTimeouts counts each
// operation whose wait for its segment's lock ran out LockTimeout, once:
// one that then ended in ErrTimeout (a live holder's lock, after the
// recovery pass and the second wait) as one that the recovery pass let
// in (a dead holder's lock). Two Maps on one file stand for two processes.
func TestLockTimeoutsCountsWaitsThatRanOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	opts := &Options{Entries: 4096, AverageKeySize: 8, AverageValueSize: 8, Segments: 4, LockTimeout: 50 * time.Millisecond}
	a := mustOpen(t, path, opts)
	defer a.Close()
	b := mustOpen(t, path, opts)
	k := []byte("k")
	if err := b.table.For(keyHash(k)).Lock().WriteLock(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := a.Put(k, []byte("v")); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Put while a live process holds the lock: %v, want ErrTimeout", err)
	}
	if n := a.Stats().LockTimeouts; n != 1 {
		t.Fatalf("LockTimeouts = %d after one Put that timed out; want 1", n)
	}
	b.file.Close() // dies holding the write lock
	if err := a.Put(k, []byte("v")); err != nil {
		t.Fatalf("Put after the holder died: %v", err)
	}
	if n := a.Stats().LockTimeouts; n != 2 {
		t.Fatalf("LockTimeouts = %d after a Put whose wait ran out and was recovered; want 2", n)
	}
	if err := a.Put(k, []byte("w")); err != nil {
		t.Fatal(err)
	}
	if n := a.Stats().LockTimeouts; n != 2 {
		t.Fatalf("LockTimeouts = %d after a Put that did not wait; want 2", n)
	}
}
