//go:build linux

package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/offheap"
)

func openTemp(t testing.TB, o *Options) (*Map, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.map")
	m, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m, path
}

func TestBasics(t *testing.T) {
	m, path := openTemp(t, nil)
	if _, err := m.Get([]byte("nope")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get absent = %v, want ErrNotFound", err)
	}
	if err := m.Put([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Get([]byte("a")); err != nil || string(v) != "1" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if err := m.Put([]byte("empty"), nil); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Get([]byte("empty")); err != nil || v == nil || len(v) != 0 {
		t.Fatalf("Get empty value = %#v, %v", v, err)
	}
	if ok, err := m.PutIfAbsent([]byte("a"), []byte("2")); ok || err != nil {
		t.Fatalf("PutIfAbsent on present = %v, %v", ok, err)
	}
	if ok, err := m.PutIfAbsent([]byte("b"), []byte("2")); !ok || err != nil {
		t.Fatalf("PutIfAbsent on absent = %v, %v", ok, err)
	}
	if err := m.Compute([]byte("a"), func(old []byte, found bool) ([]byte, bool) {
		return append(old, '!'), true
	}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 64)
	if v, err := m.GetInto(buf, []byte("a")); err != nil || string(v) != "1!" {
		t.Fatalf("GetInto = %q, %v", v, err)
	}
	if ok, err := m.Delete([]byte("b")); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	if ok, err := m.Delete([]byte("b")); ok || err != nil {
		t.Fatalf("Delete again = %v, %v", ok, err)
	}
	if m.Len() != 2 {
		t.Fatalf("Len = %d", m.Len())
	}
	var rerr error
	got := map[string]string{}
	for k, v := range m.Range(&rerr) {
		got[string(k)] = string(v)
	}
	if rerr != nil || len(got) != 2 || got["a"] != "1!" || got["empty"] != "" {
		t.Fatalf("Range = %v, %v", got, rerr)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get([]byte("a")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v", err)
	}
	// Survives reopen, with the layout from the file.
	m2, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if v, err := m2.Get([]byte("a")); err != nil || string(v) != "1!" {
		t.Fatalf("after reopen Get = %q, %v", v, err)
	}
	st := m2.Stats()
	if st.Entries != 2 || st.Capacity != DefaultEntries || st.Segments == 0 || st.BytesUsed == 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

// TestOpenCreatesNoMapThroughADanglingLink: Open of a symbolic link whose
// target does not exist is refused, naming the target, and creates nothing
// where the link points.
func TestOpenCreatesNoMapThroughADanglingLink(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target.map"), filepath.Join(dir, "link.map")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	m, err := Open(link, &Options{Entries: 100})
	if m != nil {
		m.Close()
	}
	if !errors.Is(err, offheap.ErrDanglingLink) || !strings.Contains(err.Error(), target) {
		t.Errorf("Open(link to nothing) = %v, want offheap.ErrDanglingLink naming %s", err, target)
	}
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open created the link's target: %v", err)
	}
}

// TestNoCreateAndCreateNew: NoCreate opens only a map that is there,
// creating nothing; CreateNew only creates, and refuses a file that holds
// anything.
func TestNoCreateAndCreateNew(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m")
	if _, err := Open(path, &Options{NoCreate: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("NoCreate on an absent file = %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("NoCreate created the file")
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, &Options{NoCreate: true, DefaultTTL: time.Second}); !errors.Is(err, offheap.ErrNotReady) {
		t.Fatalf("NoCreate on an empty file = %v, want offheap.ErrNotReady", err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != 0 {
		t.Fatalf("NoCreate wrote the empty file: %v, %v", st, err)
	}
	m, err := Open(path, &Options{CreateNew: true, Entries: 1000})
	if err != nil {
		t.Fatalf("CreateNew on an empty file: %v", err)
	}
	if err := m.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if _, err := Open(path, &Options{CreateNew: true, Entries: 1000}); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("CreateNew on a map = %v, want fs.ErrExist", err)
	}
	m, err = Open(path, &Options{NoCreate: true})
	if err != nil {
		t.Fatalf("NoCreate on a map: %v", err)
	}
	defer m.Close()
	if v, err := m.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
}

func TestOptions(t *testing.T) {
	dir := t.TempDir()
	for _, o := range []Options{
		{Entries: -1},
		{MaxBloatFactor: 0.5},
		{Segments: 3},
		{AverageKeySize: -4},
		{MaxProcesses: -1},
		{MaxProcesses: maxProcesses + 1},
		{Entries: 10, Segments: 1 << 20}, // a 20 GB file for 10 entries
		{CreateNew: true, NoCreate: true},
		{CreateNew: true, ReadOnly: true},
	} {
		if _, err := Open(filepath.Join(dir, "bad"), &o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("Open(%+v) = %v, want ErrBadOptions", o, err)
		}
	}
	path := filepath.Join(dir, "m")
	m, err := Open(path, &Options{Entries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if _, err := Open(path, &Options{Entries: 5000}); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("reopen with other Entries = %v, want ErrIncompatible", err)
	}
	if _, err := Open(path, &Options{MaxProcesses: 7}); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("reopen with other MaxProcesses = %v, want ErrIncompatible", err)
	}
	m, err = Open(path, &Options{LockTimeout: 1e9}) // tuning only: fine
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	ro, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Put([]byte("k"), []byte("v")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Put on read-only = %v", err)
	}
	if _, err := ro.Get([]byte("k")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get on read-only = %v", err)
	}
}

// TestFillToFull fills a small map until ErrFull: every entry stored before
// is still readable, and the failed Put wrote nothing.
func TestFillToFull(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 200, AverageKeySize: 8, AverageValueSize: 32, MaxBloatFactor: 1.5, MaxSize: NoGrowth})
	stored := 0
	var fullErr error
	for i := 0; i < 100000; i++ {
		err := m.Put([]byte(fmt.Sprintf("key-%06d", i)), bytes.Repeat([]byte{byte(i)}, 32))
		if err != nil {
			fullErr = err
			break
		}
		stored++
	}
	if !errors.Is(fullErr, ErrFull) {
		t.Fatalf("filling ended with %v after %d entries, want ErrFull", fullErr, stored)
	}
	if m.Len() != stored {
		t.Fatalf("Len %d after storing %d", m.Len(), stored)
	}
	if _, err := m.Get([]byte(fmt.Sprintf("key-%06d", stored))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused key is readable: %v", err)
	}
	for i := range stored {
		v, err := m.Get([]byte(fmt.Sprintf("key-%06d", i)))
		if err != nil || !bytes.Equal(v, bytes.Repeat([]byte{byte(i)}, 32)) {
			t.Fatalf("entry %d after ErrFull: %q, %v", i, v, err)
		}
	}
	t.Logf("sized for 200, bloat 1.5: stored %d before ErrFull (%v)", stored, fullErr)
	if stored < 200 {
		t.Fatalf("stored only %d of the 200 entries the map was sized for", stored)
	}
	// The refused writes of every kind say so, and count as no Put.
	refused := []byte(fmt.Sprintf("key-%06d", stored))
	if did, err := m.PutIfAbsent(refused, make([]byte, 32)); did || !errors.Is(err, ErrFull) {
		t.Fatalf("PutIfAbsent on a full map: %v, %v; want false, ErrFull", did, err)
	}
	if err := m.Compute(refused, func([]byte, bool) ([]byte, bool) { return make([]byte, 32), true }); !errors.Is(err, ErrFull) {
		t.Fatalf("Compute inserting into a full map: %v, want ErrFull", err)
	}
	if puts := m.Stats().Puts; puts != int64(stored) {
		t.Fatalf("Stats.Puts %d after %d stored and 3 refused", puts, stored)
	}
}

// TestPutMany: a batch over several prefetch rounds stores every key as a
// Put would (overwrites, an empty value, a key twice: the later value
// wins); a batch that fills the map stops at the first ErrFull with every
// key before it stored and none after; bad calls are refused.
func TestPutMany(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 1000})
	var keys, values [][]byte
	for i := range 70 {
		keys = append(keys, fmt.Appendf(nil, "key-%d", i))
		values = append(values, bytes.Repeat([]byte{byte(i)}, i%40))
	}
	if err := m.Put(keys[5], []byte("old value, overwritten")); err != nil {
		t.Fatal(err)
	}
	keys, values = append(keys, keys[9]), append(values, []byte("second"))
	if n, err := m.PutMany(keys, values); n != len(keys) || err != nil {
		t.Fatalf("PutMany = %d, %v", n, err)
	}
	for i, k := range keys[:70] {
		want := values[i]
		if i == 9 {
			want = []byte("second")
		}
		if got, err := m.Get(k); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Get(%s) = %q, %v; want %q", k, got, err, want)
		}
	}
	if m.Len() != 70 {
		t.Fatalf("Len %d, want 70", m.Len())
	}
	if _, err := m.PutMany(keys, values[1:]); err == nil {
		t.Error("PutMany with fewer values than keys succeeded")
	}

	small, _ := openTemp(t, &Options{Entries: 200, AverageKeySize: 8, AverageValueSize: 32, MaxBloatFactor: 1.5, MaxSize: NoGrowth})
	keys, values = keys[:0], values[:0]
	for i := range 2000 {
		keys = append(keys, fmt.Appendf(nil, "key-%06d", i))
		values = append(values, bytes.Repeat([]byte{byte(i)}, 32))
	}
	n, err := small.PutMany(keys, values)
	if !errors.Is(err, ErrFull) || n < 200 || n >= len(keys) {
		t.Fatalf("PutMany into a map sized for 200 = %d, %v; want ErrFull after at least 200", n, err)
	}
	if small.Len() != n {
		t.Fatalf("Len %d after PutMany stored %d", small.Len(), n)
	}
	for i, k := range keys {
		got, err := small.Get(k)
		switch {
		case i < n && (err != nil || !bytes.Equal(got, values[i])):
			t.Fatalf("key %d, stored before ErrFull: %q, %v", i, got, err)
		case i >= n && !errors.Is(err, ErrNotFound):
			t.Fatalf("key %d, at or after ErrFull: %q, %v; want ErrNotFound", i, got, err)
		}
	}

	path := filepath.Join(t.TempDir(), "ro")
	rw, err := Open(path, &Options{Entries: 100})
	if err != nil {
		t.Fatal(err)
	}
	rw.Close()
	ro, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.PutMany(keys[:1], values[:1]); !errors.Is(err, ErrReadOnly) {
		t.Errorf("PutMany on a read-only map: %v, want ErrReadOnly", err)
	}
}

// TestDeleteMany: a batch over several prefetch rounds removes every key it
// names, counts only those present (a repeated key once), and leaves the
// others; a read-only map refuses it.
func TestDeleteMany(t *testing.T) {
	m, path := openTemp(t, &Options{Entries: 1000})
	var all [][]byte
	for i := range 100 {
		k := fmt.Appendf(nil, "key-%d", i)
		all = append(all, k)
		if err := m.Put(k, k); err != nil {
			t.Fatal(err)
		}
	}
	var doomed [][]byte
	for i := 0; i < 100; i += 3 {
		doomed = append(doomed, all[i])
	}
	doomed = append(doomed, []byte("never stored"), all[0])
	n, err := m.DeleteMany(doomed)
	if err != nil || n != 34 {
		t.Fatalf("DeleteMany = %d, %v; want the 34 keys present", n, err)
	}
	for i, k := range all {
		_, err := m.Get(k)
		if gone := errors.Is(err, ErrNotFound); gone != (i%3 == 0) {
			t.Fatalf("key %d after DeleteMany: %v", i, err)
		}
	}
	if m.Len() != 66 {
		t.Fatalf("Len %d, want 66", m.Len())
	}
	m.Close()
	ro, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.DeleteMany(all[:1]); !errors.Is(err, ErrReadOnly) {
		t.Errorf("DeleteMany on a read-only map: %v, want ErrReadOnly", err)
	}
}

// A value too large for a tier is stored in parts, but not under a key
// longer than MaxLargeKeyBytes: neither Put nor Compute stores it then.
func TestTooLarge(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 100, AverageKeySize: 8, AverageValueSize: 16})
	huge := make([]byte, 1<<20)
	if err := m.Put([]byte("k"), huge); err != nil {
		t.Fatalf("Put of 1 MiB into a tiny map = %v", err)
	}
	long := make([]byte, MaxLargeKeyBytes+1)
	if err := m.Put(long, huge); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Put of 1 MiB under a key of 64 KiB + 1 = %v, want ErrTooLarge", err)
	}
	if err := m.Compute(long, func([]byte, bool) ([]byte, bool) { return huge, true }); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Compute to 1 MiB under a key of 64 KiB + 1 = %v, want ErrTooLarge", err)
	}
	if m.Len() != 1 {
		t.Fatal("an oversized entry was stored")
	}
}

