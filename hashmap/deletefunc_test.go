//go:build linux

package hashmap

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDeleteFuncAndPrefix: DeleteFunc removes what fn chose, with fn given
// every live entry once, with its value; DeletePrefix removes the keys
// with the prefix and no other; a nil fn is refused.
func TestDeleteFuncAndPrefix(t *testing.T) {
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 2000, AverageKeySize: 8, AverageValueSize: 16, Segments: 4, MaxBloatFactor: 4})
	defer m.Close()
	want := opsFill(t, m, "a-", 1500)
	for k, v := range opsFill(t, m, "b-", 1500) {
		want[k] = v
	}
	seen := map[string]int{}
	n, err := m.DeleteFunc(func(k, v []byte) bool {
		seen[string(k)]++
		if want[string(k)] != string(v) {
			t.Errorf("fn got %s = %q, want %q", k, v, want[string(k)])
		}
		return bytes.HasSuffix(k, []byte("7"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(want) {
		t.Fatalf("fn saw %d keys of %d", len(seen), len(want))
	}
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("fn saw %s %d times", k, c)
		}
	}
	if n != 300 {
		t.Fatalf("DeleteFunc removed %d, want 300", n)
	}
	n, err = m.DeletePrefix([]byte("a-"))
	if err != nil || n != 1350 {
		t.Fatalf("DeletePrefix: %d %v, want 1350", n, err)
	}
	got := rangeAll(t, m)
	for k, v := range want {
		g, ok := got[k]
		keep := strings.HasPrefix(k, "b-") && !strings.HasSuffix(k, "7")
		if ok != keep || ok && g != v {
			t.Fatalf("%s: %q present %v, want present %v", k, g, ok, keep)
		}
	}
	if _, err := m.DeleteFunc(nil); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("DeleteFunc(nil): %v", err)
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Fatalf("check: %v %v", problems, err)
	}
}

// TestDeleteFuncCallingTheMap: fn may read the map; a write from fn to the
// segment DeleteFunc holds ends in ErrTimeout after the map's LockTimeout
// (twice at most), never in a silent deadlock, and DeleteFunc goes on.
func TestDeleteFuncCallingTheMap(t *testing.T) {
	const lockTimeout = 100 * time.Millisecond
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 100, Segments: 1, LockTimeout: lockTimeout})
	defer m.Close()
	opsFill(t, m, "k", 3)
	var putErr, getErr error
	start := time.Now()
	n, err := m.DeleteFunc(func(k, v []byte) bool {
		if putErr == nil {
			putErr = m.Put([]byte("other"), []byte("x")) // segment 0: the only one
			_, getErr = m.Get([]byte("k00001"))
		}
		return true
	})
	took := time.Since(start)
	if err != nil || n != 3 {
		t.Fatalf("DeleteFunc: %d %v", n, err)
	}
	if !errors.Is(putErr, ErrTimeout) || getErr != nil {
		t.Fatalf("a Put from fn: %v (want ErrTimeout); a Get: %v", putErr, getErr)
	}
	if took > 3*lockTimeout+time.Second {
		t.Fatalf("took %v", took)
	}
}
