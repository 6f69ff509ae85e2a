//go:build linux

package hashmap

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// filledMapFile creates, in a temporary directory of b's, a map of n keys
// of 16 bytes (benchKey) with 64-byte values, sized for n, closes it and
// returns its path and size in bytes.
func filledMapFile(b *testing.B, n int) (string, int64) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "filled.map")
	m, err := Open(path, &Options{Entries: n, AverageKeySize: 16, AverageValueSize: 64})
	if err != nil {
		b.Fatal(err)
	}
	const batch = 256
	keys, values := make([][]byte, 0, batch), make([][]byte, 0, batch)
	for i := range n {
		keys, values = append(keys, benchKey(i)), append(values, benchValue)
		if len(keys) == batch || i == n-1 {
			if _, err := m.PutMany(keys, values); err != nil {
				b.Fatal(err)
			}
			keys, values = keys[:0], values[:0]
		}
	}
	if err := m.Close(); err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return path, st.Size()
}

// BenchmarkCheck: Check of a map of 2M keys (16-byte keys, 64-byte
// values), opened read-only, its file in the page cache and mapped in by a
// first Check before the timing starts. The rate is of the whole file, as
// mapctl check reports it; -cpu=1,2 shows how it grows with the cores.
//
//	go test -run='^$' -bench='^BenchmarkCheck$' -count=5 ./hashmap | benchstat -
func BenchmarkCheck(b *testing.B) {
	path, size := filledMapFile(b, 2<<20)
	m, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Check(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	for b.Loop() {
		problems, err := m.Check()
		if err != nil || len(problems) > 0 {
			b.Fatal(problems, err)
		}
	}
}

// BenchmarkOpenExisting: Open (writable, as a process that uses the map
// does) and Close of an existing map of 256K and of 2M keys (80 and 634
// MiB), its file in the page cache ("warm"), and with its pages dropped
// from the page cache before each Open ("cold", as after a reboot: what
// Open reads of the file comes from the disk). What Open does before it
// returns should not grow with the file: the two sizes should take about
// the same time.
//
//	go test -run='^$' -bench=OpenExisting -count=5 ./hashmap | benchstat -
func BenchmarkOpenExisting(b *testing.B) {
	for _, n := range []int{256 << 10, 2 << 20} {
		path, size := filledMapFile(b, n)
		for _, cold := range []bool{false, true} {
			name := fmt.Sprintf("keys=%dK/warm", n>>10)
			if cold {
				name = fmt.Sprintf("keys=%dK/cold", n>>10)
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					if cold {
						b.StopTimer()
						dropPageCache(b, path)
						b.StartTimer()
					}
					m, err := Open(path, nil)
					if err != nil {
						b.Fatal(err)
					}
					if err := m.Close(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(size)/(1<<20), "file-MiB")
			})
		}
	}
}

// dropPageCache writes the file at path to the disk and asks the kernel
// to drop its pages from the page cache (POSIX_FADV_DONTNEED, which drops
// clean pages not mapped by any process).
func dropPageCache(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
}
