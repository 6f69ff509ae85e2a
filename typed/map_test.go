//go:build linux

package typed

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// openStringCounts opens a fresh map and two typed views of it, string
// keys to int64 values: plain, and with a near cache (closed when the test
// ends).
func openStringCounts(t *testing.T) (raw *hashmap.Map, plain, cached *Map[string, int64]) {
	t.Helper()
	raw = openRaw(t, 4096)
	cached, err := NewCached(raw, String(), Int64(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cached.Close() })
	return raw, New(raw, String(), Int64()), cached
}

// openRaw opens a fresh map file in t.TempDir, closed when the test ends.
func openRaw(t testing.TB, entries int) *hashmap.Map {
	t.Helper()
	m, err := hashmap.Open(filepath.Join(t.TempDir(), "typed.map"), &hashmap.Options{Entries: entries})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func TestMapRoundTrip(t *testing.T) {
	m := New(openRaw(t, 1024), String(), Int64())
	if _, err := m.Get("a"); !errors.Is(err, hashmap.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	if err := m.Put("a", math.MinInt64); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Get("a"); err != nil || v != math.MinInt64 {
		t.Fatalf("Get = %d, %v; want MinInt64", v, err)
	}
	if err := m.Put("a", 7); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.PutIfAbsent("a", 8); ok || err != nil {
		t.Fatalf("PutIfAbsent of a present key = %v, %v; want false", ok, err)
	}
	if ok, err := m.PutIfAbsent("", 9); !ok || err != nil {
		t.Fatalf("PutIfAbsent of the empty key = %v, %v; want true", ok, err)
	}
	for k, want := range map[string]int64{"a": 7, "": 9} {
		if v, err := m.Get(k); err != nil || v != want {
			t.Errorf("Get(%q) = %d, %v; want %d", k, v, err, want)
		}
	}
	if m.Len() != 2 {
		t.Errorf("Len = %d, want 2", m.Len())
	}
	if ok, err := m.Delete("a"); !ok || err != nil {
		t.Fatalf("Delete of a present key = %v, %v", ok, err)
	}
	if ok, err := m.Delete("a"); ok || err != nil {
		t.Fatalf("second Delete = %v, %v; want false", ok, err)
	}
	if _, err := m.Get("a"); !errors.Is(err, hashmap.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if m.Unwrap() == nil || m.Len() != 1 {
		t.Errorf("Unwrap/Len after Delete: %v, %d", m.Unwrap(), m.Len())
	}
}

// mapRoundTrip stores every pair through a Map and reads each back.
func mapRoundTrip[K, V any](t *testing.T, m *Map[K, V], eq func(a, b V) bool, keys []K, values []V) {
	t.Helper()
	for i, k := range keys {
		if err := m.Put(k, values[i]); err != nil {
			t.Fatalf("Put(%v): %v", k, err)
		}
	}
	for i, k := range keys {
		v, err := m.Get(k)
		if err != nil || !eq(v, values[i]) {
			t.Errorf("Get(%v) = %v, %v; want %v", k, v, err, values[i])
		}
	}
}

func TestMapCodecs(t *testing.T) {
	raw := openRaw(t, 4096)
	// The maps share one file, so no two key codecs below may encode a
	// key to the same bytes (uint64 0 would be float64 0, for one).
	mapRoundTrip(t, New(raw, Uint64(), Bytes()), bytes.Equal,
		[]uint64{1, math.MaxUint64}, [][]byte{{}, []byte("v")})
	mapRoundTrip(t, New(raw, Float64(), Int8()), equal,
		[]float64{math.Copysign(0, -1), math.NaN(), math.Inf(1)}, []int8{-1, math.MinInt8, math.MaxInt8})
	mapRoundTrip(t, New(raw, Int16(), Binary[time.Time]()), func(a, b time.Time) bool { return a.Equal(b) },
		[]int16{math.MinInt16, math.MaxInt16}, []time.Time{{}, time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)})
	mapRoundTrip(t, New(raw, Binary[point](), Bool()), equal,
		[]point{{1, 2}, {-3, -4}}, []bool{true, false})
	mapRoundTrip(t, New(raw, JSON[record](), Uint32()), equal,
		[]record{{Name: "k"}, {Name: "k", Tags: []string{"t"}}}, []uint32{1, math.MaxUint32})
	// 0 and -0 are two keys (Float64 compares bits).
	f := New(raw, Float64(), Int8())
	if _, err := f.Get(0); !errors.Is(err, hashmap.ErrNotFound) {
		t.Errorf("Get(0) after Put(-0): %v, want ErrNotFound", err)
	}
}

// TestMapSharesBytesWithRaw: String and Bytes store the bytes as they are,
// so typed and raw users of one map agree.
func TestMapSharesBytesWithRaw(t *testing.T) {
	raw := openRaw(t, 1024)
	m := New(raw, String(), String())
	if err := m.Put("k", "v"); err != nil {
		t.Fatal(err)
	}
	if v, err := raw.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Errorf("raw Get = %q, %v", v, err)
	}
	if err := raw.Put([]byte("r"), []byte("w")); err != nil {
		t.Fatal(err)
	}
	if v, err := New(raw, Bytes(), Bytes()).Get([]byte("r")); err != nil || string(v) != "w" {
		t.Errorf("typed Get of a raw Put = %q, %v", v, err)
	}
}

func TestCompute(t *testing.T) {
	m := New(openRaw(t, 1024), String(), Int64())
	if err := m.Compute("n", nil); !errors.Is(err, hashmap.ErrBadOptions) {
		t.Fatalf("Compute with a nil function: %v", err)
	}
	if err := m.Unwrap().Compute([]byte("n"), nil); !errors.Is(err, hashmap.ErrBadOptions) {
		t.Fatalf("hashmap Compute with a nil function: %v", err)
	}
	if err := m.Unwrap().Update([]byte("n"), nil); !errors.Is(err, hashmap.ErrBadOptions) {
		t.Fatalf("hashmap Update with a nil function: %v", err)
	}
	incr := func(old int64, found bool) (int64, bool) { return old + 1, true }
	var sawFound []bool
	for range 3 {
		err := m.Compute("n", func(old int64, found bool) (int64, bool) {
			sawFound = append(sawFound, found)
			return incr(old, found)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if v, err := m.Get("n"); v != 3 || err != nil {
		t.Fatalf("after 3 increments: %d, %v", v, err)
	}
	if fmt.Sprint(sawFound) != "[false true true]" {
		t.Errorf("found = %v, want [false true true]", sawFound)
	}
	// keep false removes a present key and leaves an absent one absent.
	drop := func(int64, bool) (int64, bool) { return 0, false }
	if err := m.Compute("n", drop); err != nil {
		t.Fatal(err)
	}
	if err := m.Compute("never", drop); err != nil {
		t.Fatal(err)
	}
	if m.Len() != 0 {
		t.Errorf("Len = %d after removing with Compute, want 0", m.Len())
	}
}

// TestComputeUndecodable: a stored value that is not a V makes Compute
// fail with ErrDecode without calling fn, and the stored bytes stay.
func TestComputeUndecodable(t *testing.T) {
	raw := openRaw(t, 1024)
	bad := []byte{1, 2, 3} // 3 bytes: no int64
	if err := raw.Put([]byte("k"), bad); err != nil {
		t.Fatal(err)
	}
	m := New(raw, String(), Int64())
	called := false
	err := m.Compute("k", func(old int64, found bool) (int64, bool) {
		called = true
		return 42, true
	})
	var de *DecodeError
	if !errors.Is(err, ErrDecode) || !errors.As(err, &de) || de.Len != 3 || de.Want != 8 {
		t.Fatalf("Compute over 3 bytes: %v, want a DecodeError of 3 bytes", err)
	}
	if called {
		t.Error("fn was called with an undecodable value")
	}
	if got, err := raw.Get([]byte("k")); err != nil || !bytes.Equal(got, bad) {
		t.Errorf("stored bytes after a failed Compute: %v, %v; want %v", got, err, bad)
	}
	if _, err := m.Get("k"); !errors.Is(err, ErrDecode) {
		t.Errorf("Get: %v, want ErrDecode", err)
	}
	if ok, err := m.Delete("k"); !ok || err != nil {
		t.Errorf("Delete of an undecodable entry = %v, %v", ok, err)
	}
}

// TestDeleteMany: a batch larger than the hashmap's 16 removes the keys it
// names and counts those present; a near cache in the same process sees the
// removals at once.
func TestDeleteMany(t *testing.T) {
	_, plain, cached := openStringCounts(t)
	var keys []string
	for i := range 40 {
		keys = append(keys, fmt.Sprint("k", i))
		if err := plain.Put(keys[i], int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := cached.Get("k2"); err != nil || v != 2 { // warm the near cache
		t.Fatalf("Get before DeleteMany: %d, %v", v, err)
	}
	var doomed []string
	for i := 0; i < 40; i += 2 {
		doomed = append(doomed, keys[i])
	}
	if n, err := plain.DeleteMany(append(doomed, "absent")); n != 20 || err != nil {
		t.Fatalf("DeleteMany = %d, %v; want 20", n, err)
	}
	for i, k := range keys {
		for _, m := range []*Map[string, int64]{plain, cached} {
			_, err := m.Get(k)
			if gone := errors.Is(err, hashmap.ErrNotFound); gone != (i%2 == 0) {
				t.Fatalf("Get(%s) after DeleteMany: %v", k, err)
			}
		}
	}
}

// TestPutMany: a batch larger than the hashmap's 16 stores every key as
// Put would, twice in a row (the second reuses pooled buffers), and a near
// cache in the same process sees it at once; a value that does not encode
// ends the batch before it, with the keys before it stored and none after.
func TestPutMany(t *testing.T) {
	raw, plain, cached := openStringCounts(t)
	var keys []string
	var values []int64
	for i := range 40 {
		keys, values = append(keys, fmt.Sprint("k", i)), append(values, int64(i)*5)
	}
	if _, err := cached.Get("k3"); !errors.Is(err, hashmap.ErrNotFound) { // a near-cache miss to invalidate
		t.Fatalf("Get before PutMany: %v", err)
	}
	for round := range 2 {
		for i := range values {
			values[i] += int64(round)
		}
		if n, err := plain.PutMany(keys, values); n != len(keys) || err != nil {
			t.Fatalf("round %d: PutMany = %d, %v", round, n, err)
		}
		for i, k := range keys {
			for _, m := range []*Map[string, int64]{plain, cached} {
				if v, err := m.Get(k); err != nil || v != values[i] {
					t.Fatalf("round %d: Get(%s) = %d, %v; want %d", round, k, v, err, values[i])
				}
			}
		}
	}
	if _, err := plain.PutMany(keys, values[1:]); err == nil {
		t.Error("PutMany with fewer values than keys: no error")
	}
	floats := New(raw, String(), JSON[float64]())
	n, err := floats.PutMany([]string{"f0", "f1", "f2"}, []float64{1, math.NaN(), 3})
	if n != 1 || err == nil || !strings.Contains(err.Error(), "key 1: encode value") {
		t.Fatalf("PutMany with an unencodable value = %d, %v; want 1 stored and key 1's encode error", n, err)
	}
	if v, err := floats.Get("f0"); err != nil || v != 1 {
		t.Errorf("key before the unencodable one: %v, %v", v, err)
	}
	for _, k := range []string{"f1", "f2"} {
		if ok, _ := raw.Contains([]byte(k)); ok {
			t.Errorf("%s stored although the batch ended before it", k)
		}
	}
}

// TestComputeUnencodable: a new value the codec cannot encode fails
// Compute and changes nothing, whether the key was present or not.
func TestComputeUnencodable(t *testing.T) {
	raw := openRaw(t, 1024)
	m := New(raw, String(), JSON[float64]())
	if err := m.Put("k", 1.5); err != nil {
		t.Fatal(err)
	}
	before, _ := raw.Get([]byte("k"))
	nan := func(float64, bool) (float64, bool) { return math.NaN(), true }
	if err := m.Compute("k", nan); err == nil || errors.Is(err, ErrDecode) {
		t.Fatalf("Compute storing NaN as JSON: %v, want an encode error", err)
	}
	if after, err := raw.Get([]byte("k")); err != nil || !bytes.Equal(after, before) {
		t.Errorf("stored bytes %q, %v after a failed Compute; want %q", after, err, before)
	}
	if err := m.Compute("absent", nan); err == nil {
		t.Fatal("Compute storing NaN under an absent key succeeded")
	}
	if ok, _ := raw.Contains([]byte("absent")); ok {
		t.Error("a failed Compute created the key")
	}
}

func TestRange(t *testing.T) {
	raw := openRaw(t, 4096)
	m := New(raw, Int32(), String())
	want := map[int32]string{}
	for i := range int32(1000) {
		want[i-500] = fmt.Sprint("v", i)
		if err := m.Put(i-500, want[i-500]); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	got := map[int32]string{}
	for k, v := range m.Range(&err) {
		got[k] = v
	}
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Range saw %d entries, want %d (or values differ)", len(got), len(want))
	}
	n := 0
	for range m.Range(&err) {
		if n++; n == 10 {
			break
		}
	}
	if n != 10 || err != nil {
		t.Errorf("break after 10: n = %d, err = %v", n, err)
	}

	// An entry whose key is not an int32 stops the loop with ErrDecode.
	if err := raw.Put([]byte("not an int32 key"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	for range m.Range(&err) {
	}
	if !errors.Is(err, ErrDecode) {
		t.Errorf("Range over a foreign key: %v, want ErrDecode", err)
	}
	// And a value that is not a V too.
	if _, err := raw.Delete([]byte("not an int32 key")); err != nil {
		t.Fatal(err)
	}
	ints := New(raw, Int32(), Int64())
	err = nil
	for range ints.Range(&err) {
	}
	if !errors.Is(err, ErrDecode) {
		t.Errorf("Range decoding strings as int64: %v, want ErrDecode", err)
	}
}

// TestConcurrentCompute: goroutines sharing a Map (and its buffer pool)
// lose no increment.
func TestConcurrentCompute(t *testing.T) {
	m := New(openRaw(t, 1024), Int8(), Uint64())
	const workers, rounds, keys = 8, 300, 4
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				err := m.Compute(int8((w+i)%keys), func(old uint64, _ bool) (uint64, bool) { return old + 1, true })
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var total uint64
	for k := range int8(keys) {
		v, err := m.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		total += v
	}
	if total != workers*rounds {
		t.Errorf("total %d, want %d", total, workers*rounds)
	}
}

// TestAllocs pins the zero-allocation claims of the package doc; the
// benchmarks show the same numbers with timings.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers")
	}
	raw := openRaw(t, 1024)
	ints := New(raw, Int64(), Int64())
	manyKeys, manyVals, manyFound := []int64{1, -1}, make([]int64, 2), make([]bool, 2)
	strs := New(raw, String(), String())
	bs := New(raw, Bytes(), Bytes())
	key, val := []byte("bytes-key"), make([]byte, 64)
	str := string(make([]byte, 64))
	times := New(raw, Int16(), Binary[time.Time]())
	when := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	points := New(raw, Int32(), Binary[point]())
	for _, c := range []struct {
		name string
		want float64
		fn   func() error
	}{
		{"Put int64", 0, func() error { return ints.Put(1, 2) }},
		{"Get int64", 0, func() error { _, err := ints.Get(1); return err }},
		{"Get int64 miss", 0, func() error {
			if _, err := ints.Get(-1); !errors.Is(err, hashmap.ErrNotFound) {
				return err
			}
			return nil
		}},
		{"Put string", 0, func() error { return strs.Put("string-key", str) }},
		{"Get string", 1, func() error { _, err := strs.Get("string-key"); return err }},
		{"Put bytes", 0, func() error { return bs.Put(key, val) }},
		{"Get bytes", 1, func() error { _, err := bs.Get(key); return err }},
		{"Put time.Time (AppendBinary)", 0, func() error { return times.Put(1, when) }},
		{"Get time.Time", 0, func() error { _, err := times.Get(1); return err }},
		{"Put point (MarshalBinary)", 1, func() error { return points.Put(1, point{1, 2}) }},
		{"Get point", 0, func() error { _, err := points.Get(1); return err }},
		{"Delete int64", 0, func() error { _, err := ints.Delete(3); return err }},
		{"GetMany int64, a hit and a miss", 0, func() error { return ints.GetMany(manyKeys, manyVals, manyFound) }},
		{"Compute int64", 0, func() error {
			return ints.Compute(1, func(old int64, _ bool) (int64, bool) { return old + 1, true })
		}},
	} {
		var err error
		got := testing.AllocsPerRun(1000, func() {
			if e := c.fn(); e != nil {
				err = e
			}
		})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s: %v allocations, want %v", c.name, got, c.want)
		}
	}
}

func TestGetMany(t *testing.T) {
	raw, plain, cached := openStringCounts(t)
	for i := range 100 {
		if err := plain.Put(fmt.Sprint("k", i), int64(i)*3); err != nil {
			t.Fatal(err)
		}
	}
	// More than the hashmap's batch of 16, with absent keys and a repeat
	// among them.
	keys := []string{"k0", "absent", "k99"}
	for i := 1; i < 40; i++ {
		keys = append(keys, fmt.Sprint("k", i*2))
	}
	keys = append(keys, "k0")
	for _, m := range []*Map[string, int64]{plain, cached} {
		for round := range 2 { // the second reuses pooled buffers and warm near-cache entries
			values, found := make([]int64, len(keys)), make([]bool, len(keys))
			for i := range values {
				values[i], found[i] = -7, true // must be overwritten for absent keys
			}
			if err := m.GetMany(keys, values, found); err != nil {
				t.Fatal(err)
			}
			for i, k := range keys {
				want, wantErr := m.Get(k)
				if (wantErr == nil) != found[i] || values[i] != want {
					t.Errorf("round %d: GetMany gave %q = %d, found %v; Get gives %d, %v", round, k, values[i], found[i], want, wantErr)
				}
			}
		}
	}
	if err := plain.GetMany(keys, make([]int64, 1), make([]bool, len(keys))); err == nil {
		t.Error("GetMany with fewer values than keys: no error")
	}
	if err := plain.GetMany(keys, make([]int64, len(keys)), nil); err == nil {
		t.Error("GetMany with no found flags: no error")
	}
	// A stored value that is not an int64 fails the batch with ErrDecode.
	if err := raw.Put([]byte("k5"), []byte("not eight bytes")); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Map[string, int64]{plain, cached} {
		err := m.GetMany([]string{"k4", "k5"}, make([]int64, 2), make([]bool, 2))
		if !errors.Is(err, ErrDecode) {
			t.Errorf("GetMany over an undecodable value: %v, want ErrDecode", err)
		}
	}
}

// TestGetManyPoolKeepsLittle: the value buffers a GetMany leaves in the
// pooled batch are held to the cap together, not each under the
// per-buffer cap: otherwise one GetMany of 30,000 values of 2 KB would
// keep a buffer per key pooled for good.
func TestGetManyPoolKeepsLittle(t *testing.T) {
	raw, err := hashmap.Open(filepath.Join(t.TempDir(), "m"), &hashmap.Options{Entries: 40_000, AverageKeySize: 8, AverageValueSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	m := New(raw, Int64(), Bytes())
	const n = 30_000
	keys := make([]int64, n)
	for i := range keys {
		keys[i] = int64(i)
		if err := m.Put(keys[i], make([]byte, 2000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.GetMany(keys, make([][]byte, n), make([]bool, n)); err != nil {
		t.Fatal(err)
	}
	b := m.getBatch() // what the next GetMany gets
	total := 0
	for _, v := range b.vals {
		total += cap(v)
	}
	if total > 2*maxPooledBuffer {
		t.Fatalf("the pooled batch keeps %d value buffers, %.1f MiB, after one GetMany of %d keys", len(b.vals), float64(total)/(1<<20), n)
	}
}
