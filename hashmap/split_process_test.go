//go:build linux

package hashmap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/internal/testutil"
)

func init() {
	opsRoles["split-die"] = splitDie
	opsRoles["split-reader"] = splitReader
}

// splitReader (args: known) Gets the known keys 0..known-1 of writer 8
// over and over while writer 0 forces splits, until writer 0's done key
// is there: every one must be found, with its own value, whole.
func splitReader(m *Map, args []string) error {
	known := argInt(args, 0)
	reads := 0
	for rounds := 0; ; rounds++ {
		for i := range known {
			k := growthKey(8, i)
			v, err := m.Get(k)
			if err != nil || !bytes.Equal(v, growthValue(k)) {
				return fmt.Errorf("read %s during splits: %q, %v", k, v, err)
			}
			reads++
		}
		if ok, err := m.Contains([]byte("done-0")); err != nil || ok && rounds > 0 {
			testutil.Report("read %d", reads)
			return err
		}
	}
}

// TestReadersSeeEveryKeyWhileAWriterSplits: two reader processes Get
// keys stored before them, again and again, while a writer process
// stores many times the map's Entries and so splits its segments under
// them: no reader misses a key or reads a wrong value, and at the end
// every key reads back and Check is clean.
func TestReadersSeeEveryKeyWhileAWriterSplits(t *testing.T) {
	const known = 1500
	puts := 40_000
	if testing.Short() {
		puts = 12_000
	}
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 2000, AverageKeySize: 14, AverageValueSize: 42, Segments: 2})
	for i := range known {
		k := growthKey(8, i)
		if err := m.Put(k, growthValue(k)); err != nil {
			t.Fatal(err)
		}
	}
	start := m.Stats()
	cmds := []*exec.Cmd{helperCmd("grow-writer", path, "0", strconv.Itoa(puts)),
		helperCmd("split-reader", path, strconv.Itoa(known)), helperCmd("split-reader", path, strconv.Itoa(known))}
	read := 0
	for _, r := range testutil.Run(t, cmds...) {
		switch r[0] {
		case "wrote":
		case "read":
			read++
			t.Logf("a reader read %s known keys, every one right", r[1])
		default:
			t.Errorf("helper: %v", r)
		}
	}
	end := m.Stats()
	if read != 2 || end.Segments <= start.Segments+2 {
		t.Fatalf("%d readers finished; segments %d -> %d: want 2, and splits under them", read, start.Segments, end.Segments)
	}
	for i := range puts {
		k := growthKey(0, i)
		if v, err := m.Get(k); err != nil || !bytes.Equal(v, growthValue(k)) {
			t.Fatalf("Get %s after the writer: %q, %v", k, v, err)
		}
	}
	if problems, err := m.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("Check: %v, %v", problems, err)
	}
	t.Logf("%d keys written under 2 readers: %d -> %d segments", puts, start.Segments, end.Segments)
}

// splitDie (args: step, nth) stores keys until its nth split reaches step,
// and there kills itself, having reported how many Puts had returned.
func splitDie(m *Map, args []string) error {
	stored, seen := 0, 0
	nth := argInt(args, 1)
	testhook.OnSplitStep = func(step string) {
		if step != args[0] {
			return
		}
		if seen++; seen == nth {
			testutil.Report("stored %d", stored)
			_ = os.Stdout.Sync()
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	for ; ; stored++ {
		k := growthKey(7, stored)
		if err := m.Put(k, growthValue(k)); err != nil {
			return err
		}
	}
}

// TestSplitSurvivesADeathAtEveryStep: a writer process killed at each
// step of a split (its claim taken, both segments locked, the new segment
// emptied, the moving entries copied, N stored, the originals removed),
// on its third split, leaves a map that a survivor opens and reads
// whole: every key whose Put had returned reads back, Check is clean
// once the dead writer's locks are recovered, and the map splits on as
// the survivor fills it.
func TestSplitSurvivesADeathAtEveryStep(t *testing.T) {
	steps := []string{"claimed", "locked", "emptied", "copied", "committed", "moved"}
	if testing.Short() {
		steps = []string{"copied", "committed"} // either side of the commit
	}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) { testSplitSurvivesADeath(t, step, false) })
	}
}

// TestSplitClaimOfTheDeadIsTakenOver: a process that has the map open
// while a splitter dies at one of its steps, and so runs no recovery at
// Open, goes on putting: its first split finds the dead claim, releases
// it, and recovers the segments the dead split held (Table.SplitHeld), and
// the map splits on, losing nothing, with no Recover call.
func TestSplitClaimOfTheDeadIsTakenOver(t *testing.T) {
	steps := []string{"claimed", "locked", "emptied", "copied", "committed", "moved"}
	if testing.Short() {
		steps = []string{"copied", "committed"}
	}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) { testSplitSurvivesADeath(t, step, true) })
	}
}

