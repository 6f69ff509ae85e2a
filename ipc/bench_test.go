//go:build linux

package ipc

import "testing"

// BenchmarkLockUnlock measures one goroutine's Lock and Unlock of a free
// lock, with and without episode journals, side by side: the journal's
// cost is the stores to this process's own entry.
func BenchmarkLockUnlock(b *testing.B) {
	for _, algo := range []string{"hapax-cr", "hapax", "tidex", "ticket-awn", "alock", "ttas"} {
		for _, journaled := range []bool{false, true} {
			name := algo + "/plain"
			if journaled {
				name = algo + "/journal"
			}
			b.Run(name, func(b *testing.B) {
				path := createTestFile(b, Config{Locks: 1})
				tf := openTestFile(b, path)
				defer tf.close()
				if journaled {
					if err := tf.arena.SetJournals(tf.journals(), 0); err != nil {
						b.Fatal(err)
					}
				}
				m := tf.mutex(b, algo, 0)
				b.ReportAllocs()
				for b.Loop() {
					m.Lock()
					_ = m.Unlock()
				}
			})
		}
	}
}
