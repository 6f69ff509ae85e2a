//go:build linux

package hashmap

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
	"github.com/sharedmap/sharedmap/offheap"
)

// resizeKey and resizeValue are entry i of the resize tests: values of
// varied lengths, so that the means Resize plans with are not the old
// file's.
func resizeKey(i int) []byte { return fmt.Appendf(nil, "resize-key-%06d", i) }

func resizeValue(i int) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "v%d.", i), 1+i%7)
}

// fillResize stores entries 0..n-1 in m by PutAll.
func fillResize(t *testing.T, m *Map, n int) {
	t.Helper()
	keys, values := make([][]byte, n), make([][]byte, n)
	for i := range n {
		keys[i], values[i] = resizeKey(i), resizeValue(i)
	}
	if _, _, err := m.PutAll(keys, values); err != nil {
		t.Fatal(err)
	}
}

// checkResized opens the map at path and fails the test unless it holds
// entries 0..n-1 and others more, and Check finds nothing wrong. It
// returns the map's Stats.
func checkResized(t *testing.T, path string, n, others int) Stats {
	t.Helper()
	st := checkEntries(t, path, n, others)
	if _, err := os.Stat(path + resizeTmpSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary file is left: %v", err)
	}
	return st
}

// checkEntries is checkResized, but for the temporary file.
func checkEntries(t *testing.T, path string, n, others int) Stats {
	t.Helper()
	m := mustOpen(t, path, &Options{NoCreate: true, LockTimeout: killLockTimeout})
	defer m.Close()
	for i := range n {
		if v, err := m.Get(resizeKey(i)); err != nil || !bytes.Equal(v, resizeValue(i)) {
			t.Fatalf("%s: %q, %v", resizeKey(i), v, err)
		}
	}
	if got := m.Len(); got != n+others {
		t.Fatalf("Len %d, want %d", got, n+others)
	}
	if problems, err := m.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("Check: %v, %v", problems, err)
	}
	return m.Stats()
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// TestResizeAGrownMap: a store map grown to many times its Entries,
// resized, holds every entry in a new file made for them: more segments,
// fewer tiers in use, no growth steps; its permission bits kept, the
// counts and sizes reported as they are, and progress reported to the
// end.
func TestResizeAGrownMap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	const n = 20_000
	// No splits: the old map's chains grow long, which is what Resize
	// mends.
	m := mustOpen(t, path, &Options{Entries: 2000, AverageKeySize: 8, AverageValueSize: 8, Mode: 0o640, NoSplits: true})
	fillResize(t, m, n)
	before := m.Stats()
	m.Close()
	if before.GrowthSteps == 0 {
		t.Fatalf("the map did not grow: %+v", before)
	}
	ino := inode(t, path)
	var last, calls int64
	res, err := Resize(path, &ResizeOptions{Progress: func(done, total int64) {
		if total != n || done < last {
			t.Errorf("progress %d of %d after %d", done, total, last)
		}
		last = done
		calls++
	}})
	if err != nil {
		t.Fatal(err)
	}
	if last != n || calls == 0 {
		t.Fatalf("progress ended at %d (%d calls), want %d", last, calls, n)
	}
	t.Logf("%+v", res)
	if res.Entries != n || res.Expired != 0 {
		t.Fatalf("copied %d entries (%d expired), want %d", res.Entries, res.Expired, n)
	}
	if res.Old.GrowthSteps != before.GrowthSteps || res.Old.TiersInUse != before.TiersInUse || res.Old.Segments != before.Segments || res.Old.FileSize != before.FileSize {
		t.Fatalf("old file reported as %+v; its stats were %+v", res.Old, before)
	}
	// The tiers in use are about as many (each holds what a tier holds),
	// but in chains as long as a map created for them has, not many
	// times that.
	if res.New.GrowthSteps != 0 || res.New.TiersInUse > 2*res.New.Segments || res.Old.TiersInUse < 4*res.Old.Segments ||
		res.New.Segments <= res.Old.Segments || res.New.Capacity != n {
		t.Fatalf("new file %+v, old %+v: want no growth, chains of under 2 tiers where they were over 4, more segments, sized for %d", res.New, res.Old, n)
	}
	if res.New.AverageValueSize == res.Old.AverageValueSize || res.New.AverageKeySize != len(resizeKey(0)) {
		t.Fatalf("new file planned for keys of %d and values of %d bytes: not the means held", res.New.AverageKeySize, res.New.AverageValueSize)
	}
	if inode(t, path) == ino {
		t.Fatal("the path names the old file")
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("new file's mode: %v, %v", st.Mode(), err)
	}
	after := checkResized(t, path, n, 0)
	if after.GrowthSteps != 0 || after.TiersInUse != res.New.TiersInUse || after.FileSize != res.New.FileSize {
		t.Fatalf("the new file's stats %+v, reported %+v", after, res.New)
	}
	if _, err := os.Stat(path + resizeTmpSuffix + "-lock"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary file's lock file is left: %v", err)
	}
}

