//go:build linux

package offheap

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCreateThroughADanglingLinkIsRefused: Open with Create, given a
// symbolic link whose target does not exist, refuses it with an error
// naming the link and its target, and creates nothing; without Create the
// link is a missing file, as before. A link to an existing file is still
// followed: to a map, and to an empty file, which Create makes a map.
func TestCreateThroughADanglingLinkIsRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere", "victim")
	link := filepath.Join(dir, "m.map")
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, o := range []OpenOptions{createOpts(), func() OpenOptions { o := createOpts(); o.CreateNew = true; return o }()} {
		f, err := Open(link, o)
		if f != nil {
			f.Close()
		}
		if !errors.Is(err, ErrDanglingLink) || !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), target) {
			t.Errorf("Open(link to nothing, CreateNew %v) = %v, want ErrDanglingLink naming %s and %s", o.CreateNew, err, link, target)
		}
		if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Open created the link's target: %v", err)
		}
	}
	if _, err := Open(link, OpenOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open(link to nothing) without Create = %v, want fs.ErrNotExist", err)
	}

	// A link to an empty file: Create makes the map in the file.
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(link, createOpts())
	if err != nil || !f.Created() {
		t.Fatalf("Open through a link to an empty file: %v, want the map created", err)
	}
	f.Close()
	if st, err := os.Stat(target); err != nil || st.Size() != testSize {
		t.Fatalf("the target after creation: %v, %v", st, err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the link is no longer a link: %v, %v", st, err)
	}
	// And to the map, which it opens.
	if f := mustOpen(t, link, createOpts()); f.Created() {
		t.Fatal("Open through a link to a map created it again")
	}
}
