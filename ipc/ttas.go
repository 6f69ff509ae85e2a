package ipc

import (
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// ttas is a test-and-test-and-set word with futex parking: what Chronicle
// Map's segment locks do for exclusive access. It is fast, and unfair: the
// releaser, or any newcomer, can take the lock again before a woken sleeper
// runs. It is here as the baseline FIFO locks are measured against.
//
// The word is 0 when free; else the holder's owner id (its journal slot +
// 1, or ttasOwnerMask in a process without journals) shifted left by one,
// with bit 0 set when someone may sleep on it. A holder that dies is seen
// in the word itself, so recovery needs no journal entry for TTAS.
type ttas struct {
	a    *Arena
	word *uint32
}

// ttasOwnerMask is the largest owner id, kept for "unknown".
const ttasOwnerMask = 1<<31 - 1

func openTTAS(a *Arena, index int) Mutex {
	word, _ := wait.Halves(&a.lockBody(index)[lWord])
	return &ttas{a: a, word: word}
}

func (l *ttas) held() uint32 {
	if l.a.owner == 0 {
		return ttasOwnerMask << 1
	}
	return l.a.owner << 1
}

func (l *ttas) Lock() { _ = l.LockTimeout(-1) }

func (l *ttas) TryLock() bool { return atomic.CompareAndSwapUint32(l.word, 0, l.held()) }

func (l *ttas) LockTimeout(d time.Duration) error { return l.lockWaiting(newWaiter(d)) }

func (l *ttas) lockWaiting(w waiter) error {
	mine := l.held()
	if atomic.CompareAndSwapUint32(l.word, 0, mine) {
		return nil // free: no spin first
	}
	for w.policy.Pause() {
		if atomic.LoadUint32(l.word) == 0 && atomic.CompareAndSwapUint32(l.word, 0, mine) {
			return nil
		}
	}
	for {
		v := atomic.LoadUint32(l.word)
		if v == 0 {
			// Taken as contended: others may still sleep on the word, and
			// only the contended bit makes our unlock wake one of them.
			if atomic.CompareAndSwapUint32(l.word, 0, mine|1) {
				return nil
			}
			continue
		}
		if v&1 == 0 && !atomic.CompareAndSwapUint32(l.word, v, v|1) {
			continue
		}
		nap := w.napUntilDeadline()
		if nap == 0 || w.stopped() {
			return ErrTimeout
		}
		wait.Sleep(l.word, v|1, nap)
	}
}

func (l *ttas) Unlock() error {
	if testHookBetweenStores != nil {
		testHookBetweenStores()
	}
	v := atomic.SwapUint32(l.word, 0)
	if v == 0 {
		return ErrNotLocked
	}
	if v&1 != 0 {
		wait.Wake(l.word, 1)
	}
	return nil
}