// TestResizeKeepsCacheExpiries: a cache map resized keeps each entry's
// expiry as it was, entries that never expire too, and leaves out those
// that had expired.
func TestResizeKeepsCacheExpiries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c")
	const n = 3000
	m := mustOpen(t, path, &Options{Entries: 4000, Cache: true, AverageKeySize: 16, AverageValueSize: 16})
	for i := range n {
		ttl := NoExpiry
		switch i % 3 {
		case 1:
			ttl = time.Hour + time.Duration(i)*time.Second
		case 2:
			ttl = time.Millisecond
		}
		if err := m.PutWithTTL(resizeKey(i), resizeValue(i), ttl); err != nil {
			t.Fatal(err)
		}
	}
	want := map[int]int64{}
	for i := range n {
		if i%3 == 2 {
			continue
		}
		_, exp, found, err := m.getEntry(keyHash(resizeKey(i)), resizeKey(i), nil)
		if err != nil || !found {
			t.Fatalf("%s: %v %v", resizeKey(i), found, err)
		}
		want[i] = exp
	}
	m.Close()
	time.Sleep(5 * time.Millisecond) // the third with a millisecond to live expire
	res, err := Resize(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != len(want) || !res.New.Stamps || res.New.Grows {
		t.Fatalf("%+v: want %d entries, stamps, and no growth (a cache evicts)", res, len(want))
	}
	m = mustOpen(t, path, nil)
	defer m.Close()
	if !m.layout.Cache {
		t.Fatal("the new file is no cache")
	}
	for i := range n {
		v, exp, found, err := m.getEntry(keyHash(resizeKey(i)), resizeKey(i), nil)
		switch w, ok := want[i]; {
		case err != nil:
			t.Fatal(err)
		case !ok && found:
			t.Fatalf("%s had expired, and was copied", resizeKey(i))
		case ok && (!found || exp != w || !bytes.Equal(v, resizeValue(i))):
			t.Fatalf("%s: %q expiring %d (found %v), want %q expiring %d", resizeKey(i), v, exp, found, resizeValue(i), w)
		}
	}
	if m.Len() != len(want) {
		t.Fatalf("Len %d, want %d", m.Len(), len(want))
	}
}

// TestResizeGivesAnOldFileGrowthAndStamps: a file made without tier
// stamps and without growth, resized, has both (growth as asked: the
// default bound, or none); its other choices stay.
func TestResizeGivesAnOldFileGrowthAndStamps(t *testing.T) {
	for _, c := range []struct {
		name    string
		maxSize int64
		grows   bool
	}{{"default", 0, true}, {"max-size", 256 << 20, true}, {"no-growth", NoGrowth, false}} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m")
			testCreateWithoutStamps = true
			m, err := Open(path, &Options{Entries: 2000, MaxSize: NoGrowth, NoUndo: true, Locks: 5, LockAlgorithm: "ticket-awn", MaxProcesses: 70})
			testCreateWithoutStamps = false
			if err != nil {
				t.Fatal(err)
			}
			if m.layout.Stamps || m.layout.Grows {
				t.Fatalf("made with stamps %v, growth %v: the test lost its point", m.layout.Stamps, m.layout.Grows)
			}
			fillResize(t, m, 1500)
			m.Close()
			res, err := Resize(path, &ResizeOptions{MaxSize: c.maxSize})
			if err != nil {
				t.Fatal(err)
			}
			if res.Old.Stamps || res.Old.Grows || !res.New.Stamps || res.New.Grows != c.grows {
				t.Fatalf("old %+v, new %+v", res.Old, res.New)
			}
			if c.maxSize > 0 && res.New.MaxFileSize > c.maxSize {
				t.Fatalf("grows to %d, asked for at most %d", res.New.MaxFileSize, c.maxSize)
			}
			checkResized(t, path, 1500, 0)
			m = mustOpen(t, path, nil)
			defer m.Close()
			st := m.Stats()
			if st.UndoRecords || st.Locks != 5 || st.LockAlgorithm != "ticket-awn" || st.Capacity != 2000 || m.reg.Layout().Slots != 70 {
				t.Fatalf("choices not kept: undo %v, %d locks of %s, capacity %d, %d slots", st.UndoRecords, st.Locks, st.LockAlgorithm, st.Capacity, m.reg.Layout().Slots)
			}
		})
	}
}

