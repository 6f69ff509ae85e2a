//go:build linux

package hashmap

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// 1M keys of 16 bytes with 64-byte values, the map beside a Go map under
// sync.RWMutex (process-local, the floor a shared map is measured against).
// Run: go test -run='^$' -bench=Map -count=6 ./hashmap | benchstat -
const benchKeys = 1 << 20

func benchKey(i int) []byte { return []byte(fmt.Sprintf("key-%012d", i)) } // 16 bytes

// benchOrder is the order keys are visited in: drawn at random beforehand,
// as bench/ does. (A fixed stride would let the CPU's stride prefetcher
// fetch the benchmark's own keys ahead, which no real caller gets.)
var benchOrder = func() []uint32 {
	r := rand.New(rand.NewPCG(1, 2))
	o := make([]uint32, 1<<18)
	for i := range o {
		o[i] = uint32(r.IntN(benchKeys))
	}
	return o
}()

// nextKey returns the i-th key of benchOrder.
func nextKey(keys [][]byte, i int) []byte { return keys[benchOrder[i&(len(benchOrder)-1)]] }

// workerKeys returns nextKey for a new parallel worker: each worker visits
// its own keys (benchOrder shifted by a worker's offset), as goroutines
// serving different callers do. Workers walking the same keys, even far
// apart in the order, would find in the shared cache the lines another
// worker fetched.
func workerKeys(keys [][]byte) func(i int) []byte {
	shift := uint32(workers.Add(1)) * 500009
	return func(i int) []byte { return keys[(benchOrder[i&(len(benchOrder)-1)]+shift)&(benchKeys-1)] }
}

var workers atomic.Uint32

var benchValue = make([]byte, 64)

type rwMap struct {
	mu sync.RWMutex
	m  map[string][]byte
}

func (r *rwMap) get(k []byte) []byte {
	r.mu.RLock()
	v := r.m[string(k)]
	r.mu.RUnlock()
	return v
}

func (r *rwMap) set(k, v []byte) {
	c := append([]byte(nil), v...)
	r.mu.Lock()
	r.m[string(k)] = c
	r.mu.Unlock()
}

// openFilledBenchMap returns the benchmarks' map: benchKeys keys with
// benchValue each, in a file of the benchmark's temp directory, closed when
// the benchmark ends. keys holds the benchKey of every index.
func openFilledBenchMap(b *testing.B) (m *Map, keys [][]byte) {
	keys = make([][]byte, benchKeys)
	for i := range keys {
		keys[i] = benchKey(i)
	}
	m, err := Open(filepath.Join(b.TempDir(), "bench.map"), &Options{Entries: benchKeys, AverageKeySize: 16, AverageValueSize: 64})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	for _, k := range keys {
		if err := m.Put(k, benchValue); err != nil {
			b.Fatal(err)
		}
	}
	return m, keys
}

