//go:build linux

package hashmap

import (
	"bufio"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
	"github.com/sharedmap/sharedmap/ipc"
)

// deadWaitLockTimeout is the maps' LockTimeout in the tests of waits for a
// dead holder's lock: short, so that they run fast.
const deadWaitLockTimeout = 200 * time.Millisecond

// deadWaitSlack is what these tests allow beyond the bound the code
// states, for a loaded 2-core machine, which can stall a process that
// long.
const deadWaitSlack = 500 * time.Millisecond

// TestTryLockGetsADeadHoldersLock: a process that polls a lock of the
// table with TryLock gets it within LockTimeout of the death of its holder
// (SIGKILL), without a new Open, for every algorithm; while the holder
// lives, no TryLock takes it and no recovery pass runs, and once it is
// taken the dead process is no party to it any more.
func TestTryLockGetsADeadHoldersLock(t *testing.T) {
	pollDeadHolder(t, deadWaitLockTimeout, func(l *LockTable, i int) (bool, error) { return l.TryLock(i) })
}

// TestShortLockTimeoutGetsADeadHoldersLock: likewise for a process that
// polls with LockTimeout(i, d), d shorter than the map's LockTimeout: its
// wait ends in ErrTimeout while the holder lives, and the lock is its
// within LockTimeout of the holder's death.
func TestShortLockTimeoutGetsADeadHoldersLock(t *testing.T) {
	pollDeadHolder(t, deadWaitLockTimeout, func(l *LockTable, i int) (bool, error) {
		switch err := l.LockTimeout(i, deadWaitLockTimeout/4); {
		case errors.Is(err, ErrTimeout):
			return false, nil
		case err != nil:
			return false, err
		}
		return true, nil
	})
}

// pollDeadHolder runs, for every algorithm, a helper process that takes
// lock 1 of a map this process has open, then polls the lock with try
// (which reports whether it took it) while the helper lives, and again
// once it has been SIGKILLed: try must take it within bound of the kill.
func pollDeadHolder(t *testing.T, bound time.Duration, try func(l *LockTable, i int) (bool, error)) {
	for _, alg := range ipc.Algorithms() {
		t.Run(alg.Name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m")
			opts := *helperOpts
			opts.Locks, opts.LockAlgorithm, opts.LockTimeout = 2, alg.Name, deadWaitLockTimeout
			m := mustOpen(t, path, &opts)
			defer m.Close()
			cmd := helperCmd("hold-lock", path, "1")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			if !testutil.WaitFor(10*time.Second, func() bool { _, err := m.Get([]byte("held")); return err == nil }) {
				t.Fatal("the helper never took the lock")
			}
			poll := func(until time.Time) (time.Time, bool) {
				for time.Now().Before(until) {
					ok, err := try(m.Locks(), 1)
					if err != nil {
						t.Fatal(err)
					}
					if ok {
						return time.Now(), true
					}
					time.Sleep(100 * time.Microsecond)
				}
				return time.Time{}, false
			}
			passes := m.recoveries.Load()
			if _, ok := poll(time.Now().Add(deadWaitLockTimeout * 3 / 2)); ok {
				t.Fatal("the live holder's lock was taken")
			}
			if n := m.recoveries.Load() - passes; n != 0 {
				t.Fatalf("%d recovery passes while the holder lived", n)
			}
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			died := time.Now()
			at, ok := poll(died.Add(bound + 3*time.Second))
			if !ok {
				t.Fatalf("the dead holder's lock still not taken %v after the kill (LockTimeout %v)", time.Since(died).Round(time.Millisecond), deadWaitLockTimeout)
			}
			took := at.Sub(died)
			t.Logf("%s: the dead holder's lock taken %v after the kill", alg.Name, took.Round(100*time.Microsecond))
			if took > bound+deadWaitSlack {
				t.Errorf("the dead holder's lock taken %v after the kill; the bound is %v", took.Round(time.Millisecond), bound)
			}
			if m.deadParty(2) { // arena lock 2 is the table's lock 1
				t.Error("the dead holder is still a party to the lock after recovery: every look would run a pass")
			}
			if err := m.Locks().Unlock(1); err != nil {
				t.Fatal(err)
			}
			if ok, err := m.Locks().TryLock(1); !ok || err != nil {
				t.Fatalf("TryLock of the lock once free: %v, %v", ok, err)
			}
			if err := m.Locks().Unlock(1); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPutGetsADeadWritersSegment: a writer SIGKILLed halfway through a
// rewrite, holding its segment's write lock with the sequence odd; the
// writes of a process open before the death to three keys of that
// segment, a Compute whose function takes half a LockTimeout and, once it
// waits, two Puts, each succeed within twice LockTimeout (a wait, a
// recovery pass, a second wait), and the waits are counted in
// Stats.LockTimeouts. With QueueWritersLocally too, where the Puts wait
// for the Compute on this process's queue rather than on the lock word,
// and the Compute takes the lock only after their first LockTimeout.
func TestPutGetsADeadWritersSegment(t *testing.T) {
	for _, local := range []bool{false, true} {
		t.Run(fmt.Sprintf("queue-local=%v", local), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m")
			opts := *helperOpts
			opts.LockTimeout, opts.QueueWritersLocally = deadWaitLockTimeout, local
			m := mustOpen(t, path, &opts)
			defer m.Close()
			k := []byte("k")
			if err := m.Put(k, []byte("old-value!")); err != nil { // the helper's value's length: rewritten in place
				t.Fatal(err)
			}
			keys := [][]byte{k}
			seg := m.table.For(keyHash(k)).Index()
			for i := 0; len(keys) < 3; i++ {
				if key := fmt.Appendf(nil, "other-%d", i); m.table.For(keyHash(key)).Index() == seg {
					keys = append(keys, key)
				}
			}
			cmd := helperCmd("hold-write", path)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			said := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					if line, ok := strings.CutPrefix(sc.Text(), "@ "); ok {
						said <- line
						return
					}
				}
				close(said)
			}()
			select {
			case line := <-said:
				if line != "holding" {
					t.Fatalf("helper: %q", line)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the helper never stopped halfway through its rewrite")
			}
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			died := time.Now()
			errs, took := make([]error, len(keys)), make([]time.Duration, len(keys))
			var wg sync.WaitGroup
			for i, key := range keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if i == 0 {
						errs[i] = m.Compute(key, func([]byte, bool) ([]byte, bool) {
							time.Sleep(deadWaitLockTimeout / 2)
							return []byte("survivor"), true
						})
					} else {
						errs[i] = m.Put(key, []byte("survivor"))
					}
					took[i] = time.Since(died)
				}()
				time.Sleep(20 * time.Millisecond) // the Compute waits first
			}
			wg.Wait()
			bound := 2 * deadWaitLockTimeout
			for i := range keys {
				t.Logf("Put %s: %v after %v", keys[i], errs[i], took[i].Round(100*time.Microsecond))
				if errs[i] != nil {
					t.Errorf("Put %s to the dead writer's segment: %v", keys[i], errs[i])
				} else if took[i] > bound+deadWaitSlack {
					t.Errorf("Put %s took %v after the kill; the bound is %v", keys[i], took[i].Round(time.Millisecond), bound)
				}
			}
			if v, err := m.Get(k); err != nil || string(v) != "survivor" {
				t.Errorf("Get = %q, %v; want the survivor's value", v, err)
			}
			if n := m.Stats().LockTimeouts; n == 0 {
				t.Error("Stats.LockTimeouts = 0 after waits that ran out and were recovered")
			}
		})
	}
}

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