// TestResizeKeepsNoSplits: a map made with NoSplits, resized, keeps
// its segments in a new file that does not split either, unless the
// caller asks for splits; a map that splits, resized, splits, unless the
// caller asks for none.
func TestResizeKeepsNoSplits(t *testing.T) {
	for _, c := range []struct {
		name       string
		noSplits   bool // the old file's
		ro         ResizeOptions
		wantSplits bool
	}{
		{"no-splits kept", true, ResizeOptions{}, false},
		{"splits kept", false, ResizeOptions{}, true},
		{"splits asked for", true, ResizeOptions{Splits: true}, true},
		{"no splits asked for", false, ResizeOptions{NoSplits: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m")
			m := mustOpen(t, path, &Options{Entries: 2000, AverageKeySize: 8, AverageValueSize: 8, NoSplits: c.noSplits})
			if !m.layout.Grows || m.layout.Splits == c.noSplits {
				t.Fatalf("made with growth %v, splits %v: the test lost its point", m.layout.Grows, m.layout.Splits)
			}
			fillResize(t, m, 3000)
			m.Close()
			res, err := Resize(path, &c.ro)
			if err != nil {
				t.Fatal(err)
			}
			if res.Old.Splits != !c.noSplits || res.New.Splits != c.wantSplits || !res.New.Grows {
				t.Fatalf("old %+v, new %+v: want a new file that grows, splits %v", res.Old, res.New, c.wantSplits)
			}
			checkResized(t, path, 3000, 0)
			m = mustOpen(t, path, &Options{NoCreate: true})
			defer m.Close()
			if st := m.Stats(); m.layout.Splits != c.wantSplits || (st.MaxSegments > st.Segments) != c.wantSplits {
				t.Fatalf("the new file splits %v (%d segments, up to %d), want %v", m.layout.Splits, st.Segments, st.MaxSegments, c.wantSplits)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "m")
	mustOpen(t, path, &Options{Entries: 1000}).Close()
	if _, err := Resize(path, &ResizeOptions{Splits: true, NoSplits: true}); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("Resize with Splits and NoSplits: %v, want ErrBadOptions", err)
	}
}

// TestResizeRefusedWhileAWriterHasItOpen: a process with the map open for
// writing makes Resize refuse, naming it, and change nothing.
func TestResizeRefusedWhileAWriterHasItOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 1000})
	fillResize(t, m, 500)
	m.Close()
	cmd := helperCmd("hold-put", path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, cmd)
	h.expect(t, "put", 30*time.Second)
	sum := fileSum(t, path)
	_, err = Resize(path, nil)
	if !errors.Is(err, ErrNotAlone) || !strings.Contains(err.Error(), strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("Resize with a writer (pid %d): %v, want ErrNotAlone naming it", cmd.Process.Pid, err)
	}
	if fileSum(t, path) != sum {
		t.Fatal("the refused Resize changed the file")
	}
	if _, err := os.Stat(path + resizeTmpSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused Resize left a file: %v", err)
	}
	stdin.Close()
	if _, err := h.rest(); err != nil {
		t.Fatal(err)
	}
	if _, err := Resize(path, nil); err != nil {
		t.Fatalf("Resize once the writer closed: %v", err)
	}
	checkResized(t, path, 500, 1) // and the helper's key
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestOpenDuringResizeOpensTheNewFile: a process that opens the map for
// writing while a Resize copies it (it has the old file open before the
// rename) waits, then joins the new file: its Put is there, with every
// entry.
func TestOpenDuringResizeOpensTheNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	const n = 2000
	m := mustOpen(t, path, &Options{Entries: 500})
	fillResize(t, m, n)
	m.Close()
	var h *helperProc
	testResizeStep = func(step string) {
		if step != "copied" {
			return
		}
		cmd := helperCmd("writer-put", path)
		h = startHelper(t, cmd)
		// Until the helper has the old file open, and a little more for
		// it to reach the registry's recovery lock.
		if !testutil.WaitFor(30*time.Second, func() bool { return hasOpen(cmd.Process.Pid, path) }) {
			t.Error("the helper did not open the map")
		}
		time.Sleep(200 * time.Millisecond)
	}
	defer func() { testResizeStep = func(string) {} }()
	if _, err := Resize(path, nil); err != nil {
		t.Fatal(err)
	}
	if h == nil {
		t.Fatal("Resize passed no step \"copied\"")
	}
	h.expect(t, "put", 60*time.Second)
	m = mustOpen(t, path, nil)
	defer m.Close()
	if v, err := m.Get([]byte("other")); err != nil || string(v) != "user" {
		t.Fatalf("the Put of the process that opened during the Resize: %q, %v: it used the old file", v, err)
	}
	if m.Len() != n+1 {
		t.Fatalf("Len %d, want %d", m.Len(), n+1)
	}
}

