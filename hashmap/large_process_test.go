//go:build linux

package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/internal/testutil"
)

func init() {
	// key, size, seed: Put largeValue(size, seed) under key.
	opsRoles["large-put"] = func(m *Map, args []string) error {
		if err := m.Put([]byte(args[0]), largeValue(argInt(args, 1), uint64(argInt(args, 2)))); err != nil {
			return err
		}
		testutil.Report("done")
		return nil
	}
	// key, size, seed: Get key and compare with largeValue(size, seed).
	opsRoles["large-get"] = func(m *Map, args []string) error {
		v, err := m.Get([]byte(args[0]))
		if err != nil {
			return err
		}
		if !bytes.Equal(v, largeValue(argInt(args, 1), uint64(argInt(args, 2)))) {
			return fmt.Errorf("read %d bytes, not the value put", len(v))
		}
		testutil.Report("equal %d", len(v))
		return nil
	}
	// ms, every: for ms, Put under "torn" the two values of
	// largeTornValues in turn, deleting the key instead every every-th
	// time (0: never).
	opsRoles["large-rewrite"] = func(m *Map, args []string) error {
		vals := largeTornValues(m)
		n := 0
		for stop := time.Now().Add(time.Duration(argInt(args, 0)) * time.Millisecond); time.Now().Before(stop); n++ {
			if every := argInt(args, 1); every > 0 && n%every == every-1 {
				if _, err := m.Delete([]byte("torn")); err != nil {
					return err
				}
				continue
			}
			if err := m.Put([]byte("torn"), vals[n%2]); err != nil {
				return err
			}
		}
		testutil.Report("writes %d", n)
		return nil
	}
	// ms: for ms, Get "torn", counting the values read that are neither
	// of largeTornValues.
	opsRoles["large-readtorn"] = func(m *Map, args []string) error {
		vals := largeTornValues(m)
		sums := map[uint64]bool{xxhash.Sum64(vals[0]): true, xxhash.Sum64(vals[1]): true}
		reads, absent, bad := 0, 0, 0
		var buf []byte
		for stop := time.Now().Add(time.Duration(argInt(args, 0)) * time.Millisecond); time.Now().Before(stop); {
			v, err := m.GetInto(buf[:0], []byte("torn"))
			if reads == 0 && errors.Is(err, ErrNotFound) {
				continue // the writer has not begun
			}
			reads++
			switch {
			case errors.Is(err, ErrNotFound):
				absent++
			case err != nil:
				return err
			case !sums[xxhash.Sum64(v)]:
				bad++
			}
			buf = v
		}
		testutil.Report("reads %d absent %d bad %d", reads, absent, bad)
		return nil
	}
	// key, size, seed: Put largeValue(size, seed) under key, dying by
	// SIGKILL at the HASHMAP_DIE_AT_STEP-th step (testhook), or report
	// "done" and the count of steps.
	opsRoles["large-die"] = func(m *Map, args []string) error {
		at, _ := strconv.Atoi(os.Getenv("HASHMAP_DIE_AT_STEP"))
		v := largeValue(argInt(args, 1), uint64(argInt(args, 2)))
		steps := 0
		testhook.OnStep = func() {
			if os.Getenv("LARGE_TRACE") != "" {
				pc, _, _, _ := runtime.Caller(3)
				fmt.Fprintf(os.Stderr, "step %d %s\n", steps+1, runtime.FuncForPC(pc).Name())
			}
			if steps++; steps == at {
				pc, _, _, _ := runtime.Caller(3)
				fmt.Fprintf(os.Stderr, "dying in %s\n", runtime.FuncForPC(pc).Name())
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Hour)
			}
		}
		err := m.Put([]byte(args[0]), v)
		testhook.OnStep = nil
		if err != nil {
			return err
		}
		testutil.Report("done %d", steps)
		return nil
	}
}

// largeTornValues are the two values the torn-read test alternates: of
// different lengths and content, both too large for a tier of m.
func largeTornValues(m *Map) [2][]byte {
	n := int(m.layout.MaxEntryBytes())
	return [2][]byte{largeValue(n+1000, 11), largeValue(2*n+5000, 12)}
}

// Values of 1 MiB and 64 MiB written by one process read back equal in
// another.
func TestLargeValuesAcrossProcesses(t *testing.T) {
	sizes := []int{1 << 20, 64 << 20}
	if testing.Short() {
		sizes = sizes[:1]
	}
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 1500, AverageKeySize: 16, AverageValueSize: 60 << 10})
	m.Close()
	for i, size := range sizes {
		key, seed := fmt.Sprintf("large-%d", i), strconv.Itoa(i+1)
		errorsIn(t, testutil.Run(t, helperCmd("large-put", path, key, strconv.Itoa(size), seed)))
		lines := testutil.Run(t, helperCmd("large-get", path, key, strconv.Itoa(size), seed))
		errorsIn(t, lines)
		if len(lines) != 1 || lines[0][0] != "equal" {
			t.Fatalf("reader: %v", lines)
		}
	}
	m = mustOpen(t, path, nil)
	defer m.Close()
	if n := m.Len(); n != len(sizes) {
		t.Fatalf("Len = %d, want %d", n, len(sizes))
	}
	checkClean(t, m)
}