// testSplitSurvivesADeath: a writer process is killed at step of its third
// split; a survivor that reopens the map and recovers it (openThroughout
// false), or that had it open all along and recovers nothing itself, finds
// every key stored before the death, and the map splits on.
func testSplitSurvivesADeath(t *testing.T, step string, openThroughout bool) {
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 2000, AverageKeySize: 14, AverageValueSize: 42, Segments: 2, LockTimeout: killLockTimeout})
	if !m.layout.Splits {
		t.Fatal("a new store map does not split")
	}
	if !openThroughout {
		m.Close()
	}
	stored := -1
	for _, r := range runKilled(t, helperCmd("split-die", path, step, "3")) {
		if r[0] == "stored" {
			stored, _ = strconv.Atoi(r[1])
		}
	}
	if stored < 0 {
		t.Fatalf("the writer did not reach step %q of its third split", step)
	}
	if openThroughout {
		if m.table.SplitClaim() == 0 {
			t.Fatalf("no split claim left by a death at %q", step)
		}
	} else {
		m = mustOpen(t, path, &Options{LockTimeout: killLockTimeout})
		if _, err := m.Recover(); err != nil {
			t.Fatalf("Recover after a death at %q: %v", step, err)
		}
	}
	defer m.Close()
	before := m.Stats().Segments
	for i := stored; i < stored+4000; i++ {
		k := growthKey(7, i)
		if err := m.Put(k, growthValue(k)); err != nil {
			t.Fatalf("Put %d after the death at %q: %v", i, step, err)
		}
	}
	for i := range stored + 4000 {
		k := growthKey(7, i)
		if v, err := m.Get(k); err != nil || !bytes.Equal(v, growthValue(k)) {
			t.Fatalf("key %d of %d stored before the death at %q: %q, %v", i, stored, step, v, err)
		}
	}
	st := m.Stats()
	if st.Segments <= before {
		t.Fatalf("the map did not split again after the death at %q: %d -> %d segments", step, before, st.Segments)
	}
	if openThroughout {
		// The split's recovery looked at the segments the split held, not
		// the whole map: Check still names the dead process until a
		// recovery of all of it.
		problems, err := m.Check()
		if err != nil || len(problems) != 1 || !strings.Contains(problems[0].Err.Error(), "died with the map open") {
			t.Fatalf("Check after splitting on: %v, %v; want the dead process named alone", problems, err)
		}
		if _, err := m.Recover(); err != nil {
			t.Fatal(err)
		}
	}
	if problems, err := m.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("Check after splitting on: %v, %v", problems, err)
	}
	if n := m.Len(); n != stored+4000 {
		t.Fatalf("Len %d after a death at %q, %d keys stored before it and 4000 after: a key lost or counted twice", n, step, stored)
	}
	t.Logf("died at %q after %d Puts; %d -> %d segments after 4000 more", step, stored, before, st.Segments)
}

// TestSplitClaimNamingNoSlotIsTakenOver: the split claim word damaged to
// name a registry slot past the registry's end (the damage fuzz target's
// find: Repair then read past the mapping and panicked). Repair takes the
// claim over as a dead process's and releases it, and puts go on
// splitting the map; without the take-over no split would run again.
func TestSplitClaimNamingNoSlotIsTakenOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	o := &Options{Entries: 2000, AverageKeySize: 14, AverageValueSize: 42, Segments: 2}
	m := mustOpen(t, path, o)
	if !m.layout.Splits {
		t.Fatal("a new store map does not split")
	}
	claimOff := m.layout.GlobalOff + 4096 - 64 // segment's gSplitClaim
	slots := int64(m.reg.Layout().Slots)
	m.Close()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var word [8]byte
	binary.LittleEndian.PutUint64(word[:], uint64(slots+0x2000)<<32|7)
	if _, err := f.WriteAt(word[:], claimOff); err != nil {
		t.Fatal(err)
	}
	f.Close()

	m = mustOpen(t, path, &Options{})
	if got := m.table.SplitClaim(); got>>32 != uint64(slots+0x2000) {
		t.Fatalf("the claim word reads %#x: the test damaged something else", got)
	}
	if _, err := m.Repair(); err != nil {
		t.Fatalf("Repair: %v", err)
	}
	if got := m.table.SplitClaim(); got != 0 {
		t.Fatalf("after Repair the split claim is %#x, want released", got)
	}
	before := m.Stats().Segments
	for i := range 4000 {
		k := growthKey(9, i)
		if err := m.Put(k, growthValue(k)); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	if after := m.Stats().Segments; after <= before {
		t.Fatalf("the map did not split after the damaged claim was released: %d -> %d segments", before, after)
	}
}
