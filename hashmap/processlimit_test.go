//go:build linux

package hashmap

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestDefaultProcessesBoundedByTheFile: a new map has room for 4096
// processes by default, fewer where that many slots would make the
// registry more than a fifth of the file (a slot grows with the segment
// count), and never fewer than 64; the count given in Options is taken as
// it is.
func TestDefaultProcessesBoundedByTheFile(t *testing.T) {
	for _, tc := range []struct {
		opts     Options
		min, max int
	}{
		{Options{}, DefaultMaxProcesses, DefaultMaxProcesses},
		{Options{Entries: 1 << 20, AverageKeySize: 16, AverageValueSize: 64}, 1000, DefaultMaxProcesses - 1},
		{Options{Entries: 1 << 27, AverageKeySize: 8, AverageValueSize: 8}, minDefaultProcesses, DefaultMaxProcesses - 1},
		{Options{Entries: 1 << 20, AverageKeySize: 8, AverageValueSize: 8, Segments: 1 << 20}, minDefaultProcesses, 100},
		{Options{Entries: 1 << 20, MaxProcesses: 5000}, 5000, 5000},
	} {
		o, err := tc.opts.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		l, _, reg, err := plan(o)
		if err != nil {
			t.Fatalf("plan(%+v): %v", tc.opts, err)
		}
		data := l.End - l.GlobalOff
		t.Logf("Entries %d, %d segments: %d slots of %d bytes, registry %d bytes, segments %d bytes",
			l.Entries, l.Segments, reg.Slots, reg.SlotSize(), reg.Bytes(), data)
		if reg.Slots < tc.min || reg.Slots > tc.max || !reg.HighWater {
			t.Errorf("plan(%+v): %d slots (high-water mark %v), want %d..%d", tc.opts, reg.Slots, reg.HighWater, tc.min, tc.max)
		}
		if tc.opts.MaxProcesses == 0 && reg.Slots > minDefaultProcesses && reg.Bytes() > data/4+4096 {
			t.Errorf("plan(%+v): a default registry of %d bytes is more than a quarter of the segments' %d", tc.opts, reg.Bytes(), data)
		}
	}
	if n := defaultProcesses(1<<20, 1<<20); n != minDefaultProcesses {
		t.Errorf("slots as large as the segments: %d by default, want %d", n, minDefaultProcesses)
	}
}

// diskUsage is the disk the file at path takes, from its block count.
func diskUsage(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Blocks * 512
}

// TestUnclaimedSlotsTakeNoDisk: a new map reserves disk blocks for the
// registry's header and, as processes open it, for their slots, not for
// every slot: a map with room for 4096 processes takes, once created and
// opened by one, the disk a map with room for 64 takes (give or take the
// 2 MiB units blocks are reserved in), though its registry is larger by
// megabytes.
func TestUnclaimedSlotsTakeNoDisk(t *testing.T) {
	dir := t.TempDir()
	usage := map[int]int64{}
	regBytes := map[int]int64{}
	for _, procs := range []int{64, 4096} {
		path := filepath.Join(dir, "m")
		os.Remove(path)
		m, err := Open(path, &Options{Entries: 100000, AverageKeySize: 16, AverageValueSize: 64, MaxProcesses: procs, NoPrefault: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Put([]byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
		regBytes[procs] = m.reg.Layout().Bytes()
		usage[procs] = diskUsage(t, path)
		m.Close()
	}
	t.Logf("disk: %d bytes with 64 slots, %d with 4096 (registries of %d and %d bytes)", usage[64], usage[4096], regBytes[64], regBytes[4096])
	if regBytes[4096]-regBytes[64] < 16<<20 {
		t.Fatalf("registries of %d and %d bytes: too close to tell", regBytes[64], regBytes[4096])
	}
	if usage[4096]-usage[64] > 4<<20 {
		t.Fatalf("a map with room for 4096 processes takes %d bytes of disk, one with room for 64 %d", usage[4096], usage[64])
	}
}

// TestFileFromBeforeTheHighWaterMark: a file made before registries kept
// a high-water mark keeps its registry record, and so its slot count and
// a registry that is scanned whole; it opens, takes Puts and checks clean.
func TestFileFromBeforeTheHighWaterMark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	testCreateWithoutHighWater = true
	m, err := Open(path, &Options{Entries: 1000, MaxProcesses: 64})
	testCreateWithoutHighWater = false
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	m, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if l := m.reg.Layout(); l.Slots != 64 || l.HighWater || m.reg.InUse() != 64 {
		t.Fatalf("registry of a file from before the mark: %+v, %d in use", l, m.reg.InUse())
	}
	if err := m.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Fatalf("Check = %v, %v", problems, err)
	}
}

// TestFullRegistrySaysWhatToDo: an Open that finds every slot taken by a
// live process says that the count is fixed, and names the option and the
// commands that make a map with more.
func TestFullRegistrySaysWhatToDo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, &Options{Entries: 1000, MaxProcesses: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, err = Open(path, nil)
	if !errors.Is(err, ErrTooManyProcesses) {
		t.Fatalf("second Open of a map with room for one: %v, want ErrTooManyProcesses", err)
	}
	for _, want := range []string{"cannot grow in place", "Options.MaxProcesses", "mapctl create --max-processes", "mapctl dump " + path, "mapctl load"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
}

// TestCheckReadsOnlySlotsEverClaimed: Check, Stats and a recovery pass of
// a map with room for 4096 processes, one of which has it open, bring no
// more of the file into memory than those of a map with room for 64: they
// read the slots below the high-water mark, not a page of every slot.
func TestCheckReadsOnlySlotsEverClaimed(t *testing.T) {
	resident := map[int]int64{}
	for _, procs := range []int{64, 4096} {
		path := filepath.Join(t.TempDir(), "m")
		m, err := Open(path, &Options{Entries: 1000, MaxProcesses: procs, NoHugePages: true, NoPrefault: true})
		if err != nil {
			t.Fatal(err)
		}
		if problems, err := m.Check(); err != nil || len(problems) != 0 {
			t.Fatalf("Check = %v, %v", problems, err)
		}
		_ = m.Stats()
		if _, err := m.Recover(); err != nil {
			t.Fatal(err)
		}
		res, err := m.file.Residency()
		if err != nil {
			t.Fatal(err)
		}
		resident[procs] = res.Resident
		t.Logf("%d slots of %d bytes: %d bytes resident after Check, Stats and Recover", procs, m.reg.Layout().SlotSize(), res.Resident)
		m.Close()
	}
	if resident[4096]-resident[64] > 64<<10 {
		t.Fatalf("%d bytes resident with room for 4096 processes, %d with room for 64", resident[4096], resident[64])
	}
}
