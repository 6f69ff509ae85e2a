//go:build linux

package hashmap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/internal/testutil"
)

// dieOps are the operations the "ops-die" helper runs, by name.
var dieOps = map[string]func(m *Map) error{
	"clear": func(m *Map) error { return m.Clear() },
}

func init() {
	// op: run dieOps[op], dying by SIGKILL at its HASHMAP_DIE_AT_STEP-th
	// step (testhook), or report "done" and its count of steps.
	opsRoles["ops-die"] = func(m *Map, args []string) error {
		op, ok := dieOps[args[0]]
		if !ok {
			return fmt.Errorf("no op %q", args[0])
		}
		at, _ := strconv.Atoi(os.Getenv("HASHMAP_DIE_AT_STEP"))
		steps := 0
		testhook.OnStep = func() {
			if steps++; steps == at {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Hour)
			}
		}
		err := op(m)
		testhook.OnStep = nil
		if err != nil {
			return err
		}
		testutil.Report("done %d", steps)
		return nil
	}
	// keys, ms: Range for ms, counting the snapshots in which a segment
	// read some of its keys but not all (torn) and those in which some
	// segments read empty and others not (mixed).
	opsRoles["ops-range-segments"] = func(m *Map, args []string) error {
		full := make([]int, m.layout.Segments)
		for i := range argInt(args, 0) {
			full[xxhash.Sum64(opsKey(i))&m.segMask]++
		}
		ranges, mixed, torn := 0, 0, 0
		for stop := time.Now().Add(time.Duration(argInt(args, 1)) * time.Millisecond); time.Now().Before(stop); ranges++ {
			got := make([]int, len(full))
			var err error
			for k := range m.RangeView(&err) {
				got[xxhash.Sum64(k)&m.segMask]++
			}
			if err != nil {
				return err
			}
			empty := 0
			for s := range got {
				switch got[s] {
				case 0:
					empty++
				case full[s]:
				default:
					torn++
				}
			}
			if empty > 0 && empty < len(got) {
				mixed++
			}
		}
		testutil.Report("ranges %d mixed %d torn %d", ranges, mixed, torn)
		return nil
	}
}

// dieAtEveryStepAcrossProcesses fills a fresh small map (overflow tiers
// linked) with keys opsKey(i), i < keys, then has a helper process run
// dieOps[op] on it and SIGKILLs it at its first step, then from a fresh
// fill at its second, and so on (every third in -short mode), until the
// op finishes. After each death it opens the map, which recovers what the
// dead left, and hands judge each key's segment and whether the key is
// there with its value (a key with another value fails the test); Check
// must find nothing wrong.
func dieAtEveryStepAcrossProcesses(t *testing.T, op string, judge func(step int, present map[string]bool, segOf func([]byte) int)) {
	// No splits: the file keeps its segments and the keys past Entries go
	// to overflow tiers, whose handling is what the deaths test.
	opts := &Options{Entries: 32, AverageKeySize: 9, AverageValueSize: 16, Segments: 4, MaxBloatFactor: 8, LockTimeout: time.Second, NoSplits: true}
	const keys = 100 // past Entries: overflow tiers
	deaths, stride := 0, 1
	if testing.Short() {
		stride = 3
	}
	for step := 1; ; step += stride {
		path := filepath.Join(t.TempDir(), "m")
		m := mustOpen(t, path, opts)
		for i := range keys {
			if err := m.Put(opsKey(i), opsValue(i)); err != nil {
				t.Fatal(err)
			}
		}
		if m.table.ExtraTiersInUse() == 0 {
			t.Fatal("no overflow tier: the test lost its point")
		}
		m.Close()
		cmd := helperCmd("ops-die", path, op)
		cmd.Env = append(cmd.Env, fmt.Sprintf("HASHMAP_DIE_AT_STEP=%d", step))
		lines, err := startHelper(t, cmd).rest()
		if err == nil {
			if len(lines) != 1 || lines[0][0] != "done" {
				t.Fatalf("helper: %v", lines)
			}
			t.Logf("%s: %s steps, %d deaths", op, lines[0][1], deaths)
			break
		}
		deaths++
		m = mustOpen(t, path, nil) // recovers what the dead left
		present := map[string]bool{}
		for i := range keys {
			k := opsKey(i)
			v, err := m.Get(k)
			switch {
			case err == nil && string(v) != string(opsValue(i)):
				t.Fatalf("step %d: %s = %q", step, k, v)
			case err != nil && !errors.Is(err, ErrNotFound):
				t.Fatal(err)
			}
			present[string(k)] = err == nil
		}
		judge(step, present, func(k []byte) int { return int(xxhash.Sum64(k) & m.segMask) })
		if problems, err := m.Check(); err != nil || len(problems) != 0 {
			t.Fatalf("step %d: check: %v %v", step, problems, err)
		}
		m.Close()
	}
	if deaths < 4/stride {
		t.Fatalf("%s died at %d steps only", op, deaths)
	}
}

// TestClearDiesAtEveryStepAcrossProcesses: a process killed at any step of
// a Clear leaves every segment, once the next Open has recovered, empty or
// whole: the segments before the one it died in empty, those after whole,
// and that one either.
func TestClearDiesAtEveryStepAcrossProcesses(t *testing.T) {
	dieAtEveryStepAcrossProcesses(t, "clear", func(step int, present map[string]bool, segOf func([]byte) int) {
		var have, all [4]int
		for k, ok := range present {
			s := segOf([]byte(k))
			all[s]++
			if ok {
				have[s]++
			}
		}
		cleared := 0 // the segments cleared come first
		for s := range all {
			switch {
			case have[s] != 0 && have[s] != all[s]:
				t.Fatalf("step %d: segment %d has %d of its %d keys: neither cleared nor whole", step, s, have[s], all[s])
			case have[s] == 0 && cleared != s:
				t.Fatalf("step %d: segment %d cleared after a whole one (%v of %v)", step, s, have, all)
			case have[s] == 0:
				cleared++
			}
		}
	})
}

// TestClearAcrossProcesses: processes that Range over the map while
// another Clears it see each segment with all its entries or none, never
// part (per-segment atomicity), though the map as a whole may read half
// cleared.
func TestClearAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 40000, AverageKeySize: 9, AverageValueSize: 16, Segments: 16})
	defer m.Close()
	const keys = 30000
	for i := range keys {
		if err := m.Put(opsKey(i), opsValue(i)); err != nil {
			t.Fatal(err)
		}
	}
	var readers []*helperProc
	for range 2 {
		readers = append(readers, startHelper(t, helperCmd("ops-range-segments", path, strconv.Itoa(keys), "600")))
	}
	time.Sleep(250 * time.Millisecond)
	if err := m.Clear(); err != nil {
		t.Fatal(err)
	}
	if m.Len() != 0 {
		t.Fatalf("Len %d after Clear", m.Len())
	}
	for _, r := range readers {
		lines, err := r.rest()
		if err != nil || len(lines) != 1 || lines[0][0] != "ranges" {
			t.Fatalf("reader: %v %v", lines, err)
		}
		if lines[0][5] != "0" {
			t.Fatalf("a reader saw %s segments part cleared: %v", lines[0][5], lines[0])
		}
		t.Logf("reader: %v", lines[0])
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Fatalf("check: %v %v", problems, err)
	}
}
