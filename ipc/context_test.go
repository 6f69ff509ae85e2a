//go:build linux

package ipc

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// cancelBound is how long a cancelled LockContext may take to return in
// these tests: cancelNap and a wake-up, with room for a loaded machine.
const cancelBound = 100 * time.Millisecond

// TestLockContextCancelledWhileQueued: for every algorithm, a LockContext
// queued behind a holder returns context.Canceled promptly once its
// context is cancelled (however long it has slept), or
// context.DeadlineExceeded at its deadline, holding nothing; a third
// waiter that queued behind it still gets the lock once the holder lets
// go, and the lock is free after. Without the context reaching the wait,
// the cancelled waiter would sleep on until the holder let go; without
// its turn passed on, a FIFO lock would hand over to nobody and the third
// waiter would wait for good.
func TestLockContextCancelledWhileQueued(t *testing.T) {
	for _, algo := range allAlgorithms {
		for _, how := range []string{"cancel", "deadline"} {
			t.Run(algo+"/"+how, func(t *testing.T) {
				a, _ := newJournaledArena(t, 1, nil, nil)
				defer a.Close()
				holder, _ := a.Mutex(algo, 0)
				holder.Lock()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if how == "deadline" {
					ctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
					defer cancel()
				}
				first := make(chan error, 1)
				var gaveUp atomic.Int64
				go func() {
					w, _ := a.Mutex(algo, 0)
					err := LockContext(ctx, w)
					gaveUp.Store(time.Now().UnixNano())
					first <- err
				}()
				time.Sleep(50 * time.Millisecond) // queued, and asleep
				third := make(chan error, 1)
				go func() {
					w, _ := a.Mutex(algo, 0)
					third <- w.LockTimeout(10 * time.Second)
				}()
				time.Sleep(30 * time.Millisecond)
				start := time.Now()
				want := context.DeadlineExceeded
				if how == "cancel" {
					cancel()
					want = context.Canceled
				}
				var err error
				select {
				case err = <-first:
				case <-time.After(5 * time.Second):
					t.Fatal("LockContext did not return after its context ended")
				}
				if !errors.Is(err, want) {
					t.Fatalf("LockContext: %v, want %v", err, want)
				}
				if how == "cancel" {
					if took := time.Duration(gaveUp.Load() - start.UnixNano()); took > cancelBound {
						t.Errorf("LockContext took %v to see its cancellation", took)
					}
				}
				select {
				case err := <-third:
					t.Fatalf("the third waiter returned (%v) while the holder holds the lock", err)
				default:
				}
				if err := holder.Unlock(); err != nil {
					t.Fatal(err)
				}
				if err := <-third; err != nil {
					t.Fatalf("the third waiter after the holder let go: %v", err)
				}
				if holder.TryLock() {
					t.Fatal("TryLock succeeded while the third waiter holds the lock")
				}
				if err := holder.Unlock(); err != nil { // any goroutine of the process may unlock
					t.Fatal(err)
				}
				if err := holder.LockTimeout(5 * time.Second); err != nil {
					t.Fatalf("lock after all that: %v", err)
				}
				_ = holder.Unlock()
			})
		}
	}
}

// TestLockContextDoneOrFree: a context already done fails at once, even on
// a free lock; one that never ends waits as Lock; and a free lock is taken
// under a live context.
func TestLockContextDoneOrFree(t *testing.T) {
	for _, algo := range allAlgorithms {
		t.Run(algo, func(t *testing.T) {
			a, _ := newJournaledArena(t, 1, nil, nil)
			defer a.Close()
			m, _ := a.Mutex(algo, 0)
			done, cancel := context.WithCancel(context.Background())
			cancel()
			if err := LockContext(done, m); !errors.Is(err, context.Canceled) {
				t.Fatalf("LockContext with a done context: %v", err)
			}
			if err := LockContext(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			_ = m.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := LockContext(ctx, m); err != nil {
				t.Fatal(err)
			}
			if err := m.Unlock(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLockContextChurnExcludes: goroutines whose LockContexts are cancelled
// at random moments, some as the lock is handed to them, never hold the
// lock two at a time, every call ends, and the lock is free at the end:
// a grant that raced the cancellation is either returned (nil) or passed
// on, never kept.
func TestLockContextChurnExcludes(t *testing.T) {
	for _, algo := range allAlgorithms {
		t.Run(algo, func(t *testing.T) {
			a, _ := newJournaledArena(t, 1, nil, nil)
			defer a.Close()
			var inside, sections, cancelled atomic.Int32
			var wg sync.WaitGroup
			deadline := time.Now().Add(300 * time.Millisecond)
			for g := range 5 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 3))
					m, _ := a.Mutex(algo, 0)
					for time.Now().Before(deadline) {
						ctx, cancel := context.WithCancel(context.Background())
						timer := time.AfterFunc(time.Duration(rng.IntN(400))*time.Microsecond, cancel)
						err := LockContext(ctx, m)
						timer.Stop()
						cancel()
						if err != nil {
							if !errors.Is(err, context.Canceled) {
								t.Error(err)
							}
							cancelled.Add(1)
							continue
						}
						if inside.Add(1) != 1 {
							t.Error("two holders")
						}
						time.Sleep(100 * time.Microsecond)
						inside.Add(-1)
						sections.Add(1)
						if err := m.Unlock(); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			m, _ := a.Mutex(algo, 0)
			if err := m.LockTimeout(5 * time.Second); err != nil {
				t.Fatalf("lock after the churn (%d sections, %d cancelled): %v", sections.Load(), cancelled.Load(), err)
			}
			_ = m.Unlock()
			if cancelled.Load() == 0 {
				t.Error("no LockContext was cancelled: the test lost its point")
			}
			t.Logf("%d critical sections, %d cancelled", sections.Load(), cancelled.Load())
		})
	}
}
