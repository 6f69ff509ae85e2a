package hashmap

import (
	"path/filepath"
	"testing"
)

func BenchmarkZZPut1K(b *testing.B) {
	const n = 100000
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = benchKey(i)
	}
	val := make([]byte, 1024)
	m, err := Open(filepath.Join(b.TempDir(), "b.map"), &Options{Entries: n, AverageKeySize: 16, AverageValueSize: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	for _, k := range keys {
		if err := m.Put(k, val); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if err := m.Put(keys[benchOrder[i&(len(benchOrder)-1)]%n], val); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
