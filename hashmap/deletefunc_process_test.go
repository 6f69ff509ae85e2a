//go:build linux

package hashmap

import "testing"

// dieChosen is the DeleteFunc of TestDeleteFuncDiesAtEveryStepAcrossProcesses.
func dieChosen(k []byte) bool { return k[len(k)-1]%3 == 0 }

func init() {
	dieOps["deletefunc"] = func(m *Map) error {
		_, err := m.DeleteFunc(func(k, _ []byte) bool { return dieChosen(k) })
		return err
	}
}

// TestDeleteFuncDiesAtEveryStepAcrossProcesses: a process killed at any
// step of a DeleteFunc leaves, once the next Open has recovered, every
// entry whole, and gone only if fn chose it.
func TestDeleteFuncDiesAtEveryStepAcrossProcesses(t *testing.T) {
	dieAtEveryStepAcrossProcesses(t, "deletefunc", func(step int, present map[string]bool, _ func([]byte) int) {
		for k, ok := range present {
			if !ok && !dieChosen([]byte(k)) {
				t.Fatalf("step %d: %s, not chosen, is gone", step, k)
			}
		}
	})
}
