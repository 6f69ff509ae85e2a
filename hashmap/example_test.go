//go:build linux

package hashmap_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// exampleDir returns a fresh directory for an example's map file and the
// function that removes it.
func exampleDir() (string, func()) {
	dir, err := os.MkdirTemp("", "hashmap-example-")
	if err != nil {
		panic(err)
	}
	return dir, func() { os.RemoveAll(dir) }
}

// openExample opens a new map file name, created with opts, in a fresh
// directory, and returns it with the function that closes it and removes
// the directory (Example shows the Open and the reopening in full).
func openExample(name string, opts *hashmap.Options) (*hashmap.Map, func()) {
	dir, cleanup := exampleDir()
	m, err := hashmap.Open(filepath.Join(dir, name), opts)
	if err != nil {
		cleanup()
		panic(err)
	}
	return m, func() { m.Close(); cleanup() }
}

// A map is a file: every process that opens the same path shares it. The
// first Open creates it, sized by the options; later ones use the layout
// in its header.
func Example() {
	dir, cleanup := exampleDir()
	defer cleanup()
	path := filepath.Join(dir, "users.map")

	m, err := hashmap.Open(path, &hashmap.Options{Entries: 10_000, AverageKeySize: 16, AverageValueSize: 64})
	if err != nil {
		panic(err)
	}
	if err := m.Put([]byte("user:42"), []byte(`{"name":"Ada"}`)); err != nil {
		panic(err)
	}
	v, err := m.Get([]byte("user:42"))
	fmt.Printf("%s %v\n", v, err)

	_, err = m.Get([]byte("user:7"))
	fmt.Println(errors.Is(err, hashmap.ErrNotFound))
	m.Close()

	// Another process (here: this one again) opening the path sees the data.
	again, err := hashmap.Open(path, nil)
	if err != nil {
		panic(err)
	}
	defer again.Close()
	v, _ = again.Get([]byte("user:42"))
	fmt.Printf("%s, %d entry\n", v, again.Len())
	// Output:
	// {"name":"Ada"} <nil>
	// true
	// {"name":"Ada"}, 1 entry
}

// Compute is an atomic read-modify-write under the key's segment lock, so
// increments from any number of goroutines and processes are never lost.
func ExampleMap_Compute() {
	m, done := openExample("counters.map", nil)
	defer done()

	increment := func(old []byte, found bool) ([]byte, bool) {
		var n uint64
		if found {
			n = binary.LittleEndian.Uint64(old)
		}
		return binary.LittleEndian.AppendUint64(nil, n+1), true
	}
	for range 3 {
		if err := m.Compute([]byte("hits"), increment); err != nil {
			panic(err)
		}
	}
	v, _ := m.Get([]byte("hits"))
	fmt.Println(binary.LittleEndian.Uint64(v))

	// keep=false removes the entry.
	_ = m.Compute([]byte("hits"), func([]byte, bool) ([]byte, bool) { return nil, false })
	_, err := m.Get([]byte("hits"))
	fmt.Println(errors.Is(err, hashmap.ErrNotFound))
	// Output:
	// 3
	// true
}

// GetInto appends the value to a buffer the caller keeps: a loop of
// lookups allocates nothing.
func ExampleMap_GetInto() {
	m, done := openExample("m.map", nil)
	defer done()
	_ = m.Put([]byte("a"), []byte("alpha"))
	_ = m.Put([]byte("b"), []byte("beta"))

	buf := make([]byte, 0, 64)
	for _, k := range []string{"a", "b", "c"} {
		v, err := m.GetInto(buf[:0], []byte(k))
		switch {
		case errors.Is(err, hashmap.ErrNotFound):
			fmt.Println(k, "absent")
		case err != nil:
			panic(err)
		default:
			fmt.Println(k, string(v))
		}
	}
	// Output:
	// a alpha
	// b beta
	// c absent
}

