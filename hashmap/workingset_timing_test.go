//go:build linux

package hashmap

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkPutWorkingSet: where an overwriting Put's time goes, CPU or
// memory. The same 1M-key map and RWMutex map as BenchmarkMap, each Put
// or Set drawing its key at random from the first n keys only, read in
// sequence from a buffer (keys in cache, as BenchmarkMap's keys-in-cache
// rows). With 64 keys every line either store touches stays in the CPU's
// caches, so the time is the work alone; with all 1M nearly every slot and
// entry is a miss to memory. The "lean" map is made without entry
// checksums and undo records and counts nothing: the work the map does for
// damage and crash safety, and what it costs at each size.
//
//	go test -run='^$' -bench=PutWorkingSet -count=5 ./hashmap
func BenchmarkPutWorkingSet(b *testing.B) {
	m, keys := openFilledBenchMap(b)
	lean, err := Open(filepath.Join(b.TempDir(), "lean.map"), &Options{Entries: benchKeys, AverageKeySize: 16, AverageValueSize: 64, NoChecksums: true, NoUndo: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lean.Close() })
	rw := &rwMap{m: make(map[string][]byte, benchKeys)}
	for _, k := range keys {
		if err := lean.Put(k, benchValue); err != nil {
			b.Fatal(err)
		}
		rw.set(k, benchValue)
	}
	lean.counters = nil
	for _, n := range []int{64, 4096, 65536, benchKeys} {
		// The keys in the order they are visited, 16 bytes each.
		ordered := make([]byte, 0, len(benchOrder)*16)
		for _, o := range benchOrder {
			ordered = append(ordered, keys[int(o)%n]...)
		}
		key := func(i int) []byte {
			j := (i & (len(benchOrder) - 1)) * 16
			return ordered[j : j+16 : j+16]
		}
		put := func(m *Map) func(b *testing.B) {
			return func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if err := m.Put(key(i), benchValue); err != nil {
						b.Fatal(err)
					}
					i++
				}
			}
		}
		b.Run(fmt.Sprintf("keys=%d/sharedmap/Put", n), put(m))
		b.Run(fmt.Sprintf("keys=%d/sharedmap-lean/Put", n), put(lean))
		b.Run(fmt.Sprintf("keys=%d/rwmutex-map/Set", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				rw.set(key(i), benchValue)
				i++
			}
		})
	}
}
