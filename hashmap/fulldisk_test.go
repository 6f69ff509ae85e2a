//go:build linux

package hashmap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sharedmap/sharedmap/internal/registry"
	"github.com/sharedmap/sharedmap/internal/testutil"
	"github.com/sharedmap/sharedmap/offheap"
)

// smallFilesystem mounts a 64 MiB ext4 filesystem for the test, or skips
// it: it needs root (to mount) and mkfs.ext4.
func smallFilesystem(t *testing.T) string {
	t.Helper()
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
	return mnt
}

// TestCreateOnAFullDisk: a map whose first tiers the disk cannot hold used
// to be marked ready before its blocks were reserved, so the failed create
// left a full disk and a file that opened as a map and then died of SIGBUS
// at the first Put (mapctl create showed it). The
// reservation now comes before the file is ready: Open fails with
// ErrNoSpace, gives the blocks back, and leaves an empty file that the
// next create starts over.
func TestCreateOnAFullDisk(t *testing.T) {
	mnt := smallFilesystem(t)
	path := filepath.Join(mnt, "m.map")
	free := func() uint64 {
		var st unix.Statfs_t
		if err := unix.Statfs(mnt, &st); err != nil {
			t.Fatal(err)
		}
		return st.Bfree * uint64(st.Bsize)
	}
	before := free()
	_, err := Open(path, &Options{Entries: 1_000_000, AverageKeySize: 16, AverageValueSize: 64})
	if !errors.Is(err, offheap.ErrNoSpace) {
		t.Fatalf("create of a map larger than the disk: %v, want ErrNoSpace", err)
	}
	if after := free(); after+1<<20 < before {
		t.Errorf("the failed create kept %d KiB of the disk's %d KiB free", (before-after)>>10, before>>10)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != 0 {
		t.Fatalf("the file the failed create left: %v, %v; want an empty file", st, err)
	}
	if _, err := Open(path, &Options{ReadOnly: true}); err == nil {
		t.Fatal("the empty file opened as a map")
	}
	m, err := Open(path, &Options{Entries: 10_000, AverageKeySize: 16, AverageValueSize: 64})
	if err != nil {
		t.Fatalf("a create that fits, over the failed one: %v", err)
	}
	defer m.Close()
	if err := m.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
}

// TestFullDiskIsAnError fills a small ext4 filesystem under a map, leaving
// less than a 2 MiB page free, and Puts until the map needs a new tier:
// the Put must fail with ErrFull, and every entry stored before must read
// back. With huge pages, a tier reserved alone sits in a 2 MiB folio whose
// first write needs blocks for all of it; when Allocate reserved only the
// tier, that write killed the process with SIGBUS. It needs root (to mount
// the filesystem) and mkfs.ext4; the work runs in a helper process, so a
// SIGBUS fails the test instead of killing it.
func TestFullDiskIsAnError(t *testing.T) {
	mnt := smallFilesystem(t)
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

// TestSecondOpenOnAFullDisk: the creator reserved the disk blocks from
// the global header on, not the lock arena and registry before it, where
// every process's slot, ledgers and counters are written: with the disk
// full, a second process's Open faulted (SIGBUS) in registry.Join (with
// huge pages off so that the reservation's
// start was not rounded down to 0; since reservations are widened to whole
// 2 MiB pages whatever the process asks, it is, in a file this small, and
// this test guards the two rules together).
func TestSecondOpenOnAFullDisk(t *testing.T) {
	mnt := smallFilesystem(t)
	path := filepath.Join(mnt, "m.map")
	opts := &Options{Entries: 20000, AverageKeySize: 16, AverageValueSize: 64, Segments: 1024, NoHugePages: true, MaxProcesses: 64}
	m := mustOpen(t, path, opts)
	defer m.Close()
	if err := m.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	fillDisk(t, mnt)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("a second Open on the full disk faulted: %v", r)
			}
		}()
		m2, err := Open(path, opts)
		if err != nil {
			t.Fatalf("a second Open on the full disk: %v", err)
		}
		defer m2.Close()
		if v, err := m2.Get([]byte("k")); err != nil || string(v) != "v" {
			t.Fatalf("Get through the second open: %q, %v", v, err)
		}
	}()
}

