//go:build linux

package typed

import (
	"fmt"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// Maps of 100k entries (16-byte string keys or 8-byte int keys, 64-byte
// values), created in b.TempDir. Each typed benchmark has the raw
// hashmap call it wraps next to it (BenchmarkRaw...), so the cost of the
// typed layer is the difference. Allocations are the point: see
// TestAllocs for the same counts as a test.
// Run: go test -run='^$' -bench=. -count=6 ./typed | benchstat -
const benchEntries = 100_000

// benchStep walks the keys in a scattered order, as real lookups do,
// rather than in insertion order; it is prime, so every key is visited.
const benchStep = 7919

func openBench(b *testing.B) *hashmap.Map {
	b.Helper()
	return openRaw(b, benchEntries)
}

func benchKey(i int) string { return fmt.Sprintf("key-%012d", i) } // 16 bytes

var benchString = string(make([]byte, 64))

// fill stores benchEntries entries through m, key(i) -> value(i).
func fill[K, V any](b *testing.B, m *Map[K, V], key func(int) K, value func(int) V) {
	b.Helper()
	for i := range benchEntries {
		if err := m.Put(key(i), value(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// benchGet times Get over the filled map.
func benchGet[K, V any](b *testing.B, m *Map[K, V], keys []K) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := m.Get(keys[i%len(keys)]); err != nil {
			b.Fatal(err)
		}
		i += benchStep
	}
}

// benchPut times Put (replacing) over the filled map.
func benchPut[K, V any](b *testing.B, m *Map[K, V], keys []K, v V) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := m.Put(keys[i%len(keys)], v); err != nil {
			b.Fatal(err)
		}
		i += benchStep
	}
}

func intKeys() []int64 {
	keys := make([]int64, benchEntries)
	for i := range keys {
		keys[i] = int64(i)
	}
	return keys
}

func stringKeys() []string {
	keys := make([]string, benchEntries)
	for i := range keys {
		keys[i] = benchKey(i)
	}
	return keys
}

func intMap(b *testing.B) (*Map[int64, int64], []int64) {
	m := New(openBench(b), Int64(), Int64())
	fill(b, m, func(i int) int64 { return int64(i) }, func(i int) int64 { return int64(i) })
	return m, intKeys()
}

func stringMap(b *testing.B) (*Map[string, string], []string) {
	m := New(openBench(b), String(), String())
	fill(b, m, benchKey, func(int) string { return benchString })
	return m, stringKeys()
}

func BenchmarkGetInt64(b *testing.B) {
	m, keys := intMap(b)
	benchGet(b, m, keys)
}

// BenchmarkGetManyInt64 reads batches of 16 keys through GetMany, beside
// BenchmarkGetInt64's one at a time; ns/key is per key.
func BenchmarkGetManyInt64(b *testing.B) {
	m, keys := intMap(b)
	const batch = 16
	batchKeys, values, found := make([]int64, batch), make([]int64, batch), make([]bool, batch)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		for j := range batchKeys {
			batchKeys[j] = keys[i%len(keys)]
			i += benchStep
		}
		if err := m.GetMany(batchKeys, values, found); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/key")
}

func BenchmarkPutInt64(b *testing.B) {
	m, keys := intMap(b)
	benchPut(b, m, keys, 42)
}

func BenchmarkGetString(b *testing.B) {
	m, keys := stringMap(b)
	benchGet(b, m, keys)
}

func BenchmarkPutString(b *testing.B) {
	m, keys := stringMap(b)
	benchPut(b, m, keys, benchString)
}

func BenchmarkGetBytes(b *testing.B) {
	m := New(openBench(b), String(), Bytes())
	fill(b, m, benchKey, func(int) []byte { return []byte(benchString) })
	benchGet(b, m, stringKeys())
}

func BenchmarkPutBytes(b *testing.B) {
	m := New(openBench(b), String(), Bytes())
	fill(b, m, benchKey, func(int) []byte { return []byte(benchString) })
	benchPut(b, m, stringKeys(), []byte(benchString))
}

// benchRecord encodes to about 64 bytes of JSON, like the other values.
var benchRecord = record{Name: "ada lovelace", Age: 36, Tags: []string{"math", "engines"}, Score: 0.5}

func jsonMap(b *testing.B) (*Map[string, record], []string) {
	m := New(openBench(b), String(), JSON[record]())
	fill(b, m, benchKey, func(int) record { return benchRecord })
	return m, stringKeys()
}

func BenchmarkGetJSON(b *testing.B) {
	m, keys := jsonMap(b)
	benchGet(b, m, keys)
}

func BenchmarkPutJSON(b *testing.B) {
	m, keys := jsonMap(b)
	benchPut(b, m, keys, benchRecord)
}

var benchTime = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func timeMap(b *testing.B) (*Map[int64, time.Time], []int64) {
	m := New(openBench(b), Int64(), Binary[time.Time]())
	fill(b, m, func(i int) int64 { return int64(i) }, func(int) time.Time { return benchTime })
	return m, intKeys()
}

// BenchmarkGetBinary and BenchmarkPutBinary use time.Time, whose
// AppendBinary lets Put write into the pooled buffer.
func BenchmarkGetBinary(b *testing.B) {
	m, keys := timeMap(b)
	benchGet(b, m, keys)
}

func BenchmarkPutBinary(b *testing.B) {
	m, keys := timeMap(b)
	benchPut(b, m, keys, benchTime)
}

func BenchmarkComputeInt64(b *testing.B) {
	m, keys := intMap(b)
	b.ReportAllocs()
	incr := func(old int64, found bool) (int64, bool) { return old + 1, true }
	i := 0
	for b.Loop() {
		if err := m.Compute(keys[i%len(keys)], incr); err != nil {
			b.Fatal(err)
		}
		i += benchStep
	}
}

// BenchmarkRangeInt64 counts one entry as one op (a full pass is 100k
// ops), so ns/op and allocs/op are per entry yielded.
func BenchmarkRangeInt64(b *testing.B) {
	m, _ := intMap(b)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; {
		var err error
		for range m.Range(&err) {
			if n++; n == b.N {
				break
			}
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawGetInto and BenchmarkRawPut are the floor: the hashmap calls
// the typed Get and Put of int64s make, with encoded keys ready.
func BenchmarkRawGetInto(b *testing.B) {
	m, keys := intMap(b)
	raw := m.Unwrap()
	enc := make([][]byte, len(keys))
	for i, k := range keys {
		enc[i], _ = Int64().Append(nil, k)
	}
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := raw.GetInto(buf[:0], enc[i%len(enc)]); err != nil {
			b.Fatal(err)
		}
		i += benchStep
	}
}

func BenchmarkRawPut(b *testing.B) {
	m, keys := intMap(b)
	raw := m.Unwrap()
	enc := make([][]byte, len(keys))
	for i, k := range keys {
		enc[i], _ = Int64().Append(nil, k)
	}
	val, _ := Int64().Append(nil, 42)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := raw.Put(enc[i%len(enc)], val); err != nil {
			b.Fatal(err)
		}
		i += benchStep
	}
}

// BenchmarkRawRange is BenchmarkRangeInt64 without decoding.
func BenchmarkRawRange(b *testing.B) {
	m, _ := intMap(b)
	raw := m.Unwrap()
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; {
		var err error
		for range raw.Range(&err) {
			if n++; n == b.N {
				break
			}
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// profile is a value that is expensive to decode: JSON with nested fields.
type profile struct {
	ID      int64             `json:"id"`
	Name    string            `json:"name"`
	Email   string            `json:"email"`
	Tags    []string          `json:"tags"`
	Scores  []float64         `json:"scores"`
	Attrs   map[string]string `json:"attrs"`
	Created time.Time         `json:"created"`
}

// BenchmarkNearCache: Get of JSON values over 10k keys (all fit the
// near-cache), without and with the near-cache, side by side; the ratio is
// what the near-cache buys when decoding dominates.
func BenchmarkNearCache(b *testing.B) {
	const keys = 10_000
	v := profile{ID: 42, Name: "Ada Lovelace", Email: "ada@example.com",
		Tags: []string{"math", "engines", "poetry", "notes"}, Scores: []float64{1.5, 2.25, 3.125, 4, 5, 6, 7, 8},
		Attrs: map[string]string{"lang": "en", "tz": "UTC", "plan": "pro"}, Created: time.Unix(1_700_000_000, 0).UTC()}
	names := make([]string, keys)
	for i := range names {
		names[i] = benchKey(i)
	}
	for _, near := range []bool{false, true} {
		name := "direct"
		if near {
			name = "near"
		}
		b.Run(name, func(b *testing.B) {
			raw := openRaw(b, keys)
			m := New(raw, String(), JSON[profile]())
			if near {
				var err error
				if m, err = NewCached(raw, String(), JSON[profile](), keys); err != nil {
					b.Fatal(err)
				}
				defer m.Close()
			}
			for _, k := range names {
				if err := m.Put(k, v); err != nil {
					b.Fatal(err)
				}
			}
			for _, k := range names { // fill the near-cache
				if _, err := m.Get(k); err != nil {
					b.Fatal(err)
				}
			}
			time.Sleep(10 * time.Millisecond) // ristretto applies Sets in the background
			benchGet(b, m, names)
		})
	}
}
