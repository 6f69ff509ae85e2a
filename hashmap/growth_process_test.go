//go:build linux

package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/internal/testutil"
)

func init() {
	opsRoles["grow-writer"] = growWriter
	opsRoles["grow-reader"] = growReader
	opsRoles["grow-die"] = growDie
}

// growthKey is the i-th key of writer w in the growth tests.
func growthKey(w, i int) []byte { return fmt.Appendf(nil, "w%d-%08d", w, i) }

// growWriter (args: writer, puts) stores its keys, then its done key
// ("failed" as its value if a Put failed, so that readers stop too).
func growWriter(m *Map, args []string) error {
	w, n := argInt(args, 0), argInt(args, 1)
	done := fmt.Appendf(nil, "done-%d", w)
	for i := range n {
		k := growthKey(w, i)
		if err := m.Put(k, growthValue(k)); err != nil {
			_ = m.Put(done, []byte("failed"))
			return fmt.Errorf("writer %d, Put %d: %w", w, i, err)
		}
	}
	testutil.Report("wrote %d", n)
	return m.Put(done, []byte("done"))
}

// growReader (args: writers, puts) reads keys of the writers at random
// while they write, until every writer's done key is there (or a time
// bound passes, in case a writer died without one): a key found must hold
// its own value, whole.
func growReader(m *Map, args []string) error {
	writers, n := argInt(args, 0), argInt(args, 1)
	reads, found := 0, 0
	deadline := time.Now().Add(20 * time.Minute)
	for time.Now().Before(deadline) {
		for range 1000 {
			k := growthKey(rand.IntN(writers), rand.IntN(n))
			v, err := m.Get(k)
			switch {
			case err == nil:
				found++
				if !bytes.Equal(v, growthValue(k)) {
					return fmt.Errorf("read %s: %q, torn or another key's", k, v)
				}
			case !errors.Is(err, ErrNotFound):
				return fmt.Errorf("read %s: %w", k, err)
			}
			reads++
		}
		done := 0
		for w := range writers {
			if ok, err := m.Contains(fmt.Appendf(nil, "done-%d", w)); err == nil && ok {
				done++
			}
		}
		if done == writers {
			testutil.Report("read %d %d", reads, found)
			return nil
		}
	}
	return fmt.Errorf("the writers did not finish in 20 minutes")
}

// growthPuts is how many keys each writer of TestMapGrowsUnderWritersAndReaders
// stores: GROWTH_PUTS, or a count that keeps the test to seconds (with
// -short, as under an emulator, one that still makes the file grow).
func growthPuts() int {
	if n, err := strconv.Atoi(os.Getenv("GROWTH_PUTS")); err == nil && n > 0 {
		return n
	}
	if testing.Short() {
		return 8_000
	}
	return 25_000
}

// TestMapGrowsUnderWritersAndReaders: a map created for 10,000 entries
// takes 4 writer processes' keys at once, many times what it was sized
// for, while 2 reader processes read: the file grows under them, no
// reader sees a torn or wrong value, and at the end every key reads back
// and Check is clean; on a map that splits, its segments split under
// them instead. GROWTH_PUTS=1250000 makes it the 5,000,000-Put run.
func TestMapGrowsUnderWritersAndReaders(t *testing.T) {
	for _, splits := range []bool{true, false} {
		t.Run(fmt.Sprintf("splits=%v", splits), func(t *testing.T) { testMapGrowsUnderWritersAndReaders(t, splits) })
	}
}

// testMapGrowsUnderWritersAndReaders is TestMapGrowsUnderWritersAndReaders
// on a map that splits its segments as it fills (splits), or one that
// keeps them and grows its file.
func testMapGrowsUnderWritersAndReaders(t *testing.T, splits bool) {
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 10_000, AverageKeySize: 14, AverageValueSize: 42, MaxSize: 4 << 30, NoSplits: !splits})
	start := m.Stats()
	const writers, readers = 4, 2
	n := growthPuts()
	var cmds []*exec.Cmd
	for w := range writers {
		cmds = append(cmds, helperCmd("grow-writer", path, strconv.Itoa(w), strconv.Itoa(n)))
	}
	for range readers {
		cmds = append(cmds, helperCmd("grow-reader", path, strconv.Itoa(writers), strconv.Itoa(n)))
	}
	wrote, read := 0, 0
	for _, r := range testutil.Run(t, cmds...) {
		switch r[0] {
		case "wrote":
			wrote++
		case "read":
			read++
			t.Logf("a reader read %s keys, found %s", r[1], r[2])
		default:
			t.Errorf("helper: %v", r)
		}
	}
	if wrote != writers || read != readers {
		t.Fatalf("%d writers and %d readers finished, want %d and %d", wrote, read, writers, readers)
	}
	end := m.Stats()
	switch {
	case splits && (end.MaxSegments <= start.Segments || end.Segments <= start.Segments):
		t.Fatalf("the map took %d keys sized for 10,000 without splitting: %+v", writers*n, end)
	case !splits && (end.GrowthSteps == 0 || end.FileSize <= start.FileSize):
		t.Fatalf("the map took %d keys sized for 10,000 without growing: %+v", writers*n, end)
	}
	t.Logf("%d keys: %d -> %d segments of %d, grew %d times, %d -> %d tiers, %d -> %d bytes", writers*n, start.Segments, end.Segments, end.MaxSegments,
		end.GrowthSteps, start.TiersMax, end.TiersMax, start.FileSize, end.FileSize)
	for w := range writers {
		for i := range n {
			k := growthKey(w, i)
			if v, err := m.Get(k); err != nil || !bytes.Equal(v, growthValue(k)) {
				t.Fatalf("Get %s after the writers: %q, %v", k, v, err)
			}
		}
	}
	if m.Len() != writers*n+writers {
		t.Fatalf("Len %d, want %d", m.Len(), writers*n+writers)
	}
	if problems, err := m.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("Check of the grown map: %v, %v", problems, err)
	}
}