// fillDisk writes a file at mnt until the filesystem has no block left.
func fillDisk(t *testing.T, mnt string) {
	t.Helper()
	filler, err := os.Create(filepath.Join(mnt, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	block := make([]byte, 1<<20)
	for {
		if _, err := filler.Write(block); err != nil {
			break
		}
	}
	for n := 4096; n > 0; n /= 2 { // the last blocks
		for {
			if _, err := filler.Write(block[:n]); err != nil {
				break
			}
		}
	}
}

// TestMixedHugePagesOnAFullDisk: whether the page cache holds the file in
// 2 MiB folios is the file's, decided by whichever process first touches a
// range, not each process's NoHugePages. A map created with NoHugePages
// reserved its first tiers exactly; a default process then mapped the
// 2 MiB around the reservation's end as one folio, and on a full disk its
// first Put there faulted (SIGBUS). Every
// reservation is now widened to whole 2 MiB pages.
func TestMixedHugePagesOnAFullDisk(t *testing.T) {
	for _, creatorNoHuge := range []bool{false, true} {
		t.Run(fmt.Sprint("creator NoHugePages ", creatorNoHuge), func(t *testing.T) {
			mnt := smallFilesystem(t)
			path := filepath.Join(mnt, "m.map")
			m := mustOpen(t, path, &Options{Entries: 20000, AverageKeySize: 16, AverageValueSize: 64, MaxBloatFactor: 4, NoHugePages: creatorNoHuge, NoPrefault: true})
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			fillDisk(t, mnt)
			defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
			stored := 0
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("a Put by a process with huge pages on the full disk faulted after %d stored: %v", stored, r)
				}
			}()
			h, err := Open(path, &Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			for ; stored < 20000; stored++ {
				err := h.Put(fmt.Appendf(nil, "key-%012d", stored), make([]byte, 64))
				if errors.Is(err, ErrFull) || errors.Is(err, offheap.ErrNoSpace) {
					break
				}
				if err != nil {
					t.Fatalf("Put %d: %v", stored, err)
				}
			}
			if stored == 0 {
				t.Fatal("no Put succeeded on the map's own reserved first tiers")
			}
		})
	}
}

// TestJoinOnAFullDiskIsAnError: a registry slot's disk blocks are reserved
// by the Open that first claims it, not at creation. With the disk full,
// an Open whose slot lies past every reservation fails with ErrNoSpace
// (never SIGBUS in registry.Join), and the processes already in go on.
func TestJoinOnAFullDiskIsAnError(t *testing.T) {
	mnt := smallFilesystem(t)
	path := filepath.Join(mnt, "m.map")
	opts := &Options{Entries: 20000, AverageKeySize: 16, AverageValueSize: 64, Segments: 1024, NoHugePages: true, MaxProcesses: 4096}
	m := mustOpen(t, path, opts)
	defer m.Close()
	if err := m.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	// Open until the next slot ends in a 2 MiB unit no reservation covers
	// (reservations are of whole units).
	l := m.reg.Layout()
	end := func(i int) int64 { return l.Off + registry.AreaHeaderSize + int64(i+1)*l.SlotSize() }
	const unit = 2 << 20
	reserved := (end(0) + unit - 1) / unit * unit
	for i := 1; end(i) <= reserved; i++ {
		mi := mustOpen(t, path, opts)
		defer mi.Close()
	}
	fillDisk(t, mnt)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("an Open on the full disk faulted: %v", r)
			}
		}()
		for range 2 * unit / l.SlotSize() {
			mi, err := Open(path, opts)
			if errors.Is(err, offheap.ErrNoSpace) {
				return
			}
			if err != nil {
				t.Fatalf("an Open on the full disk: %v, want ErrNoSpace", err)
			}
			defer mi.Close()
		}
		t.Fatal("every Open on the full disk succeeded")
	}()
	if v, err := m.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("Get after the refused Open: %q, %v", v, err)
	}
}
