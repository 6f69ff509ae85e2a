//go:build linux

package hashmap

import (
	"fmt"
	"path/filepath"
	"testing"
)

// Put and Get of large values (stored in parts), with their throughput.
// Run: go test -run='^$' -bench=LargeValue -count=3 ./hashmap
func BenchmarkLargeValue(b *testing.B) {
	for _, size := range []int{1 << 20, 64 << 20} {
		m, err := Open(filepath.Join(b.TempDir(), "large.map"), &Options{Entries: 4096, AverageKeySize: 16, AverageValueSize: 64 << 10})
		if err != nil {
			b.Fatal(err)
		}
		key, v := []byte("large-value-key"), largeValue(size, 1)
		b.Run(fmt.Sprintf("Put/%dMiB", size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if err := m.Put(key, v); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("GetInto/%dMiB", size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			buf := make([]byte, 0, size)
			for b.Loop() {
				if _, err := m.GetInto(buf[:0], key); err != nil {
					b.Fatal(err)
				}
			}
		})
		m.Close()
	}
}
