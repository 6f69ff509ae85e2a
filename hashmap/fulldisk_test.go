package hashmap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// TestFullDiskIsAnError fills a small ext4 filesystem under a map, leaving
// less than a 2 MiB page free, and Puts until the map needs a new tier:
// the Put must fail with ErrFull, and every entry stored before must read
// back. With huge pages, a tier reserved alone sits in a 2 MiB folio whose
// first write needs blocks for all of it; when Allocate reserved only the
// tier, that write killed the process with SIGBUS. It needs root (to mount
// the filesystem) and mkfs.ext4; the work runs in a helper process, so a
// SIGBUS fails the test instead of killing it.
func TestFullDiskIsAnError(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a filesystem")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small filesystem")
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("no mkfs.ext4")
	}
	img, mnt := filepath.Join(t.TempDir(), "small.img"), t.TempDir()
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", img).CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("mount -o loop (no loop devices here?): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	lines := testutil.Run(t, helperCmd("full-disk", filepath.Join(mnt, "m.map")))
	if len(lines) != 1 || len(lines[0]) != 2 || lines[0][0] != "stored" {
		t.Fatalf("helper reported %v, want one line: stored N", lines)
	}
	t.Logf("stored %s entries before the disk was full", lines[0][1])
}

// helperFullDisk is the helper side of TestFullDiskIsAnError.
func helperFullDisk(path string) {
	m, err := Open(path, &Options{Entries: 20000, AverageKeySize: 16, AverageValueSize: 64, MaxBloatFactor: 4})
	if err != nil {
		testutil.Report("error %v", err)
		return
	}
	defer m.Close()
	// Fill the disk but 512 KiB: more than a tier, less than a 2 MiB page.
	fill, err := os.Create(filepath.Join(filepath.Dir(path), "fill"))
	if err != nil {
		testutil.Report("error %v", err)
		return
	}
	defer fill.Close()
	buf, size := make([]byte, 64<<10), int64(0)
	for {
		if _, err := fill.Write(buf); err != nil {
			break
		}
		size += int64(len(buf))
	}
	if err := fill.Truncate(size - 512<<10); err != nil {
		testutil.Report("error %v", err)
		return
	}
	if err := fill.Sync(); err != nil {
		testutil.Report("error %v", err)
		return
	}
	value := make([]byte, 64)
	stored := 0
	for ; ; stored++ {
		err := m.Put([]byte(fmt.Sprintf("key-%012d", stored)), value)
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil {
			testutil.Report("error Put %d: %v, want nil or ErrFull", stored, err)
			return
		}
	}
	for i := range stored {
		if _, err := m.Get([]byte(fmt.Sprintf("key-%012d", i))); err != nil {
			testutil.Report("error Get %d of %d stored: %v", i, stored, err)
			return
		}
	}
	testutil.Report("stored %d", stored)
}