func BenchmarkMap(b *testing.B) {
	m, keys := openFilledBenchMap(b)
	rw := &rwMap{m: make(map[string][]byte, benchKeys)}
	for _, k := range keys {
		rw.set(k, benchValue)
	}
	getIntoOf := func(m *Map) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 128)
			i := 0
			for b.Loop() {
				if _, err := m.GetInto(buf[:0], nextKey(keys, i)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		}
	}
	getInto := getIntoOf(m)
	b.Run("sharedmap/GetInto", getInto)
	// uncounted runs a benchmark with hit and miss counting off, side by
	// side with the counted one: what the in-file counters cost a lookup.
	uncounted := func(run func(*testing.B)) func(*testing.B) {
		return func(b *testing.B) {
			counters := m.counters
			m.counters = nil
			defer func() { m.counters = counters }()
			run(b)
		}
	}
	b.Run("sharedmap/GetInto-uncounted", uncounted(getInto))
	// The same lookups in a second map, filled alike, mapped with small
	// pages only: what the huge-page advice saves a random Get.
	b.Run("sharedmap/GetInto-small-pages", func(b *testing.B) {
		small, err := Open(filepath.Join(b.TempDir(), "small.map"), &Options{Entries: benchKeys, AverageKeySize: 16, AverageValueSize: 64, NoHugePages: true})
		if err != nil {
			b.Fatal(err)
		}
		defer small.Close()
		for _, k := range keys {
			if err := small.Put(k, benchValue); err != nil {
				b.Fatal(err)
			}
		}
		getIntoOf(small)(b)
	})
	// Batches of 16 keys a call, timed per key: GetMany overlaps the
	// batch's cache misses; the map's best is the 16 lookups under one
	// read lock.
	getMany := func(read func(keys, values [][]byte) error) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			ks, vs := make([][]byte, 16), make([][]byte, 16)
			for i := range vs {
				vs[i] = make([]byte, 0, len(benchValue))
			}
			i := 0
			for b.Loop() {
				for j := range ks {
					ks[j] = nextKey(keys, i)
					i++
				}
				if err := read(ks, vs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i), "ns/key")
		}
	}
	b.Run("sharedmap/GetMany-16", getMany(m.GetMany))
	b.Run("rwmutex-map/GetMany-16", getMany(func(ks, vs [][]byte) error {
		rw.mu.RLock()
		for j, k := range ks {
			vs[j] = append(vs[j][:0], rw.m[string(k)]...)
		}
		rw.mu.RUnlock()
		return nil
	}))
	b.Run("sharedmap/Get", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := m.Get(nextKey(keys, i)); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("rwmutex-map/Get", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if rw.get(nextKey(keys, i)) == nil {
				b.Fatal("missing")
			}
			i++
		}
	})
	// GetInto copies the value out; a Go map's Get hands back a reference
	// and touches no value byte. This variant reads the value the same way
	// GetInto does, for the like-for-like comparison.
	b.Run("rwmutex-map/GetInto", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 128)
		i := 0
		for b.Loop() {
			rw.mu.RLock()
			v, ok := rw.m[string(nextKey(keys, i))]
			buf = append(buf[:0], v...)
			rw.mu.RUnlock()
			if !ok {
				b.Fatal("missing")
			}
			i++
		}
	})
	// Each key chosen by what the lookup before it read (the values are
	// zero bytes, but the CPU cannot know), as in a walk over linked
	// records: no lookup starts before the one before it ends. This is a
	// lookup's latency; the loops above also measure how much of the next
	// lookups the CPU overlaps with each, which favours the shorter code.
	dependent := func(get func(dst, key []byte) []byte) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 128)
			i := 0
			for b.Loop() {
				buf = get(buf[:0], nextKey(keys, i))
				i += 1 + int(buf[0])
			}
		}
	}
	b.Run("sharedmap/GetInto-dependent", dependent(func(dst, key []byte) []byte {
		v, err := m.GetInto(dst, key)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}))
	b.Run("rwmutex-map/GetInto-dependent", dependent(func(dst, key []byte) []byte {
		rw.mu.RLock()
		v := append(dst, rw.m[string(key)]...)
		rw.mu.RUnlock()
		return v
	}))
	b.Run("sharedmap/Put", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := m.Put(nextKey(keys, i), benchValue); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	// Batches of 16 overwrites a call, timed per key: PutMany overlaps the
	// lookups' misses; the map's best is the 16 sets under one lock.
	putMany := func(write func(keys, values [][]byte) error) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			ks, vs := make([][]byte, 16), make([][]byte, 16)
			for i := range vs {
				vs[i] = benchValue
			}
			i := 0
			for b.Loop() {
				for j := range ks {
					ks[j] = nextKey(keys, i)
					i++
				}
				if err := write(ks, vs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i), "ns/key")
		}
	}
	b.Run("sharedmap/PutMany-16", putMany(func(ks, vs [][]byte) error {
		_, err := m.PutMany(ks, vs)
		return err
	}))
	// The control: the same batches, a Put per key (collecting a batch's
	// keys first is itself faster than fetching each key as it is put).
	b.Run("sharedmap/PutLoop-16", putMany(func(ks, vs [][]byte) error {
		for j, k := range ks {
			if err := m.Put(k, vs[j]); err != nil {
				return err
			}
		}
		return nil
	}))
	b.Run("rwmutex-map/SetMany-16", putMany(func(ks, vs [][]byte) error {
		copies := make([][]byte, len(vs))
		for j, v := range vs {
			copies[j] = append([]byte(nil), v...)
		}
		rw.mu.Lock()
		for j, k := range ks {
			rw.m[string(k)] = copies[j]
		}
		rw.mu.Unlock()
		return nil
	}))
	b.Run("rwmutex-map/Set", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			rw.set(nextKey(keys, i), benchValue)
			i++
		}
	})
	// The same four with each key read in sequence from a buffer holding
	// benchOrder's keys in the order they are visited (4 MiB), so that a
	// key is in cache, as one a server has just parsed from a request is.
	// Above, every lookup first pays two misses of the benchmark's own (the
	// key's slice header, then its bytes), alike for both stores, which
	// pull the ratios towards 1 (bench/ measures both ways: -keys). The
	// loops are written out rather than given the key source as a function:
	// an indirect call per iteration took the map's GetInto from about 203
	// to 367 ns (docs/PERFORMANCE.md), which would change what the loops above measure.
	ordered := make([]byte, 0, len(benchOrder)*16)
	for _, o := range benchOrder {
		ordered = append(ordered, keys[o]...)
	}
	cachedKey := func(i int) []byte {
		j := (i & (len(benchOrder) - 1)) * 16
		return ordered[j : j+16 : j+16]
	}
	b.Run("sharedmap/GetInto-keys-in-cache", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 128)
		i := 0
		for b.Loop() {
			if _, err := m.GetInto(buf[:0], cachedKey(i)); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("rwmutex-map/GetInto-keys-in-cache", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 128)
		i := 0
		for b.Loop() {
			rw.mu.RLock()
			v, ok := rw.m[string(cachedKey(i))]
			buf = append(buf[:0], v...)
			rw.mu.RUnlock()
			if !ok {
				b.Fatal("missing")
			}
			i++
		}
	})
	b.Run("sharedmap/Put-keys-in-cache", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := m.Put(cachedKey(i), benchValue); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("rwmutex-map/Set-keys-in-cache", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			rw.set(cachedKey(i), benchValue)
			i++
		}
	})
	// Fill: inserting into a fresh store, the way a cache or an index is
	// first loaded. The Go map is measured as users write it (grown from
	// make(map)) and pre-sized, like this map, which is sized at creation.
	dir := b.TempDir()
	b.Run("sharedmap/Fill", func(b *testing.B) {
		b.ReportAllocs()
		var fresh *Map
		for i := 0; b.Loop(); i++ {
			if i%benchKeys == 0 {
				b.StopTimer()
				if fresh != nil {
					_ = fresh.Close()
				}
				path := filepath.Join(dir, fmt.Sprintf("fill-%d.map", i/benchKeys))
				var err error
				if fresh, err = Open(path, &Options{Entries: benchKeys, AverageKeySize: 16, AverageValueSize: 64}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			if err := fresh.Put(keys[i%benchKeys], benchValue); err != nil {
				b.Fatal(err)
			}
		}
		_ = fresh.Close()
	})
	fill := func(size int) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			var fresh *rwMap
			for i := 0; b.Loop(); i++ {
				if i%benchKeys == 0 {
					b.StopTimer()
					fresh = &rwMap{m: make(map[string][]byte, size)}
					b.StartTimer()
				}
				fresh.set(keys[i%benchKeys], benchValue)
			}
		}
	}
	b.Run("rwmutex-map/Fill", fill(0))
	b.Run("rwmutex-map/Fill-presized", fill(benchKeys))
	getIntoParallel := func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 0, 128)
			key, i := workerKeys(keys), 0
			for pb.Next() {
				_, _ = m.GetInto(buf[:0], key(i))
				i++
			}
		})
	}
	b.Run("sharedmap/GetInto-parallel", getIntoParallel)
	// Goroutines of one process count in the same lines, so on different
	// cores they take turns owning them: what that costs.
	b.Run("sharedmap/GetInto-uncounted-parallel", uncounted(getIntoParallel))
	b.Run("rwmutex-map/Get-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			key, i := workerKeys(keys), 0
			for pb.Next() {
				_ = rw.get(key(i))
				i++
			}
		})
	})
	b.Run("rwmutex-map/GetInto-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 0, 128)
			key, i := workerKeys(keys), 0
			for pb.Next() {
				rw.mu.RLock()
				v := rw.m[string(key(i))]
				buf = append(buf[:0], v...)
				rw.mu.RUnlock()
				i++
			}
		})
	})
	b.Run("sharedmap/Put-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			key, i := workerKeys(keys), 0
			for pb.Next() {
				_ = m.Put(key(i), benchValue)
				i++
			}
		})
	})
	b.Run("rwmutex-map/Set-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			key, i := workerKeys(keys), 0
			for pb.Next() {
				rw.set(key(i), benchValue)
				i++
			}
		})
	})
}
