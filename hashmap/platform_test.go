package hashmap

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sharedmap/sharedmap/offheap"
)

// TestOpenRunsOnLinuxOnly: on Linux, Open creates a map and Salvage reads
// it. On every other platform both return ErrUnsupported, matching
// offheap.ErrUnsupported too, with a message that names the platform and
// what it lacks, and Open leaves no file behind. This file builds on
// every platform, so the other side is at least compiled (CI vets it
// for darwin, freebsd and windows) where it cannot run.
func TestOpenRunsOnLinuxOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "test.map")
	m, err := Open(path, &Options{Entries: 100})
	if runtime.GOOS == "linux" {
		if err != nil {
			t.Fatalf("Open on Linux: %v", err)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		s, _, err := Salvage(path, nil)
		if err != nil {
			t.Fatalf("Salvage on Linux: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err == nil {
		m.Close()
		t.Fatalf("Open on %s succeeded, want ErrUnsupported", runtime.GOOS)
	}
	unsupported(t, "Open", err)
	if _, serr := os.Stat(path); !errors.Is(serr, fs.ErrNotExist) {
		t.Errorf("Open on %s left %s behind (stat: %v)", runtime.GOOS, path, serr)
	}
	// A file that exists is refused the same way, and left as it is.
	if err := os.WriteFile(path, []byte("not a map"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Salvage(path, nil); err == nil {
		t.Fatalf("Salvage on %s succeeded, want ErrUnsupported", runtime.GOOS)
	} else {
		unsupported(t, "Salvage", err)
	}
}

// unsupported checks that err, from op, is the refusal of a platform
// other than Linux.
func unsupported(t *testing.T, op string, err error) {
	t.Helper()
	if !errors.Is(err, ErrUnsupported) || !errors.Is(err, offheap.ErrUnsupported) {
		t.Errorf("%s on %s: %v, want ErrUnsupported and offheap.ErrUnsupported", op, runtime.GOOS, err)
	}
	if !strings.Contains(err.Error(), "Linux") {
		t.Errorf("%s on %s: %q does not say that sharedmap runs on Linux", op, runtime.GOOS, err)
	}
}
