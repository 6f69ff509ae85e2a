//go:build linux

package hashmap

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkGetOrLoadHit: GetOrLoad of present keys against Get of the same
// keys, in a plain map and a cache map of 64k keys (16-byte keys, 64-byte
// values): a hit takes no token and no lock, so the two should be within
// noise of each other.
// Run: go test -run='^$' -bench=GetOrLoadHit -count=6 ./hashmap | benchstat -
func BenchmarkGetOrLoadHit(b *testing.B) {
	const n = 1 << 16
	for _, cache := range []bool{false, true} {
		m, err := Open(filepath.Join(b.TempDir(), fmt.Sprintf("cache-%v.map", cache)), &Options{Entries: n, AverageKeySize: 16, AverageValueSize: 64, Cache: cache})
		if err != nil {
			b.Fatal(err)
		}
		keys := make([][]byte, n)
		for i := range keys {
			keys[i] = benchKey(i)
			if err := m.Put(keys[i], benchValue); err != nil {
				b.Fatal(err)
			}
		}
		ctx := context.Background()
		load := func(context.Context) ([]byte, error) { return nil, fmt.Errorf("a hit loaded") }
		b.Run(fmt.Sprintf("cache=%v/Get", cache), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := m.Get(keys[benchOrder[i&(len(benchOrder)-1)]&(n-1)]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("cache=%v/GetOrLoad", cache), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := m.GetOrLoad(ctx, keys[benchOrder[i&(len(benchOrder)-1)]&(n-1)], load); err != nil {
					b.Fatal(err)
				}
			}
		})
		_ = m.Close()
	}
}