func TestGetIntoAllocatesNothing(t *testing.T) {
	m, _ := openTemp(t, nil)
	_ = m.Put([]byte("key"), []byte("value"))
	buf := make([]byte, 0, 64)
	n := testing.AllocsPerRun(100, func() {
		if _, err := m.GetInto(buf[:0], []byte("key")); err != nil {
			t.Fatal(err)
		}
		if err := m.Put([]byte("key"), []byte("value")); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("GetInto+Put allocate %v times per call", n)
	}
}

// A read-only handle must never write the lock words (its mapping is
// PROT_READ: a write faults). Range and Get there validate optimistic reads
// instead, even while another handle rewrites the same segment non-stop.
func TestReadOnlyReadsUnderWriters(t *testing.T) {
	rw, path := openTemp(t, &Options{Entries: 1000, Segments: 1})
	for i := range 100 {
		if err := rw.Put([]byte(fmt.Sprintf("k%03d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	ro, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = rw.Put([]byte("hot"), bytes.Repeat([]byte{byte('a' + i%26)}, 1+i%90))
		}
	}()
	for range 200 {
		var rerr error
		n := 0
		for k, v := range ro.Range(&rerr) {
			if string(k) != "hot" && string(v) != "v" {
				t.Fatalf("read-only Range saw %q=%q", k, v)
			}
			n++
		}
		if rerr != nil || n < 100 {
			t.Fatalf("read-only Range: %d entries, %v", n, rerr)
		}
		if v, err := ro.Get([]byte("k042")); err != nil || string(v) != "v" {
			t.Fatalf("read-only Get = %q, %v", v, err)
		}
		if v, err := ro.Get([]byte("hot")); err == nil && bytes.Count(v, v[:1]) != len(v) {
			t.Fatalf("read-only Get saw a torn value %q", v)
		}
	}
	close(stop)
	<-done
}

// TestGetMany: GetMany answers what GetInto does key by key, across
// several of its batches, with absent keys, empty values and duplicates;
// it reuses the caller's buffers and counts hits and misses like GetInto.
func TestGetMany(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 1000})
	var keys [][]byte
	for i := range 70 {
		k := []byte(fmt.Sprintf("key-%d", i))
		keys = append(keys, k)
		switch {
		case i%7 == 3: // absent
		case i%5 == 0:
			if err := m.Put(k, nil); err != nil {
				t.Fatal(err)
			}
		default:
			if err := m.Put(k, bytes.Repeat([]byte{byte(i)}, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	keys = append(keys, keys[1], keys[3]) // duplicates, present and absent
	values := make([][]byte, len(keys))
	for i := range values {
		if i%2 == 1 {
			values[i] = make([]byte, 3, 80) // stale bytes GetMany must not keep
		} // and even ones start nil: a present empty value must still come back non-nil
	}
	before := m.Stats()
	if err := m.GetMany(keys, values); err != nil {
		t.Fatal(err)
	}
	hits := 0
	for i, k := range keys {
		want, err := m.GetInto(nil, k)
		switch {
		case errors.Is(err, ErrNotFound):
			if values[i] != nil {
				t.Errorf("key %q is absent, GetMany gave %q", k, values[i])
			}
		case err != nil:
			t.Fatal(err)
		default:
			hits++
			if values[i] == nil || !bytes.Equal(values[i], want) {
				t.Errorf("key %q: GetMany gave %q, GetInto %q", k, values[i], want)
			}
			if i%2 == 1 && len(want) > 0 && cap(values[i]) != 80 {
				t.Errorf("key %q: value in a new buffer (cap %d), not the caller's", k, cap(values[i]))
			}
		}
	}
	// Stats also counts the GetInto calls above: each key twice.
	st := m.Stats()
	if got, want := st.Hits-before.Hits, int64(2*hits); got != want {
		t.Errorf("hits counted %d, want %d", got, want)
	}
	if got, want := st.Misses-before.Misses, int64(2*(len(keys)-hits)); got != want {
		t.Errorf("misses counted %d, want %d", got, want)
	}

	if err := m.GetMany(keys, values[:3]); err == nil {
		t.Error("GetMany accepted fewer values than keys")
	}
	for i := range values {
		values[i] = make([]byte, 0, 80)
	}
	if n := testing.AllocsPerRun(20, func() {
		if err := m.GetMany(keys, values); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("GetMany allocates %v times per call with room in every value", n)
	}
	_ = m.Close()
	if err := m.GetMany(keys, values); !errors.Is(err, ErrClosed) {
		t.Errorf("GetMany on a closed map = %v, want ErrClosed", err)
	}
}

// TestGetManyUnderWriters: each value GetMany returns is one a writer
// stored whole, while writers rewrite the same keys in place.
func TestGetManyUnderWriters(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 1000, Segments: 2})
	keys := make([][]byte, 40)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("k%02d", i))
		if err := m.Put(keys[i], bytes.Repeat([]byte{'a'}, 48)); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := m.Put(keys[n%len(keys)], bytes.Repeat([]byte{'a' + byte(n%26)}, 48)); err != nil {
				done <- err
				return
			}
		}
	}()
	values := make([][]byte, len(keys))
	deadline := time.Now().Add(300 * time.Millisecond)
	for rounds := 0; rounds < 20 || time.Now().Before(deadline); rounds++ {
		if err := m.GetMany(keys, values); err != nil {
			t.Fatal(err)
		}
		for i, v := range values {
			if len(v) != 48 || !bytes.Equal(v, bytes.Repeat(v[:1], 48)) {
				t.Fatalf("key %q: torn value %q", keys[i], v)
			}
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestHugePages checks that Options.NoHugePages reaches the mapping, through
// Stats' residency figures: a map opened without it may get huge pages
// (where the filesystem caches 2 MiB folios), one opened with it never does.
func TestHugePages(t *testing.T) {
	if _, err := os.Stat("/proc/self/smaps"); err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	stats := func(noHuge bool) Stats {
		m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 50_000, NoHugePages: noHuge})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		return m.Stats()
	}
	huge, small := stats(false), stats(true)
	if huge.Resident == 0 || small.Resident == 0 {
		t.Fatalf("Resident %d and %d: Open maps the segment headers and first tiers in", huge.Resident, small.Resident)
	}
	if small.HugePageBytes != 0 {
		t.Errorf("NoHugePages: %d of %d resident bytes in huge pages", small.HugePageBytes, small.Resident)
	}
	if huge.HugePageBytes == 0 {
		t.Skip("this filesystem gives no huge pages to file mappings; nothing more to compare")
	}
	t.Logf("huge pages: %d of %d resident bytes", huge.HugePageBytes, huge.Resident)
}

// TestMovesCountedAcrossHandles: compactions and relocations are counted in
// the file, so another handle (as another process would) reads the moves
// this one made, and mapctl's stats no longer show zeros for a map whose
// writers moved values.
func TestMovesCountedAcrossHandles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, &Options{Entries: 2000, AverageKeySize: 8, AverageValueSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	keys := make([][]byte, 500)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key%05d", i)
		if err := m.Put(keys[i], []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		if err := m.Put(k, bytes.Repeat([]byte("w"), 64)); err != nil {
			t.Fatal(err)
		}
	}
	moved := m.table.Relocations.Load()
	if moved == 0 {
		t.Fatal("no value moved: the test lost its point")
	}
	other, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for name, h := range map[string]*Map{"writer": m, "other handle": other} {
		st := h.Stats()
		if !st.MovesCounted || st.Relocations != moved || st.Compactions != m.table.Compactions.Load() {
			t.Errorf("%s: moves counted %v, %d relocations and %d compactions; the writer made %d and %d",
				name, st.MovesCounted, st.Relocations, st.Compactions, moved, m.table.Compactions.Load())
		}
	}
}

// TestTooManyProcesses: a map whose every process slot is taken by a live
// handle refuses another Open with ErrTooManyProcesses, and takes it once
// a slot is free again.
func TestTooManyProcesses(t *testing.T) {
	m, path := openTemp(t, &Options{Entries: 100, MaxProcesses: 1})
	_, err := Open(path, nil)
	if !errors.Is(err, ErrTooManyProcesses) {
		t.Fatalf("second Open of a one-process map: %v, want ErrTooManyProcesses", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(path, nil)
	if err != nil {
		t.Fatalf("Open after the slot was given back: %v", err)
	}
	_ = again.Close()
}

// TestJoinWait: Open's wait for its slot is 3 x LockTimeout for usual
// timeouts, LockTimeout and an hour for long ones, and never wraps.
func TestJoinWait(t *testing.T) {
	for _, c := range []struct{ lockTimeout, want time.Duration }{
		{time.Second, 3 * time.Second},
		{30 * time.Minute, 90 * time.Minute},
		{2 * time.Hour, 3 * time.Hour},
		{100 * 365 * 24 * time.Hour, 100*365*24*time.Hour + time.Hour},
		{math.MaxInt64 - time.Minute, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64},
	} {
		if got := joinWait(c.lockTimeout); got != c.want {
			t.Errorf("joinWait(%v) = %v, want %v", c.lockTimeout, got, c.want)
		}
	}
}

// TestFileSizeIsTheCreatedFile: FileSize says the size of the file Open
// creates, for several shapes of options, and refuses what Open refuses.
func TestFileSizeIsTheCreatedFile(t *testing.T) {
	for _, o := range []*Options{
		nil,
		{Entries: 1000, AverageValueSize: 1024},
		{Entries: 200000, MaxProcesses: 200, Locks: 64},
		{Entries: 5000, Cache: true, NoChecksums: true},
	} {
		want, err := FileSize(o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		path := filepath.Join(t.TempDir(), "m")
		m, err := Open(path, o)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != want {
			t.Errorf("%+v: FileSize %d, the file has %d bytes", o, want, st.Size())
		}
	}
	if _, err := FileSize(&Options{Entries: -1}); err == nil {
		t.Error("FileSize of a negative Entries: no error")
	}
	// Open refuses a DefaultTTL for a map that is no cache: so must the
	// size of the file it would create.
	if _, err := FileSize(&Options{DefaultTTL: time.Hour}); !errors.Is(err, ErrNotCache) {
		t.Errorf("FileSize of DefaultTTL without Cache = %v, want ErrNotCache", err)
	}
}

// tiersInUse is Stats().TiersInUse without the rest of Stats, for loops
// that check it after every Put: Stats reads /proc/self/smaps, whose size
// grows with every mapping the test binary has made (Close keeps a map's
// mapping for lock-free readers), and which qemu-user builds slowly.
func tiersInUse(m *Map) int {
	return int(m.layout.Segments + m.table.ExtraTiersInUse())
}
