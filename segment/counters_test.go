package segment

import (
	"testing"
	"time"
)

// TestCounters: puts and deletes count what was stored and removed (not a
// PutIfAbsent that kept the old value, nor a delete of an absent key), a
// writer that found the lock taken counts a wait, and the counters survive
// reopening.
func TestCounters(t *testing.T) {
	tb, path := newTable(t, Params{Entries: 100, AverageKeySize: 4, AverageValueSize: 4, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	put := func(k string, mode PutMode) {
		if _, err := s.Put(hashOf([]byte(k)), []byte(k), []byte("v"), mode); err != nil {
			t.Fatal(err)
		}
	}
	put("a", Replace)
	put("a", Replace)
	put("a", IfAbsent) // kept: not a put
	put("b", IfAbsent)
	if _, err := s.Delete(hashOf([]byte("a")), []byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(hashOf([]byte("zz")), []byte("zz")); err != nil {
		t.Fatal(err)
	}
	if err := s.Compute(hashOf([]byte("c")), []byte("c"), func([]byte, bool) ([]byte, bool) { return []byte("x"), true }); err != nil {
		t.Fatal(err)
	}
	if err := s.Compute(hashOf([]byte("b")), []byte("b"), func([]byte, bool) ([]byte, bool) { return nil, false }); err != nil {
		t.Fatal(err)
	}
	if !s.Lock().TryUpdateLock() {
		t.Fatal("lock busy")
	}
	done := make(chan struct{})
	go func() { put("d", Replace); close(done) }()
	time.Sleep(20 * time.Millisecond)
	_ = s.Lock().UpdateUnlock()
	<-done
	c := s.Counters()
	want := Counters{Puts: 5, Deletes: 2, LockWaits: 1}
	if c != want {
		t.Fatalf("counters %+v, want %+v", c, want)
	}
	again := openTable(t, path, tb.layout, false)
	if c := again.Segment(0).Counters(); c != want {
		t.Fatalf("after reopening: %+v", c)
	}
}
