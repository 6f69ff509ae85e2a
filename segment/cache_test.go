//go:build linux

package segment

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

// fakeClock is a controllable clock for cache tables.
type fakeClock struct{ now atomic.Int64 }

func (c *fakeClock) read() int64     { return c.now.Load() }
func (c *fakeClock) advance(d int64) { c.now.Add(d) }

func newCacheTable(t *testing.T, entries int) (*Table, *fakeClock) {
	t.Helper()
	tb, _ := newTable(t, Params{Entries: entries, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 1, Segments: 1, Cache: true})
	clock := &fakeClock{}
	clock.now.Store(1_000_000)
	tb.SetClock(clock.read)
	return tb, clock
}

// TestCacheExpiry: an entry is visible until its expiry and invisible from
// that instant to Get, Has, Range and Compute; PutIfAbsent and Delete treat
// it as absent; the write over it or the delete reclaims it and counts it.
func TestCacheExpiry(t *testing.T) {
	tb, clock := newCacheTable(t, 100)
	s := tb.Segment(0)
	k, v := []byte("key"), []byte("value")
	h := hashOf(k)
	if _, err := s.PutExpiring(h, k, v, clock.read()+10, Replace); err != nil {
		t.Fatal(err)
	}
	forever := []byte("forever")
	if _, err := s.PutExpiring(hashOf(forever), forever, v, 0, Replace); err != nil {
		t.Fatal(err)
	}
	got, found, err := s.get(h, k, nil)
	if err != nil || !found || string(got) != "value" {
		t.Fatalf("before expiry: %q %v %v", got, found, err)
	}
	clock.advance(10)
	if got, found, err := s.get(h, k, nil); err != nil || found {
		t.Fatalf("at expiry: %q %v %v, want absent", got, found, err)
	}
	if has, _ := s.Has(h, k); has {
		t.Fatal("Has sees an expired entry")
	}
	n := 0
	if err := s.Entries(func(key, value []byte) bool {
		n++
		if string(key) != "forever" || string(value) != "value" {
			t.Errorf("Range yielded %q=%q", key, value)
		}
		return true
	}); err != nil || n != 1 {
		t.Fatalf("Range: %d entries, %v", n, err)
	}
	if err := s.compute(h, k, func(old []byte, found bool) ([]byte, bool) {
		if found {
			t.Errorf("Compute sees the expired value %q", old)
		}
		return nil, false
	}); err != nil {
		t.Fatal(err)
	}
	if s.expiredCount() != 1 {
		t.Fatalf("Compute's delete reclaimed %d expired entries, want 1", s.expiredCount())
	}
	if _, err := s.PutExpiring(h, k, v, clock.read()+5, Replace); err != nil {
		t.Fatal(err)
	}
	clock.advance(5)
	if inserted, err := s.PutExpiring(h, k, []byte("again"), 0, IfAbsent); err != nil || !inserted {
		t.Fatalf("PutIfAbsent over an expired entry: inserted %v, %v", inserted, err)
	}
	if got, _, _ := s.get(h, k, nil); string(got) != "again" {
		t.Fatalf("after PutIfAbsent: %q", got)
	}
	if _, err := s.PutExpiring(h, k, v, clock.read()+1, Replace); err != nil {
		t.Fatal(err)
	}
	clock.advance(1)
	if existed, err := s.Delete(h, k); err != nil || existed {
		t.Fatalf("Delete of an expired entry: existed %v, %v", existed, err)
	}
	if s.Len() != 1 || s.expiredCount() != 3 {
		t.Fatalf("Len %d, expired %d; want 1 and 3", s.Len(), s.expiredCount())
	}
	checkClean(t, tb)
}

