//go:build linux

package hashmap

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLookupIntoTheKeysOwnBuffer: a lookup whose destination buffer holds
// the key in its spare capacity (one buffer reused for both, a natural
// zero-allocation pattern) finds the key while writers keep changing its
// segment. Its optimistic read appends the value before it knows whether a
// writer spoiled it, and a second look then compared the stored key with
// the value's bytes: about 2% of such GetInto calls answered ErrNotFound
// for a key present throughout.
func TestLookupIntoTheKeysOwnBuffer(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 1000, Segments: 1})
	key := []byte("stable-key-0001")
	val := bytes.Repeat([]byte("V"), 64)
	if err := m.Put(key, val); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // other keys of the one segment, inserted, rewritten, deleted
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			k := []byte(fmt.Sprintf("churn%03d", i%300))
			_ = m.Put(k, bytes.Repeat([]byte{byte(i)}, i%200))
			if i%3 == 0 {
				_, _ = m.Delete(k)
			}
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	lookups := map[string]func(buf []byte) ([]byte, error){
		"GetInto": func(buf []byte) ([]byte, error) { return m.GetInto(buf[:0], buf[:len(key)]) },
		"GetMany": func(buf []byte) ([]byte, error) {
			keys, values := [][]byte{buf[:len(key)]}, [][]byte{buf[:0]}
			err := m.GetMany(keys, values)
			if err == nil && values[0] == nil {
				err = ErrNotFound
			}
			return values[0], err
		},
		"GetVersioned": func(buf []byte) ([]byte, error) {
			v, _, err := m.GetVersioned(buf[:0], buf[:len(key)])
			return v, err
		},
	}
	for name, lookup := range lookups {
		buf := make([]byte, 0, 256)
		wrong, n := 0, 0
		var first string
		for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); n++ {
			buf = append(buf[:0], key...)
			v, err := lookup(buf)
			if err != nil || !bytes.Equal(v, val) {
				if wrong++; wrong == 1 {
					first = fmt.Sprintf("%q, %v", v, err)
				}
			}
		}
		if wrong > 0 {
			t.Errorf("%s: %d of %d lookups into the key's own buffer went wrong; the first: %s", name, wrong, n, first)
		}
	}
}