// growDie (args: step) stores keys until the file grows, and kills
// itself with SIGKILL at the named step of the growth, first reporting
// how many Puts had returned.
func growDie(m *Map, args []string) error {
	stored := 0
	testhook.OnGrowStep = func(step string) {
		if step == args[0] {
			testutil.Report("stored %d", stored)
			_ = os.Stdout.Sync()
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	for ; ; stored++ {
		k := growthKey(9, stored)
		if err := m.Put(k, growthValue(k)); err != nil {
			return err
		}
	}
}

// TestGrowthSurvivesADeathAtEveryStep: a writer killed at each step of
// lengthening the file (before it, after the ftruncate, after the log)
// leaves a file that opens, holds every key whose Put had returned, is
// clean to Check, and grows on when the next writer needs room.
func TestGrowthSurvivesADeathAtEveryStep(t *testing.T) {
	steps := []string{"before", "grown", "logged"}
	if testing.Short() {
		steps = steps[1:2] // the file grown, the step not yet logged
	}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m")
			// No splits: the file must grow, which a map that splits does
			// only once its splits are done (see TestGrownMapSplits).
			m := mustOpen(t, path, &Options{Entries: 2000, AverageKeySize: 14, AverageValueSize: 42, Segments: 2, LockTimeout: killLockTimeout, NoSplits: true})
			m.Close()
			stored := -1
			cmd := helperCmd("grow-die", path, step)
			lines := runKilled(t, cmd)
			for _, r := range lines {
				if r[0] == "stored" {
					stored, _ = strconv.Atoi(r[1])
				}
			}
			if stored < 0 {
				t.Fatalf("the writer did not reach step %q: %v", step, lines)
			}
			m = mustOpen(t, path, &Options{LockTimeout: killLockTimeout})
			defer m.Close()
			for i := range stored {
				k := growthKey(9, i)
				if v, err := m.Get(k); err != nil || !bytes.Equal(v, growthValue(k)) {
					t.Fatalf("key %d of %d stored before the death at %q: %q, %v", i, stored, step, v, err)
				}
			}
			if problems, err := m.Check(); err != nil || len(problems) > 0 {
				t.Fatalf("Check after a death at %q: %v, %v", step, problems, err)
			}
			grown := m.Stats().GrowthSteps
			for i := stored; i < 4*stored; i++ {
				k := growthKey(9, i)
				if err := m.Put(k, growthValue(k)); err != nil {
					t.Fatalf("Put %d after the death at %q: %v", i, step, err)
				}
			}
			if st := m.Stats(); st.GrowthSteps <= grown {
				t.Fatalf("the map did not grow again after the death at %q: %+v", step, st)
			}
			if problems, err := m.Check(); err != nil || len(problems) > 0 {
				t.Fatalf("Check after growing on: %v, %v", problems, err)
			}
		})
	}
}

// runKilled runs a helper that ends by killing itself, and returns its
// report lines.
func runKilled(t *testing.T, cmd *exec.Cmd) [][]string {
	t.Helper()
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the helper was not killed: %v\n%s", err, out)
	}
	return testutil.Reports(string(out))
}

// TestDamageImageGrows: the map the damage fuzz target damages has
// grown, so that the target damages what growth adds: with splits, as
// a store map grows by default, the first tiers of the segments split
// into and the count of segments in use (the map does not hold enough to
// lengthen its file, which a map that splits does only past its splits).
func TestDamageImageGrows(t *testing.T) {
	img := getDamageImage(false)
	if img.err != nil {
		t.Fatal(img.err)
	}
	path := filepath.Join(t.TempDir(), "m")
	if err := os.WriteFile(path, img.file, 0o600); err != nil {
		t.Fatal(err)
	}
	m := mustOpen(t, path, &Options{ReadOnly: true})
	defer m.Close()
	if st := m.Stats(); !img.layout.Splits || st.Segments <= int(img.layout.Segments) {
		t.Fatalf("the fuzzed map splits: %v, %d segments of the %d it was created with: it did not grow", img.layout.Splits, st.Segments, img.layout.Segments)
	}
}
