//go:build linux

package hashmap

import (
	"path/filepath"
	"testing"
)

// BenchmarkGrownMap: Get and Put (a rewrite) of benchKeys keys in a map
// created for them, side by side with maps created for a quarter and a
// sixteenth of them that grew to hold them all, and with the latter
// rewritten by Resize. A grown map keeps the segments it was created
// with, so each chains more tiers; this measures what a lookup pays for
// that, and what Resize gives back.
// Run: go test -run='^$' -bench=GrownMap -count=6 ./hashmap | benchstat -
func BenchmarkGrownMap(b *testing.B) {
	keys := make([][]byte, benchKeys)
	for i := range keys {
		keys[i] = benchKey(i)
	}
	for _, c := range []struct {
		name     string
		entries  int
		resize   bool
		noSplits bool // made as before splits: its chains grow instead
	}{{"created", benchKeys, false, false}, {"grown-4x", benchKeys / 4, false, false}, {"grown-16x", benchKeys / 16, false, false},
		{"grown-16x-nosplits", benchKeys / 16, false, true}, {"grown-16x-resized", benchKeys / 16, true, false}} {
		path := filepath.Join(b.TempDir(), c.name)
		m, err := Open(path, &Options{Entries: c.entries, AverageKeySize: 16, AverageValueSize: 64, NoSplits: c.noSplits})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := m.PutAll(keys, repeatValue(len(keys))); err != nil {
			b.Fatal(err)
		}
		if c.resize {
			m.Close()
			res, err := Resize(path, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("%s: Resize of %d entries took %v", c.name, res.Entries, res.Took)
			if m, err = Open(path, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(c.name+"/Get", func(b *testing.B) {
			buf := make([]byte, 0, 128)
			i := 0
			for b.Loop() {
				if _, err := m.GetInto(buf[:0], nextKey(keys, i)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(c.name+"/Put", func(b *testing.B) {
			i := 0
			for b.Loop() {
				if err := m.Put(nextKey(keys, i), benchValue); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		st := m.Stats()
		b.Logf("%s: %d segments, %d tiers in use, %d growth steps", c.name, st.Segments, st.TiersInUse, st.GrowthSteps)
		m.Close()
	}
}

// repeatValue is n references to benchValue.
func repeatValue(n int) [][]byte {
	v := make([][]byte, n)
	for i := range v {
		v[i] = benchValue
	}
	return v
}

// BenchmarkGrownMapInsert: Puts of keys not in the map, after benchKeys
// keys, in a map created for them and in maps created for a sixteenth and
// a hundredth of them that grew to hold them all. Each insert of a key a
// grown map lacks looks through the key's whole chain, then looks for a
// tier with room, where every tier but the last few is full: this
// measures what the second walk costs, which Segment.firstFit's room hint
// is for.
// Run: go test -run='^$' -bench=GrownMapInsert -count=6 ./hashmap | benchstat -
func BenchmarkGrownMapInsert(b *testing.B) {
	keys := make([][]byte, benchKeys)
	for i := range keys {
		keys[i] = benchKey(i)
	}
	for _, c := range []struct {
		name    string
		entries int
	}{{"created", benchKeys}, {"grown-16x", benchKeys / 16}, {"grown-100x", benchKeys / 100}} {
		m, err := Open(filepath.Join(b.TempDir(), c.name), &Options{Entries: c.entries, AverageKeySize: 16, AverageValueSize: 64})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := m.PutAll(keys, repeatValue(len(keys))); err != nil {
			b.Fatal(err)
		}
		next := benchKeys // fresh keys continue where the fill stopped, across the runs of -count
		b.Run(c.name, func(b *testing.B) {
			key := make([]byte, 0, 32)
			for b.Loop() {
				key = appendBenchKey(key[:0], next)
				if err := m.Put(key, benchValue); err != nil {
					b.Fatal(err)
				}
				next++
			}
		})
		st := m.Stats()
		b.Logf("%s: %d segments, %d tiers in use, %d growth steps, %d keys", c.name, st.Segments, st.TiersInUse, st.GrowthSteps, next)
		m.Close()
	}
}

// appendBenchKey appends benchKey(i) to dst, without fmt's cost in the
// loop it times.
func appendBenchKey(dst []byte, i int) []byte {
	dst = append(dst, "key-"...)
	var d [12]byte
	for j := len(d) - 1; j >= 0; j-- {
		d[j] = byte('0' + i%10)
		i /= 10
	}
	return append(dst, d[:]...)
}