// hasOpen reports whether process pid has the file at path open.
func hasOpen(pid int, path string) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && target == path {
			return true
		}
	}
	return false
}

// helperResize runs the resize tests' helper roles; it reports whether
// role was one. "resize-die" (args: step) resizes the map and kills
// itself with SIGKILL at the named step.
func helperResize(role string) bool {
	if role == "resize-hold" {
		// Resize, held at the step HASHMAP_ARGS names until stdin closes.
		step := os.Getenv("HASHMAP_ARGS")
		testResizeStep = func(s string) {
			if s == step {
				testutil.Report("at %s", s)
				_, _ = io.Copy(io.Discard, os.Stdin)
			}
		}
		_, err := Resize(os.Getenv("HASHMAP_FILE"), nil)
		testutil.Report("finished %v", err)
		return true
	}
	if role != "resize-die" {
		return false
	}
	step := os.Getenv("HASHMAP_ARGS")
	testResizeStep = func(s string) {
		if s == step {
			testutil.Report("at %s", s)
			_ = os.Stdout.Sync()
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	_, err := Resize(os.Getenv("HASHMAP_FILE"), nil)
	testutil.Report("finished %v", err)
	return true
}

// TestResizeSurvivesADeathAtEveryStep: a Resize killed at each of its
// steps leaves a map that opens with every entry, clean to Check (the old
// file before the rename, the new one after), and a Resize after it
// finishes the job.
func TestResizeSurvivesADeathAtEveryStep(t *testing.T) {
	const n = 3000
	for _, step := range []string{"locked", "measured", "created", "copied", "synced", "renamed"} {
		t.Run(step, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m")
			m := mustOpen(t, path, &Options{Entries: 300, AverageKeySize: 8, AverageValueSize: 8})
			fillResize(t, m, n)
			segs := m.Stats().Segments
			m.Close()
			lines := runKilled(t, helperCmd("resize-die", path, step))
			if len(lines) != 1 || lines[0][0] != "at" {
				t.Fatalf("the helper did not die at %q: %v", step, lines)
			}
			renamed := checkEntries(t, path, n, 0).Segments != segs
			if renamed != (step == "renamed") {
				t.Fatalf("after a death at %q the path has the %s file", step, map[bool]string{true: "new", false: "old"}[renamed])
			}
			res, err := Resize(path, nil)
			if err != nil {
				t.Fatalf("Resize after a death at %q: %v", step, err)
			}
			if res.Entries != n {
				t.Fatalf("Resize after a death at %q copied %d entries, want %d", step, res.Entries, n)
			}
			checkResized(t, path, n, 0)
			if _, err := os.Stat(path + resizeTmpSuffix + "-lock"); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a temporary lock file is left: %v", err)
			}
		})
	}
}

