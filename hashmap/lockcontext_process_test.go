//go:build linux

package hashmap

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
	"github.com/sharedmap/sharedmap/ipc"
)

func init() {
	// Hold lock 0 until key "release" appears.
	opsRoles["ops-lock-hold"] = func(m *Map, _ []string) error {
		if err := m.Locks().Lock(0); err != nil {
			return err
		}
		testutil.Report("held")
		if !pollKey(m, "release") {
			return errors.New("no release")
		}
		if err := m.Locks().Unlock(0); err != nil {
			return err
		}
		testutil.Report("released")
		return nil
	}
	// Once key "third" appears, Lock(0), say so, and unlock.
	opsRoles["ops-lock-third"] = func(m *Map, _ []string) error {
		if !pollKey(m, "third") {
			return errors.New("no third")
		}
		testutil.Report("queuing")
		if err := m.Locks().LockTimeout(0, 20*time.Second); err != nil {
			return err
		}
		testutil.Report("got")
		time.Sleep(20 * time.Millisecond)
		if err := m.Locks().Unlock(0); err != nil {
			return err
		}
		testutil.Report("unlocked")
		return nil
	}
}

// TestLockContextAcrossProcesses: for every lock algorithm of the lock
// table, a LockContext in this process, queued behind a holder in another
// process, is cancelled; it returns context.Canceled within the bound,
// and when the holder unlocks, a third waiter in a third process, queued
// behind the cancelled one, gets the lock; the lock is free after.
func TestLockContextAcrossProcesses(t *testing.T) {
	for _, alg := range ipc.Algorithms() {
		t.Run(alg.Name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m")
			m := mustOpen(t, path, &Options{Entries: 100, Locks: 1, LockAlgorithm: alg.Name})
			defer m.Close()
			holder := startHelper(t, helperCmd("ops-lock-hold", path))
			holder.expect(t, "held", 10*time.Second)
			third := startHelper(t, helperCmd("ops-lock-third", path))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			first := make(chan error, 1)
			go func() { first <- m.Locks().LockContext(ctx, 0) }()
			time.Sleep(50 * time.Millisecond) // queued
			if err := m.Put([]byte("third"), nil); err != nil {
				t.Fatal(err)
			}
			third.expect(t, "queuing", 10*time.Second)
			time.Sleep(50 * time.Millisecond) // queued behind the first
			start := time.Now()
			cancel()
			if err := <-first; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled LockContext: %v", err)
			}
			if took := time.Since(start); took > 200*time.Millisecond {
				t.Errorf("cancelled LockContext took %v to return", took)
			}
			if err := m.Put([]byte("release"), nil); err != nil {
				t.Fatal(err)
			}
			holder.expect(t, "released", 10*time.Second)
			third.expect(t, "got", 20*time.Second)
			third.expect(t, "unlocked", 10*time.Second)
			if err := m.Locks().LockTimeout(0, 5*time.Second); err != nil {
				t.Fatalf("lock after all that: %v", err)
			}
			if err := m.Locks().Unlock(0); err != nil {
				t.Fatal(err)
			}
			for _, h := range []*helperProc{holder, third} {
				if lines, err := h.rest(); err != nil || len(lines) != 0 {
					t.Fatalf("helper: %v %v", lines, err)
				}
			}
		})
	}
}
