//go:build linux

package hashmap

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// openLeaky opens a map that is closed only if the test passed: a call
// stuck inside it would make Close wait for good.
func openLeaky(t *testing.T, o *Options) *Map {
	m, err := Open(filepath.Join(t.TempDir(), "m"), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_ = m.Close()
		}
	})
	return m
}

// TestQueuedComputeWritingItsSegmentTimesOut: with QueueWritersLocally, a
// Compute whose function writes to its own segment gets ErrTimeout there,
// as without the option and as Compute's doc says. It waited for itself on
// the local queue's mutex for good, and Close after it.
func TestQueuedComputeWritingItsSegmentTimesOut(t *testing.T) {
	m := openLeaky(t, &Options{Entries: 100, Segments: 1, LockTimeout: 200 * time.Millisecond, QueueWritersLocally: true})
	k := []byte("k")
	done := make(chan error, 1)
	var inner error
	go func() {
		done <- m.Compute(k, func(old []byte, found bool) ([]byte, bool) {
			inner = m.Put(k, []byte("inner"))
			return []byte("outer"), true
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(inner, ErrTimeout) || err != nil {
			t.Fatalf("inner %v, outer %v", inner, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a Compute whose function Puts to its own segment still waits after 5s (LockTimeout 200ms)")
	}
}

// TestQueuedWritersTimeOut: with QueueWritersLocally, each of this
// process's writers waiting for a segment lock another process keeps gives
// up with ErrTimeout within twice LockTimeout, as Options.LockTimeout says;
// the k-th in the local queue gave up after about 2k LockTimeouts. The
// other process is stood in for by taking the segment's lock word directly.
func TestQueuedWritersTimeOut(t *testing.T) {
	const lt = 200 * time.Millisecond
	m := openLeaky(t, &Options{Entries: 100, Segments: 1, LockTimeout: lt, QueueWritersLocally: true})
	lock := m.table.Segment(0).Lock()
	if err := lock.UpdateLock(time.Second); err != nil {
		t.Fatal(err)
	}
	defer lock.UpdateUnlock()
	var wg sync.WaitGroup
	took := make([]time.Duration, 4)
	errs := make([]error, 4)
	start := time.Now()
	for i := range took {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.Put([]byte{byte('a' + i)}, []byte("v"))
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i := range took {
		t.Logf("writer %d: %v after %v", i, errs[i], took[i].Round(time.Millisecond))
		if !errors.Is(errs[i], ErrTimeout) {
			t.Errorf("writer %d: %v, want ErrTimeout", i, errs[i])
		}
		if took[i] > 2*lt+300*time.Millisecond {
			t.Errorf("writer %d gave up after %v: LockTimeout %v promises at most twice that", i, took[i].Round(time.Millisecond), lt)
		}
	}
}