// TestCacheEvictsInsteadOfFull: a cache map far past its size keeps taking
// Puts, never ErrFull; the most recent ones are readable, entries are
// evicted and counted, and the segment checks clean.
func TestCacheEvictsInsteadOfFull(t *testing.T) {
	tb, _ := newCacheTable(t, 200)
	s := tb.Segment(0)
	const puts = 5000
	for i := range puts {
		k := fmt.Appendf(nil, "key-%05d", i)
		v := make([]byte, 1+i%40) // sizes vary: eviction must also find runs
		if _, err := s.PutExpiring(hashOf(k), k, v, 0, Replace); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if s.evictedCount() == 0 || s.Len()+s.evictedCount() != puts {
		t.Fatalf("len %d + evicted %d != %d puts", s.Len(), s.evictedCount(), puts)
	}
	k := fmt.Appendf(nil, "key-%05d", puts-1)
	if _, found, err := s.get(hashOf(k), k, nil); err != nil || !found {
		t.Fatalf("the last put is gone: %v %v", found, err)
	}
	checkClean(t, tb)
}

// TestClockKeepsReadEntries: entries read between sweeps get second chances
// and survive a stream of one-time inserts that would otherwise evict them
// in insertion order. Without reference bits, the hot set is evicted like
// the rest.
func TestClockKeepsReadEntries(t *testing.T) {
	tb, _ := newCacheTable(t, 400)
	s := tb.Segment(0)
	put := func(k []byte) {
		if _, err := s.PutExpiring(hashOf(k), k, []byte("v"), 0, Replace); err != nil {
			t.Fatal(err)
		}
	}
	var hot [][]byte
	for i := range 50 {
		k := fmt.Appendf(nil, "hot-%d", i)
		hot = append(hot, k)
		put(k)
	}
	for i := range 4000 {
		put(fmt.Appendf(nil, "cold-%d", i))
		if i%20 == 0 {
			for _, k := range hot {
				if _, _, err := s.get(hashOf(k), k, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	kept := 0
	for _, k := range hot {
		if _, found, _ := s.get(hashOf(k), k, nil); found {
			kept++
		}
	}
	if kept < len(hot)*9/10 {
		t.Fatalf("%d of %d hot entries survived %d evictions", kept, len(hot), s.evictedCount())
	}
	t.Logf("%d of %d hot entries kept; %d evicted", kept, len(hot), s.evictedCount())
}

// TestPlainMapStaysFull: without cache mode the same stream ends in ErrFull.
func TestPlainMapStaysFull(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 200, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	for i := range 5000 {
		k := fmt.Appendf(nil, "key-%05d", i)
		if _, err := s.put(hashOf(k), k, []byte("v"), Replace); err != nil {
			if !errors.Is(err, ErrFull) {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("a plain map took 5000 entries sized for 200")
}

// FuzzCacheOps drives a tiny cache table with puts (some expiring), gets,
// deletes and clock steps decoded from the input. A cache may forget
// (evict) but never lie: a Get that finds a key returns its latest value,
// which has not expired; nothing expired is ever returned; a Delete that
// reports a key existed is right; the table checks clean at the end.
func FuzzCacheOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(bytes.Repeat([]byte{0, 7, 200, 1, 7, 3, 4, 1, 1, 3, 7, 0}, 40))
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 3000 {
			return
		}
		tb, _ := newTable(t, Params{Entries: 32, AverageKeySize: 4, AverageValueSize: 8, MaxBloatFactor: 1, Segments: 2, Cache: true})
		clock := &fakeClock{}
		tb.SetClock(clock.read)
		type want struct {
			value  []byte
			expiry int64
		}
		model := map[string]want{}
		for i := 0; i+2 < len(prog); i += 3 {
			op, k, n := prog[i]%5, []byte{'k', prog[i+1] % 64}, int(prog[i+2])
			h := hashOf(k)
			s := tb.For(h)
			w, had := model[string(k)]
			live := had && (w.expiry == 0 || w.expiry > clock.read())
			switch op {
			case 0, 1:
				v := bytes.Repeat([]byte{prog[i+2]}, n%100)
				var expiry int64
				if op == 1 {
					expiry = clock.read() + int64(n%8)
				}
				if _, err := s.PutExpiring(h, k, v, expiry, Replace); err != nil {
					t.Fatal(err) // a cache never fills up
				}
				model[string(k)] = want{v, expiry}
			case 2:
				existed, err := s.Delete(h, k)
				if err != nil {
					t.Fatal(err)
				}
				if existed && !live {
					t.Fatalf("delete %q existed, but the model says it is gone or expired", k)
				}
				delete(model, string(k))
			case 3:
				v, found, err := s.get(h, k, nil)
				if err != nil {
					t.Fatal(err)
				}
				if found && (!live || !bytes.Equal(v, w.value)) {
					t.Fatalf("get %q = %q, model %q (had %v, live %v)", k, v, w.value, had, live)
				}
			case 4:
				clock.advance(int64(n % 4))
			}
		}
		checkClean(t, tb)
	})
}

// TestEvictionUnderReadersOfEveryEntry: readers that mark every entry as
// read between any two steps of the hand (as readers on other cores can,
// without the lock) do not keep a cache Put from finding room. Before, the
// hand gave second chances for its three laps and the Put failed with
// ErrFull.
func TestEvictionUnderReadersOfEveryEntry(t *testing.T) {
	tb, _ := newCacheTable(t, 200)
	s := tb.Segment(0)
	for i := 0; s.evictedCount() == 0; i++ {
		k := fmt.Appendf(nil, "key-%05d", i)
		if _, err := s.PutExpiring(hashOf(k), k, []byte("v"), 0, Replace); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	chain, err := s.chainTiers()
	if err != nil {
		t.Fatal(err)
	}
	testHookEvictStep = func() { // what a reader's lookup does to the slot it finds
		for _, tv := range chain {
			for i := range tv.slots {
				if sl := atomic.LoadUint64(&tv.slots[i]); sl != 0 {
					atomic.CompareAndSwapUint64(&tv.slots[i], sl, sl|refBit)
				}
			}
		}
	}
	defer func() { testHookEvictStep = nil }()
	for i := range 20 {
		k := fmt.Appendf(nil, "new-%05d", i)
		if _, err := s.PutExpiring(hashOf(k), k, []byte("v"), 0, Replace); err != nil {
			t.Fatalf("put %d with every entry read at every step: %v", i, err)
		}
	}
	testHookEvictStep = nil
	checkClean(t, tb)
}

// TestGetCheckedDecidesExpiryOnce: GetChecked reads the clock once for its
// answer. An entry that expires between two readings is either the whole
// value or absent; before, its liveness was decided inside the read and
// again after the checksum, and an entry expiring between the two came
// back found, with an empty value (the clock here ticks at every
// reading).
func TestGetCheckedDecidesExpiryOnce(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 100, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 1, Segments: 1, Cache: true})
	var now atomic.Int64
	now.Store(1_000_000)
	tb.SetClock(func() int64 { return now.Add(1) })
	s := tb.Segment(0)
	k, v := []byte("key"), []byte("a value that is not empty")
	h := hashOf(k)
	for ahead := int64(1); ahead <= 4; ahead++ { // expiring at each of the next readings
		if _, err := s.PutExpiring(h, k, v, now.Load()+ahead, Replace); err != nil {
			t.Fatal(err)
		}
		got, found, err := s.GetChecked(h, k, nil)
		if err != nil || (found && string(got) != string(v)) {
			t.Errorf("expiring %d readings ahead: GetChecked = %q, %v, %v; want the value or not found", ahead, got, found, err)
		}
	}
}
