//go:build linux

package hashmap

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadOnlySyncWritesTheFile: Sync through a map opened read-only
// writes the file's dirty pages, as its doc promises of every change by
// any process. It returned nil and wrote nothing: the kernel makes a
// shared mapping of a read-only descriptor private, where msync reaches
// no file; it now calls fdatasync.
func TestReadOnlySyncWritesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	w := mustOpen(t, p, &Options{Entries: 20000, AverageKeySize: 16, AverageValueSize: 64})
	defer w.Close()
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		if err := w.Put(fmt.Appendf(nil, "key-%08d", i), make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
	}
	ro := mustOpen(t, p, &Options{ReadOnly: true})
	defer ro.Close()
	before := dirtyPages(t, p)
	if before == 0 {
		t.Skip("no dirty pages to see (written back already, or a filesystem without writeback)")
	}
	if err := ro.Sync(); err != nil {
		t.Fatalf("read-only Sync: %v", err)
	}
	if after := dirtyPages(t, p); after != 0 {
		t.Errorf("read-only Sync returned nil with %d of the file's %d dirty pages still dirty", after, before)
	}
}

// dirtyPages is the number of dirty page-cache pages of the file at path,
// by cachestat(2) (Linux 6.5; the test skips without it).
func dirtyPages(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cs unix.Cachestat_t
	if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &cs, 0); err != nil {
		t.Skipf("cachestat: %v", err)
	}
	return cs.Dirty
}
