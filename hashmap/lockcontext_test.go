//go:build linux

package hashmap

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestLockContextInProcess: LockContext on a lock another goroutine holds
// gives up with the context's error, promptly on cancel, and leaves the
// lock to the next waiter; an index out of range, and a closed map, are
// errors as for Lock.
func TestLockContextInProcess(t *testing.T) {
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 100, Locks: 2})
	defer m.Close()
	lt := m.Locks()
	if err := lt.Lock(0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := lt.LockContext(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockContext past its deadline: %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() { got <- lt.LockContext(ctx, 0) }()
	time.Sleep(30 * time.Millisecond)
	start := time.Now()
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled LockContext: %v", err)
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("cancelled LockContext took %v", took)
	}
	third := make(chan error, 1)
	go func() { third <- lt.LockContext(context.Background(), 0) }()
	time.Sleep(10 * time.Millisecond)
	if err := lt.Unlock(0); err != nil {
		t.Fatal(err)
	}
	if err := <-third; err != nil {
		t.Fatal(err)
	}
	if err := lt.Unlock(0); err != nil {
		t.Fatal(err)
	}
	if err := lt.LockContext(context.Background(), 5); !errors.Is(err, ErrNoSuchLock) {
		t.Fatalf("LockContext of lock 5 of 2: %v", err)
	}
	m.Close()
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	if err := lt.LockContext(ctx, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("LockContext after Close: %v", err)
	}
}
