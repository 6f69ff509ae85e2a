package rwulock

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// occupancy counts who is inside the lock and records exclusion violations.
type occupancy struct {
	readers, updaters, writers atomic.Int64
	violations                 atomic.Int64
}

func (o *occupancy) check(t testing.TB, what string) {
	r, u, w := o.readers.Load(), o.updaters.Load(), o.writers.Load()
	if w > 1 || (w == 1 && (r > 0 || u > 0)) || u > 1 {
		o.violations.Add(1)
		t.Errorf("%s: readers=%d updaters=%d writers=%d inside at once", what, r, u, w)
	}
}

// TestStressInProcess runs readers, updaters (some upgrading) and writers on
// one heap word. Writers bump a plain int: under -race, a missing
// happens-before edge between a release and the next acquisition is
// reported, and a lost update shows in the final count.
func TestStressInProcess(t *testing.T) {
	for _, sleepers := range []bool{true, false} {
		w := new(uint64)
		l := At(w)
		if sleepers {
			l = AtWithSleepers(w, new(uint32))
		}
		var o occupancy
		plain := 0 // guarded by the write lock
		var writes atomic.Int64
		const goroutines, iters = 8, 2000
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 42))
				for range iters {
					switch op := rng.IntN(10); {
					case op < 6:
						if err := l.ReadLock(10 * time.Second); err != nil {
							t.Error(err)
							return
						}
						o.readers.Add(1)
						o.check(t, "read")
						_ = plain
						o.readers.Add(-1)
						if err := l.ReadUnlock(); err != nil {
							t.Error(err)
						}
					case op < 8:
						if err := l.UpdateLock(10 * time.Second); err != nil {
							t.Error(err)
							return
						}
						o.updaters.Add(1)
						o.check(t, "update")
						if op == 7 {
							o.updaters.Add(-1)
							if err := l.UpgradeUpdateToWrite(10 * time.Second); err != nil {
								t.Error(err)
								return
							}
							o.writers.Add(1)
							o.check(t, "upgrade")
							plain++
							writes.Add(1)
							o.writers.Add(-1)
							if err := l.DowngradeWriteToUpdate(); err != nil {
								t.Error(err)
							}
							o.updaters.Add(1)
						}
						o.updaters.Add(-1)
						if err := l.UpdateUnlock(); err != nil {
							t.Error(err)
						}
					default:
						if err := l.WriteLock(10 * time.Second); err != nil {
							t.Error(err)
							return
						}
						o.writers.Add(1)
						o.check(t, "write")
						plain++
						writes.Add(1)
						o.writers.Add(-1)
						if err := l.WriteUnlock(); err != nil {
							t.Error(err)
						}
					}
				}
			}()
		}
		wg.Wait()
		if int64(plain) != writes.Load() {
			t.Fatalf("lost updates: plain counter %d, writes %d", plain, writes.Load())
		}
		if st := l.State(); !st.Free() {
			t.Fatalf("lock not free after the run: %v", st)
		}
	}
}
