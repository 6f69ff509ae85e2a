//go:build linux

package hashmap

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// BenchmarkFill: the time to fill a fresh map with n keys of 16 bytes and
// 64-byte values, given in random order, by a Put per key, by PutMany of
// the whole batch (slice order, lookups overlapped), and by PutAll of the
// whole batch and of batches of 64k keys (as mapctl load stores them).
// ns/key is wall time; cpu-ns/key the process's CPU time (user and
// system, getrusage), which a shared machine disturbs less and which
// counts every goroutine of PutAll's parts.
//
//	go test -run='^$' -bench=Fill -benchtime=1x -count=5 ./hashmap
func BenchmarkFill(b *testing.B) {
	for _, n := range []int{2 << 20, 4 << 20} {
		keys := make([][]byte, n)
		for i, j := range rand.New(rand.NewPCG(1, 2)).Perm(n) {
			keys[i] = benchKey(j)
		}
		values := make([][]byte, n)
		for i := range values {
			values[i] = benchValue
		}
		fills := []struct {
			name string
			fill func(m *Map) error
		}{
			{"Put", func(m *Map) error {
				for i, k := range keys {
					if err := m.Put(k, values[i]); err != nil {
						return err
					}
				}
				return nil
			}},
			{"PutMany", func(m *Map) error { _, err := m.PutMany(keys, values); return err }},
			{"PutAll", func(m *Map) error { _, _, err := m.PutAll(keys, values); return err }},
			{"PutAll-64k", func(m *Map) error {
				for lo := 0; lo < n; lo += 64 << 10 {
					hi := min(lo+64<<10, n)
					if _, _, err := m.PutAll(keys[lo:hi], values[lo:hi]); err != nil {
						return err
					}
				}
				return nil
			}},
		}
		for _, f := range fills {
			b.Run(fmt.Sprintf("keys=%d/%s", n, f.name), func(b *testing.B) {
				var wall, cpu time.Duration
				for i := 0; b.Loop(); i++ {
					b.StopTimer()
					m, err := Open(filepath.Join(b.TempDir(), fmt.Sprintf("fill%d.map", i)), &Options{Entries: n, AverageKeySize: 16, AverageValueSize: 64})
					if err != nil {
						b.Fatal(err)
					}
					c0, t0 := cpuTime(), time.Now()
					b.StartTimer()
					err = f.fill(m)
					b.StopTimer()
					wall, cpu = wall+time.Since(t0), cpu+cpuTime()-c0
					if err != nil {
						b.Fatal(err)
					}
					if m.Len() != n {
						b.Fatalf("Len %d after filling %d keys", m.Len(), n)
					}
					_ = m.Close()
					b.StartTimer()
				}
				b.ReportMetric(float64(wall.Nanoseconds())/float64(b.N*n), "ns/key")
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/key")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPutAllBatch: PutAll of batches of n random keys of the 1M-key
// map of BenchmarkMap, overwriting. Run with -cpu=1,2: at one CPU PutAll
// stores every batch on the caller's goroutine, at two it splits batches
// of 2*putAllParallel keys or more, which shows what the split gains at
// each size, and so where putAllParallel should lie.
//
//	go test -run='^$' -bench=PutAllBatch -cpu=1,2 -count=5 ./hashmap
func BenchmarkPutAllBatch(b *testing.B) {
	m, keys := openFilledBenchMap(b)
	for _, n := range []int{4 << 10, 16 << 10, 32 << 10, 64 << 10} {
		batch := make([][]byte, n)
		values := make([][]byte, n)
		for i := range values {
			values[i] = benchValue
		}
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(3, 4))
			for b.Loop() {
				b.StopTimer()
				for i := range batch {
					batch[i] = keys[r.IntN(len(keys))]
				}
				b.StartTimer()
				if _, _, err := m.PutAll(batch, values); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
			b.ReportMetric(0, "ns/op")
		})
	}
}