// A reader process never sees a torn large value while a writer process
// replaces it by another of a different length and deletes it.
func TestLargeValuesNoTornReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 2000, AverageKeySize: 16, AverageValueSize: 256})
	m.Close()
	ms := "1500"
	if testing.Short() {
		ms = "500"
	}
	for _, every := range []string{"0", "31"} {
		testLargeTornReads(t, path, ms, every)
	}
	m = mustOpen(t, path, nil)
	defer m.Close()
	checkClean(t, m)
}

// testLargeTornReads runs TestLargeValuesNoTornReads's writer and readers
// for ms, with the key deleted every every-th write (0: never, and then a
// reader that finds it absent fails the test).
func testLargeTornReads(t *testing.T, path, ms, every string) {
	lines := testutil.Run(t,
		helperCmd("large-rewrite", path, ms, every),
		helperCmd("large-readtorn", path, ms),
		helperCmd("large-readtorn", path, ms))
	errorsIn(t, lines)
	reads, writes := 0, 0
	for _, l := range lines {
		switch l[0] {
		case "reads":
			t.Logf("reader: %v", l)
			r, _ := strconv.Atoi(l[1])
			reads += r
			if l[5] != "0" {
				t.Fatalf("a reader saw %s values that are neither of those written, in %s reads", l[5], l[1])
			}
			if every == "0" && l[3] != "0" {
				t.Fatalf("a reader found the key absent %s times in %s reads, with no delete", l[3], l[1])
			}
		case "writes":
			writes, _ = strconv.Atoi(l[1])
		}
	}
	if reads == 0 || writes == 0 {
		t.Fatalf("%d reads, %d writes", reads, writes)
	}
	t.Logf("deletes every %s: %d writes, %d reads, none torn", every, writes, reads)
}

// A large Put killed at any step leaves the key with its old value or its
// new one; Check reports the parts left over as orphans (and nothing
// else), Repair deletes them, and Check is clean after.
func TestLargePutDieAtEveryStep(t *testing.T) {
	opts := &Options{Entries: 200, AverageKeySize: 16, AverageValueSize: 1024, Segments: 4, LockTimeout: time.Second}
	stride := 1
	if testing.Short() {
		stride = 3
	}
	var oldV, newV []byte
	deaths, orphaned := 0, 0
	for step := 1; ; step += stride {
		path := filepath.Join(t.TempDir(), "m")
		m := mustOpen(t, path, opts)
		if m.layout.PartSize() == 0 {
			t.Fatal("no large values in the test's map")
		}
		n := int(m.layout.MaxEntryBytes())
		oldV, newV = largeValue(n+100, 1), largeValue(n+n/2, 2)
		if err := m.Put([]byte("k"), oldV); err != nil {
			t.Fatal(err)
		}
		m.Close()
		cmd := helperCmd("large-die", path, "k", strconv.Itoa(len(newV)), "2")
		cmd.Env = append(cmd.Env, fmt.Sprintf("HASHMAP_DIE_AT_STEP=%d", step))
		lines, err := startHelper(t, cmd).rest()
		if err == nil {
			if len(lines) != 1 || lines[0][0] != "done" {
				t.Fatalf("helper: %v", lines)
			}
			t.Logf("%s steps, %d deaths, %d left orphans", lines[0][1], deaths, orphaned)
			break
		}
		deaths++
		m = mustOpen(t, path, nil) // recovers what the dead left
		v, err := m.Get([]byte("k"))
		if err != nil || !bytes.Equal(v, oldV) && !bytes.Equal(v, newV) {
			pr, _ := m.Check()
			t.Logf("recovered: %+v\nproblems: %v", m.RecoveredAtOpen(), pr)
			t.Fatalf("step %d: the key reads %d bytes, %v: neither the old value nor the new", step, len(v), err)
		}
		problems, err := m.Check()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			if !errors.Is(p.Err, ErrOrphans) {
				t.Fatalf("step %d: check: %v", step, p.Err)
			}
			orphaned++
		}
		if _, err := m.Repair(); err != nil {
			t.Fatal(err)
		}
		if problems, err := m.Check(); err != nil || len(problems) != 0 {
			t.Fatalf("step %d: check after repair: %v %v", step, problems, err)
		}
		if v2, err := m.Get([]byte("k")); err != nil || !bytes.Equal(v2, v) {
			t.Fatalf("step %d: the key reads otherwise after repair: %v", step, err)
		}
		m.Close()
	}
	if deaths == 0 || orphaned == 0 {
		t.Fatalf("%d deaths, %d with orphans: the test lost its point", deaths, orphaned)
	}
}
