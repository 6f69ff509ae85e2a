//go:build linux

package offheap

import (
	"bufio"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// vmaOf finds the mapping that holds r's first byte in /proc/self/smaps
// and returns its bounds and VmFlags.
func vmaOf(t testing.TB, r *Region) (start, end uintptr, flags []string) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps to check the mapping in: %v", err)
	}
	defer f.Close()
	addr := uintptr(unsafe.Pointer(&r.data[0]))
	found := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, ok := vmaBounds(line); ok {
			found = lo <= addr && addr < hi
			if found {
				start, end = lo, hi
			}
			continue
		}
		if rest, ok := strings.CutPrefix(line, "VmFlags:"); ok && found {
			return start, end, strings.Fields(rest)
		}
	}
	t.Fatalf("no mapping in /proc/self/smaps holds %#x", addr)
	return 0, 0, nil
}

func hasFlag(flags []string, flag string) bool {
	for _, f := range flags {
		if f == flag {
			return true
		}
	}
	return false
}

// TestMappingAdvice checks the hints a map file's mapping carries: random
// access always, huge pages unless NoHugePages, both over one unsplit
// mapping (a hint on part of it would split it, and with it the 2 MiB
// page that straddles the seam), whether the file was created or opened.
func TestMappingAdvice(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil {
		t.Skipf("kernel without transparent huge pages: %v", err)
	}
	for _, noHuge := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "map")
		opts := createOpts()
		opts.Size = 8 << 20
		opts.NoHugePages = noHuge
		created := mustOpen(t, path, opts)
		reopened := mustOpen(t, path, OpenOptions{NoHugePages: noHuge})
		for _, f := range []*File{created, reopened} {
			start, end, flags := vmaOf(t, f.Region)
			base := uintptr(unsafe.Pointer(&f.data[0]))
			if start != base || end != base+uintptr(f.Len()) {
				t.Errorf("NoHugePages=%v, created=%v: the file's mapping is split: %#x-%#x holds its start, want %#x-%#x",
					noHuge, f.Created(), start, end, base, base+uintptr(f.Len()))
			}
			if !hasFlag(flags, "rr") {
				t.Errorf("NoHugePages=%v, created=%v: no random-access hint (VmFlags %v)", noHuge, f.Created(), flags)
			}
			if hasFlag(flags, "hg") == noHuge {
				t.Errorf("NoHugePages=%v, created=%v: huge-page hint %v (VmFlags %v)", noHuge, f.Created(), !noHuge, flags)
			}
		}
		// Residency: everything written is resident; huge pages only where
		// asked for (and where the filesystem caches 2 MiB folios).
		if err := created.Prefault(0, created.Len(), true); err != nil {
			t.Fatal(err)
		}
		res, err := created.Residency()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case res.Resident != created.Len():
			t.Errorf("NoHugePages=%v: Residency().Resident = %d after populating all %d bytes", noHuge, res.Resident, created.Len())
		case noHuge && res.Huge != 0:
			t.Errorf("NoHugePages: %d bytes in huge pages", res.Huge)
		case res.Huge > res.Resident || res.Huge%(2<<20) != 0:
			t.Errorf("Residency() = %+v: huge pages not a whole number of 2 MiB pages within the resident bytes", res)
		case !noHuge && res.Huge == 0:
			t.Logf("huge pages asked for, none given: this filesystem or kernel does not cache files in 2 MiB folios")
		default:
			t.Logf("NoHugePages=%v: %+v", noHuge, res)
		}
	}
}

// BenchmarkRandomRead chases a random cycle through a 256 MiB map file,
// one dependent load per cache line visited: the access pattern of a hash
// lookup in a large map, where each step is a cache miss and, with small
// pages, a TLB miss too. The two variants differ only in NoHugePages.
func BenchmarkRandomRead(b *testing.B) {
	const size = 256 << 20
	for _, tc := range []struct {
		name   string
		noHuge bool
	}{{"huge-pages", false}, {"small-pages", true}} {
		b.Run(tc.name, func(b *testing.B) {
			f, err := Open(filepath.Join(b.TempDir(), "map"), OpenOptions{Create: true, Size: size, NoHugePages: tc.noHuge})
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if err := f.Prefault(HeaderSize, f.Len()-HeaderSize, true); err != nil {
				b.Fatal(err)
			}
			lines := uint32((f.Len() - HeaderSize) / 64)
			order := rand.New(rand.NewPCG(1, 2)).Perm(int(lines))
			for i, line := range order {
				*f.Uint32(HeaderSize + int64(line)*64) = uint32(order[(i+1)%len(order)])
			}
			line := uint32(order[0])
			b.ResetTimer()
			for range b.N {
				line = *f.Uint32(HeaderSize + int64(line)*64)
			}
			sinkLine = line
		})
	}
}

var sinkLine uint32

// TestAllocateWholeHugePages checks that with huge pages Allocate reserves
// the whole 2 MiB pages around a range: the first write into a 2 MiB folio
// needs blocks for all of it, so reserving less would leave a SIGBUS on a
// full disk (seen on ext4: a write into a reserved 4 KiB page of an
// otherwise sparse 2 MiB page faulted once the disk was full).
func TestAllocateWholeHugePages(t *testing.T) {
	for _, noHuge := range []bool{false, true} {
		opts := createOpts()
		opts.Size = 8 << 20
		opts.NoHugePages = noHuge
		f := mustOpen(t, filepath.Join(t.TempDir(), "map"), opts)
		before := allocatedBytes(t, f)
		if err := f.Allocate(3<<20+4096, 4096); err != nil {
			t.Fatal(err)
		}
		if err := f.Allocate(f.Len()-4096, 4096); err != nil { // the last page: the widening stops at the end
			t.Fatal(err)
		}
		got := allocatedBytes(t, f) - before
		// Whole huge pages with NoHugePages too: another process may map
		// the file with them (TestMixedHugePagesOnAFullDisk in hashmap).
		want := int64(2 * hugePageSize)
		if got == 0 {
			t.Skip("this filesystem has no fallocate")
		}
		if got != want {
			t.Errorf("NoHugePages=%v: two one-page Allocates reserved %d bytes, want %d", noHuge, got, want)
		}
		if st, _ := os.Stat(f.Path()); st.Size() != f.Len() {
			t.Errorf("NoHugePages=%v: Allocate changed the file size to %d", noHuge, st.Size())
		}
	}
}

// allocatedBytes is how much disk the file takes (st_blocks).
func allocatedBytes(t *testing.T, f *File) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}
