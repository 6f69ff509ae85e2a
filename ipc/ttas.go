package ipc

import (
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// ttas is a test-and-test-and-set word with futex parking, in Drepper's
// three states (0 free, 1 held, 2 held and someone may sleep): what
// Chronicle Map's segment locks do for exclusive access. It is fast, and
// unfair: the releaser, or any newcomer, can take the lock again before a
// woken sleeper runs. It is here as the baseline FIFO locks are measured
// against.
type ttas struct {
	word *uint32
}

func openTTAS(a *Arena, index int) Mutex {
	word, _ := wait.Halves(&a.lockBody(index)[lWord])
	return &ttas{word: word}
}

func (l *ttas) Lock() { _ = l.LockTimeout(-1) }

func (l *ttas) TryLock() bool { return atomic.CompareAndSwapUint32(l.word, 0, 1) }

func (l *ttas) LockTimeout(d time.Duration) error {
	w := newWaiter(d)
	for w.policy.Pause() {
		if atomic.LoadUint32(l.word) == 0 && atomic.CompareAndSwapUint32(l.word, 0, 1) {
			return nil
		}
	}
	for atomic.SwapUint32(l.word, 2) != 0 {
		nap := w.policy.Nap(w.deadline)
		if nap == 0 {
			return ErrTimeout
		}
		wait.Sleep(l.word, 2, nap)
	}
	return nil
}

func (l *ttas) Unlock() error {
	switch atomic.SwapUint32(l.word, 0) {
	case 0:
		return ErrNotLocked
	case 2:
		wait.Wake(l.word, 1)
	}
	return nil
}
