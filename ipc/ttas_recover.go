package ipc

// Recovery of ttas: the lock word names its holder.

import (
	"sync/atomic"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// recoverTTAS releases TTAS locks whose holder's slot is dead: the owner id
// in the word says who holds.
func (a *Arena) recoverTTAS(live func(int) bool, r *Recovery) {
	for i := range a.cfg.Locks {
		word, _ := wait.Halves(&a.lockBody(i)[lWord])
		v := atomic.LoadUint32(word)
		owner := v >> 1
		if v == 0 || owner == ttasOwnerMask || int(owner)-1 >= len(a.journals.all) || live(int(owner)-1) {
			continue
		}
		if atomic.CompareAndSwapUint32(word, v, 0) {
			wait.WakeAll(word)
			r.Owners++
		}
	}
}
