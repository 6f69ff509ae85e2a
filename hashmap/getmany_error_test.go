//go:build linux

package hashmap

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestGetManyErrorNamesTheKey: GetMany's error, like PutMany's and
// DeleteMany's, says which key it stopped at, and leaves the values from it
// on as they were: otherwise the caller cannot tell which values[i] were
// set.
func TestGetManyErrorNamesTheKey(t *testing.T) {
	m, path := openTemp(t, &Options{Entries: 400, Segments: 4})
	const damaged = 1
	var good, bad [][]byte
	for i := range 300 {
		k := []byte(fmt.Sprintf("key-%d", i))
		if err := m.Put(k, []byte("value")); err != nil {
			t.Fatal(err)
		}
		if m.table.For(xxhash.Sum64(k)).Index() != damaged {
			good = append(good, k)
		}
	}
	for i := 0; len(bad) < 1; i++ {
		k := []byte(fmt.Sprintf("absent-%d", i))
		if m.table.For(xxhash.Sum64(k)).Index() == damaged {
			bad = append(bad, k)
		}
	}
	l := *m.layout
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	writeWord(t, path, l.TiersOff+damaged*l.TierSize, uint64(l.Tiers)+5)
	m2, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	keys := [][]byte{good[0], good[1], bad[0], good[2], good[3]}
	values := make([][]byte, len(keys))
	for i := range values {
		values[i] = []byte("stale from the last call")
	}
	err = m2.GetMany(keys, values)
	t.Logf("GetMany: %v", err)
	for i := range values {
		t.Logf("values[%d] = %q", i, values[i])
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("GetMany over a broken tier chain: %v, want ErrCorrupt", err)
	}
	if !strings.Contains(err.Error(), "key 2") {
		t.Errorf("GetMany's error does not say which key it stopped at (PutMany's and DeleteMany's do): %v", err)
	}
	for i, want := range []string{"value", "value", "stale from the last call", "stale from the last call", "stale from the last call"} {
		if string(values[i]) != want {
			t.Errorf("values[%d] = %q, want %q", i, values[i], want)
		}
	}
}