// Range visits every entry, a segment at a time; the error, if any, is
// reported through the pointer once the loop ends.
func ExampleMap_Range() {
	m, done := openExample("m.map", nil)
	defer done()
	for _, k := range []string{"x", "y", "z"} {
		_ = m.Put([]byte(k), []byte("value of "+k))
	}

	var keys []string
	var rangeErr error
	for k, v := range m.Range(&rangeErr) {
		keys = append(keys, string(k)+"="+string(v))
	}
	if rangeErr != nil {
		panic(rangeErr)
	}
	slices.Sort(keys) // the order is the hash's
	fmt.Println(keys)
	// Output:
	// [x=value of x y=value of y z=value of z]
}

// A cache map expires entries and, when full, evicts instead of failing.
func ExampleMap_PutWithTTL() {
	c, done := openExample("sessions.map", &hashmap.Options{Entries: 1000, Cache: true, DefaultTTL: time.Hour})
	defer done()

	_ = c.PutWithTTL([]byte("session:1"), []byte("token"), 50*time.Millisecond)
	_ = c.Put([]byte("session:2"), []byte("token")) // DefaultTTL: an hour
	time.Sleep(100 * time.Millisecond)
	_, err1 := c.Get([]byte("session:1"))
	_, err2 := c.Get([]byte("session:2"))
	fmt.Println(errors.Is(err1, hashmap.ErrNotFound), err2)
	// Output:
	// true <nil>
}

// Locks in the file are shared by every process that opens it: a lock
// taken here excludes every other process until it is released.
func ExampleMap_Locks() {
	m, done := openExample("m.map", &hashmap.Options{Locks: 4})
	defer done()

	locks := m.Locks()
	if err := locks.Lock(2); err != nil {
		panic(err)
	}
	ok, _ := locks.TryLock(2) // held: by us, but any holder excludes every taker
	fmt.Println("second TryLock:", ok)
	if err := locks.Unlock(2); err != nil {
		panic(err)
	}
	err := locks.LockTimeout(2, time.Second)
	fmt.Println("after Unlock:", err)
	_ = locks.Unlock(2)
	// Output:
	// second TryLock: false
	// after Unlock: <nil>
}

// GetMany looks up a batch, overlapping the lookups' cache misses; absent
// keys come back nil, and the value buffers are reused across calls.
func ExampleMap_GetMany() {
	m, done := openExample("m.map", nil)
	defer done()
	_ = m.Put([]byte("k1"), []byte("one"))
	_ = m.Put([]byte("k3"), []byte("three"))

	keys := [][]byte{[]byte("k1"), []byte("k2"), []byte("k3")}
	values := make([][]byte, len(keys))
	for i := range values {
		values[i] = make([]byte, 0, 16)
	}
	if err := m.GetMany(keys, values); err != nil {
		panic(err)
	}
	for i, v := range values {
		fmt.Printf("%s: %q absent=%v\n", keys[i], v, v == nil)
	}
	// Output:
	// k1: "one" absent=false
	// k2: "" absent=true
	// k3: "three" absent=false
}

// PutAll fills a map fast: it stores a batch in the file's order, not the
// slice's, and says how many keys were new; a key given twice keeps its
// last value.
func ExampleMap_PutAll() {
	m, done := openExample("m.map", nil)
	defer done()
	if err := m.Put([]byte("a"), []byte("old")); err != nil {
		panic(err)
	}
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("b")}
	values := [][]byte{[]byte("1"), []byte("2"), []byte("3"), []byte("4")}
	stored, added, err := m.PutAll(keys, values)
	fmt.Println(stored, added, err, m.Len())
	for _, k := range []string{"a", "b", "c"} {
		v, _ := m.Get([]byte(k))
		fmt.Printf("%s=%s ", k, v)
	}
	fmt.Println()
	// Output:
	// 4 2 <nil> 3
	// a=1 b=4 c=3
}

// PutMany writes a batch, each key as Put would, overlapping the lookups'
// cache misses; on an error it says how many keys it stored first.
func ExampleMap_PutMany() {
	m, done := openExample("m.map", nil)
	defer done()
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("c")}
	values := [][]byte{[]byte("1"), []byte("2"), []byte("3")}
	n, err := m.PutMany(keys, values)
	fmt.Println(n, err, m.Len())
	v, _ := m.Get([]byte("b"))
	fmt.Printf("%s\n", v)
	// Output:
	// 3 <nil> 3
	// 2
}