// TestResizeOnAFullDisk: a Resize whose new file the disk cannot hold
// fails with ErrNoSpace, removes what it wrote, and leaves the old file as
// it was.
func TestResizeOnAFullDisk(t *testing.T) {
	mnt := smallFilesystem(t)
	path := filepath.Join(mnt, "m")
	m := mustOpen(t, path, &Options{Entries: 20_000, AverageKeySize: 16, AverageValueSize: 1000, NoPrefault: true})
	fillResize(t, m, 100)
	big := bytes.Repeat([]byte("x"), 1000)
	for i := 100; i < 20_000; i++ {
		if err := m.Put(fmt.Appendf(nil, "big-%06d", i), big); err != nil {
			t.Fatal(err)
		}
	}
	m.Close()
	sum := fileSum(t, path)
	_, err := Resize(path, nil)
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Resize on a full disk: %v, want ErrNoSpace", err)
	}
	t.Log(err)
	if fileSum(t, path) != sum {
		t.Fatal("the failed Resize changed the file")
	}
	left, _ := filepath.Glob(filepath.Join(mnt, "m.resize-tmp*"))
	if len(left) > 0 {
		t.Fatalf("the failed Resize left %v", left)
	}
	m = mustOpen(t, path, nil)
	defer m.Close()
	if m.Len() != 20_000 {
		t.Fatalf("Len %d after the failed Resize", m.Len())
	}
}

// TestResizeThroughASymbolicLink: the map a link leads to is resized in
// its own directory, and the link stays a link to it.
func TestResizeThroughASymbolicLink(t *testing.T) {
	dir := t.TempDir()
	path, link := filepath.Join(dir, "m"), filepath.Join(t.TempDir(), "link")
	m := mustOpen(t, path, &Options{Entries: 500})
	fillResize(t, m, 2000)
	m.Close()
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Resize(link, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link after Resize: %v, %v", st, err)
	}
	checkResized(t, path, 2000, 0)
}

// TestResizeAVersion1File: a file whose header is format version 1, which
// opens only read-only, is resized into a current file that opens for
// writing with every entry: Resize reads older formats.
func TestResizeAVersion1File(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	want, _ := version1Map(t, path, 300)
	if _, err := Open(path, nil); !errors.Is(err, ErrNeedsUpgrade) {
		t.Fatalf("writable Open of the version-1 file: %v", err)
	}
	res, err := Resize(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != len(want) {
		t.Fatalf("copied %d entries, want %d", res.Entries, len(want))
	}
	m := mustOpen(t, path, nil)
	defer m.Close()
	for k, v := range want {
		if got, err := m.Get([]byte(k)); err != nil || string(got) != v {
			t.Fatalf("%q: %q, %v", k, got, err)
		}
	}
	if m.Len() != len(want) {
		t.Fatalf("Len %d, want %d", m.Len(), len(want))
	}
}

// TestResizeRefusedUntilTheDeadAreRecovered: a process killed holding a
// segment lock leaves the map to recovery; Resize refuses it until then,
// saying so, and resizes it after.
func TestResizeRefusedUntilTheDeadAreRecovered(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, helperOpts)
	fillResize(t, m, 1000)
	m.Close()
	cmd := helperCmd("hold-key", path)
	h := startHelper(t, cmd)
	h.expect(t, "held", 30*time.Second)
	_ = cmd.Process.Kill()
	_, _ = h.rest()
	_, err := Resize(path, nil)
	if !errors.Is(err, ErrNotAlone) || !strings.Contains(err.Error(), "mapctl recover") || !strings.Contains(err.Error(), strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("Resize with a dead process unrecovered: %v", err)
	}
	mustOpen(t, path, nil).Close() // recovers
	if _, err := Resize(path, nil); err != nil {
		t.Fatalf("Resize after recovery: %v", err)
	}
	checkResized(t, path, 1000, 0)
}

// TestResizeRefusesADamagedMap: an entry that fails its checksum makes
// Resize refuse (it would be lost in the copy) and change nothing.
func TestResizeRefusesADamagedMap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 1000})
	fillResize(t, m, 100)
	if err := m.Put([]byte("beta"), []byte("VALUE-TO-DAMAGE")); err != nil {
		t.Fatal(err)
	}
	m.Close()
	flipInFile(t, path, "VALUE-TO-DAMAGE", 0)
	sum := fileSum(t, path)
	_, err := Resize(path, nil)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("Resize of a damaged map: %v, want ErrCorrupt", err)
	}
	if fileSum(t, path) != sum {
		t.Fatal("the refused Resize changed the file")
	}
	if _, err := os.Stat(path + resizeTmpSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused Resize left a file: %v", err)
	}
}

