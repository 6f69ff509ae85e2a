//go:build linux

package hashmap

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestExpiredIsAbsentToEveryRead: once an entry has expired, every way of
// reading treats it as absent (Get, GetChecked, Contains, GetVersioned,
// GetMany, Range, RangeView), PutIfAbsent takes its key, Delete reports it
// absent, and each expired entry reclaimed is counted once.
func TestExpiredIsAbsentToEveryRead(t *testing.T) {
	m, clock := openClockedCache(t, 1000, 0)
	for i := range 100 {
		k := []byte(fmt.Sprintf("k%03d", i))
		if err := m.PutWithTTL(k, []byte("v"), time.Duration(1+i%2)*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute)
	k0 := []byte("k000") // expired (i even: 1 minute)
	if _, err := m.Get(k0); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get: %v", err)
	}
	if _, err := m.GetChecked(nil, k0); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetChecked: %v", err)
	}
	if ok, err := m.Contains(k0); ok || err != nil {
		t.Errorf("Contains: %v %v", ok, err)
	}
	if _, _, err := m.GetVersioned(nil, k0); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetVersioned: %v", err)
	}
	vals := make([][]byte, 1)
	if err := m.GetMany([][]byte{k0}, vals); err != nil || vals[0] != nil {
		t.Errorf("GetMany: %q %v", vals[0], err)
	}
	var rerr error
	n := 0
	for range m.Range(&rerr) {
		n++
	}
	if rerr != nil || n != 50 {
		t.Errorf("Range: %d entries, %v", n, rerr)
	}
	n = 0
	for range m.RangeView(&rerr) {
		n++
	}
	if rerr != nil || n != 50 {
		t.Errorf("RangeView: %d entries, %v", n, rerr)
	}
	if ok, err := m.PutIfAbsent(k0, []byte("w")); !ok || err != nil {
		t.Errorf("PutIfAbsent over expired: %v %v", ok, err)
	}
	if existed, err := m.Delete([]byte("k002")); existed || err != nil {
		t.Errorf("Delete of expired: %v %v", existed, err)
	}
	st := m.Stats()
	t.Logf("entries %d expired %d deletes %d puts %d len %d", st.Entries, st.Expired, st.Deletes, st.Puts, m.Len())
	if st.Expired != 2 {
		t.Errorf("Expired = %d, want 2", st.Expired)
	}
}
