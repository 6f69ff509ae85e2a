//go:build linux

package offheap

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestOpenAfterAReplacementOpensTheNewFile: an Open that waits for the
// creation lock of a file while its holder renames another file over the
// path ends on the file the path names then, not on the one it waited
// on. The file waited on is empty, so that the Open (with Create) would
// otherwise initialize it, unseen under its lost name.
func TestOpenAfterAReplacementOpensTheNewFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "map")
	next := filepath.Join(dir, "next")
	o := createOpts()
	o.Layout = []byte("the new file")
	f := mustOpen(t, next, o)
	f.Close()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	old, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if ok, err := tryFlock(old, true); !ok || err != nil {
		t.Fatalf("flock: %v %v", ok, err)
	}
	type opened struct {
		f   *File
		err error
	}
	done := make(chan opened, 1)
	go func() {
		f, err := Open(path, createOpts())
		done <- opened{f, err}
	}()
	time.Sleep(50 * time.Millisecond) // the Open waits for the lock
	select {
	case r := <-done:
		t.Fatalf("Open did not wait for the creation lock: %v", r.err)
	default:
	}
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
	if err := unflock(old); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.f.Close()
	if r.f.Created() || string(r.f.Layout()) != "the new file" {
		t.Fatalf("Open ended on another file than the path's: created %v, layout %q", r.f.Created(), r.f.Layout())
	}
	if st, err := old.Stat(); err != nil || st.Size() != 0 {
		t.Fatalf("the replaced file was written: %v, %v", st, err)
	}
}

// TestOpenExclusive: OpenExclusive holds the creation lock until Close
// (a second one waits for it), sees a grown file whole, and Replaced
// tells when the path names another file.
func TestOpenExclusive(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "map")
	f := mustOpen(t, path, createOpts())
	f.Close()
	x, err := OpenExclusive(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(x.Layout()) != "layout-v1" || x.Length() != testSize {
		t.Fatalf("layout %q, length %d", x.Layout(), x.Length())
	}
	fd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if ok, _ := tryFlock(fd, false); ok {
		t.Fatal("a shared flock was granted while OpenExclusive held the file")
	}
	if replaced, err := x.Replaced(); err != nil || replaced {
		t.Fatalf("Replaced before any rename: %v, %v", replaced, err)
	}
	other := filepath.Join(dir, "other")
	o := createOpts()
	o.Layout = []byte("other")
	mustOpen(t, other, o).Close()
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	if replaced, err := x.Replaced(); err != nil || !replaced {
		t.Fatalf("Replaced after a rename over the path: %v, %v", replaced, err)
	}
	x.Close()
	if ok, err := tryFlock(fd, true); !ok || err != nil {
		t.Fatalf("the lock outlived Close: %v, %v", ok, err)
	}
}
