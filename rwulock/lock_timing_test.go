package rwulock

import (
	"sync"
	"testing"
)

// Uncontended lock+unlock pairs, the cost every map operation pays, beside
// sync.RWMutex (which is process-local and cannot do what this lock does).
// Run: go test -run=^$ -bench=. -count=6 ./rwulock | benchstat -

func BenchmarkUncontended(b *testing.B) {
	b.Run("rwulock/read", func(b *testing.B) {
		l := AtWithSleepers(new(uint64), new(uint32))
		b.ReportAllocs()
		for b.Loop() {
			if !l.TryReadLock() {
				b.Fatal("refused")
			}
			_ = l.ReadUnlock()
		}
	})
	b.Run("sync.RWMutex/read", func(b *testing.B) {
		var mu sync.RWMutex
		b.ReportAllocs()
		for b.Loop() {
			mu.RLock()
			mu.RUnlock()
		}
	})
	b.Run("rwulock/write", func(b *testing.B) {
		l := AtWithSleepers(new(uint64), new(uint32))
		b.ReportAllocs()
		for b.Loop() {
			if !l.TryWriteLock() {
				b.Fatal("refused")
			}
			_ = l.WriteUnlock()
		}
	})
	b.Run("sync.RWMutex/write", func(b *testing.B) {
		var mu sync.RWMutex
		b.ReportAllocs()
		for b.Loop() {
			mu.Lock()
			mu.Unlock()
		}
	})
	b.Run("rwulock/update+upgrade", func(b *testing.B) {
		l := AtWithSleepers(new(uint64), new(uint32))
		b.ReportAllocs()
		for b.Loop() {
			_ = l.UpdateLock(0)
			_ = l.UpgradeUpdateToWrite(0)
			_ = l.WriteUnlock()
		}
	})
	b.Run("rwulock/timed-write", func(b *testing.B) {
		l := AtWithSleepers(new(uint64), new(uint32))
		b.ReportAllocs()
		for b.Loop() {
			_ = l.WriteLock(1)
			_ = l.WriteUnlock()
		}
	})
}

// Readers on all cores: the lock word is one shared cache line, like the
// reader count of sync.RWMutex.
func BenchmarkParallelRead(b *testing.B) {
	b.Run("rwulock", func(b *testing.B) {
		l := AtWithSleepers(new(uint64), new(uint32))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = l.ReadLock(1e9)
				_ = l.ReadUnlock()
			}
		})
	})
	b.Run("sync.RWMutex", func(b *testing.B) {
		var mu sync.RWMutex
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mu.RLock()
				mu.RUnlock()
			}
		})
	})
}
