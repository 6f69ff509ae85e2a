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
)

// deadWaitLockTimeout is the maps' LockTimeout in the tests of waits for a
// dead holder's lock: short, so that they run fast.
const deadWaitLockTimeout = 200 * time.Millisecond

// deadWaitSlack is what these tests allow beyond the bound the code
// states, for a loaded 2-core machine, which can stall a process that
// long.
const deadWaitSlack = 500 * time.Millisecond

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