// TestResizeSizesByTheEntriesATierHolds: a large value (stored in parts)
// does not count in the means the new file is sized by, which would
// otherwise plan tiers to hold one each, and the new file stores large
// values too.
func TestResizeSizesByTheEntriesATierHolds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 1000, AverageKeySize: 8, AverageValueSize: 100})
	for i := range 10 {
		if err := m.Put([]byte(fmt.Sprintf("small-%d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	if err := m.Put([]byte("big"), big); err != nil {
		t.Fatal(err)
	}
	oldTier := m.layout.TierSize
	m.Close()
	res, err := Resize(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != 11 || res.New.AverageValueSize > 8 {
		t.Fatalf("resized to %+v from %+v: want 11 entries, sized for the small values", res.New, res.Old)
	}
	m = mustOpen(t, path, nil)
	// The file's size says little of its sizing once it may split (its
	// first tiers for every segment it may split into are laid out as
	// holes): its tiers do.
	if m.layout.TierSize > oldTier/2 {
		t.Fatalf("resized to tiers of %d bytes from %d: want tiers sized for the small values", m.layout.TierSize, oldTier)
	}
	defer m.Close()
	if !m.largeValues() {
		t.Fatal("the resized map stores no large values")
	}
	if v, err := m.Get([]byte("big")); err != nil || !bytes.Equal(v, big) {
		t.Fatalf("Get of the large value after Resize: %d bytes, %v", len(v), err)
	}
}

// TestResizeWhileAnotherRuns: a Resize of a path another process is
// resizing fails at once, saying so and naming that process, and changes
// nothing; the first one finishes.
func TestResizeWhileAnotherRuns(t *testing.T) {
	const n = 2000
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 300, AverageKeySize: 8, AverageValueSize: 8})
	fillResize(t, m, n)
	m.Close()
	cmd := helperCmd("resize-hold", path, "created")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, cmd)
	h.expect(t, "at", 30*time.Second)
	sum := fileSum(t, path)
	tmp, err := os.ReadFile(path + resizeTmpSuffix)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Resize(path, nil)
	if !errors.Is(err, ErrNotAlone) || !strings.Contains(err.Error(), "another resize") || !strings.Contains(err.Error(), strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("Resize while pid %d resizes: %v; want ErrNotAlone saying a resize is running, naming the pid", cmd.Process.Pid, err)
	}
	if fileSum(t, path) != sum {
		t.Fatal("the refused Resize changed the file")
	}
	if now, err := os.ReadFile(path + resizeTmpSuffix); err != nil || !bytes.Equal(now, tmp) {
		t.Fatalf("the refused Resize touched the running one's new file: %v", err)
	}
	stdin.Close()
	lines, err := h.rest()
	if err != nil || len(lines) != 1 || strings.Join(lines[0], " ") != "finished <nil>" {
		t.Fatalf("the first Resize: %v %v", lines, err)
	}
	checkResized(t, path, n, 0)
}

// TestResizeCancelled: a Resize whose context ends before the rename
// removes its new file and leaves the old one as it was.
func TestResizeCancelled(t *testing.T) {
	const n = 3000
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 300, AverageKeySize: 8, AverageValueSize: 8})
	fillResize(t, m, n)
	m.Close()
	sum := fileSum(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := ResizeContext(ctx, path, &ResizeOptions{Progress: func(done, total int64) {
		if _, err := os.Stat(path + resizeTmpSuffix); err != nil {
			t.Errorf("no new file while copying: %v", err)
		}
		cancel()
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled Resize: %v, want context.Canceled", err)
	}
	for _, p := range []string{path + resizeTmpSuffix, offheap.LockFilePath(path + resizeTmpSuffix)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p, err)
		}
	}
	if fileSum(t, path) != sum {
		t.Fatal("the cancelled Resize changed the file")
	}
	if _, err := Resize(path, nil); err != nil {
		t.Fatal(err)
	}
	checkResized(t, path, n, 0)
}
