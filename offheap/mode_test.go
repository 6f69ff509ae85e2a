//go:build linux

package offheap

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestCreatedFileIsPrivateWhateverTheUmask(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for _, c := range []struct {
		mode, want fs.FileMode
	}{
		{0, 0o600},
		{0o640, 0o640},
		{0o666, 0o666}, // exactly as asked: the umask's 022 does not apply
		{0o604, 0o604},
	} {
		path := filepath.Join(t.TempDir(), "map")
		o := createOpts()
		o.Mode = c.mode
		mustOpen(t, path, o)
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != c.want {
			t.Errorf("Mode %#o under umask 022: file created %#o, want %#o", c.mode, got, c.want)
		}
	}
}

func TestModeBeyondPermissionBitsIsRefused(t *testing.T) {
	o := createOpts()
	o.Mode = fs.ModeSetuid | 0o600
	_, err := Open(filepath.Join(t.TempDir(), "map"), o)
	if !errors.Is(err, errBadOptions) {
		t.Fatalf("Mode with setuid: %v, want errBadOptions", err)
	}
}

func TestModeOfAnExistingFileIsLeftAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map")
	mustOpen(t, path, createOpts())
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	o := createOpts()
	o.Mode = 0o600
	mustOpen(t, path, o)
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o640 {
		t.Fatalf("reopening with Mode 0600 changed an existing map's mode to %#o", st.Mode().Perm())
	}
}

// A reader of a ready map may hold flock(2) on it, shared or exclusive
// (a read-only descriptor takes either); opens of the map, creating ones
// included, must not wait for it.
func TestFlockOnAReadyFileDoesNotStallOpens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map")
	mustOpen(t, path, createOpts()).Close()
	for _, how := range []int{unix.LOCK_SH, unix.LOCK_EX} {
		rd, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(int(rd.Fd()), how|unix.LOCK_NB); err != nil {
			t.Fatal(err)
		}
		for _, o := range []OpenOptions{createOpts(), {}, {ReadOnly: true}} {
			o.initTimeout = 2 * time.Second
			start := time.Now()
			f, err := Open(path, o)
			if err != nil {
				t.Fatalf("flock %d held by a reader: Open(Create %v, ReadOnly %v): %v", how, o.Create, o.ReadOnly, err)
			}
			f.Close()
			if d := time.Since(start); d > time.Second {
				t.Errorf("flock %d held by a reader: Open took %v", how, d)
			}
		}
		rd.Close()
	}
}

// Where the creation lock does matter (a file being created), an open that
// times out names the lock that held it up.
func TestInitTimeoutNamesTheFlockHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if err := unix.Flock(int(rd.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	o := createOpts()
	o.initTimeout = 50 * time.Millisecond
	_, err = Open(path, o)
	if !errors.Is(err, errInitTimeout) {
		t.Fatalf("create under a reader's flock: %v, want errInitTimeout", err)
	}
	if want := "FLOCK read lock"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name the holder (%q)", err, want)
	}
}
