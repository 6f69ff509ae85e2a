//go:build linux

package hashmap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/internal/testutil"
	"github.com/sharedmap/sharedmap/offheap"
)

func helperCmd(role, path string, args ...string) *exec.Cmd {
	return testutil.Command(role, "HASHMAP_FILE="+path, "HASHMAP_ARGS="+strings.Join(args, ","))
}

var helperOpts = &Options{Entries: 20000, AverageKeySize: 16, AverageValueSize: 64, Segments: 8}

func TestHelperProcess(t *testing.T) {
	role := testutil.Role()
	if role == "" {
		t.Skip("only runs as a helper process")
	}
	if helperLoad(role) {
		return
	}
	if helperOps(role) { // ops_process_test.go
		return
	}
	if helperResize(role) { // resize_test.go
		return
	}
	if role == "full-disk" {
		helperFullDisk(os.Getenv("HASHMAP_FILE"))
		return
	}
	if role == "writer-put" { // open for writing, put "other" = "user", report
		m, err := Open(os.Getenv("HASHMAP_FILE"), nil)
		if err != nil {
			testutil.Report("error %v", err)
			return
		}
		defer m.Close()
		if err := m.Put([]byte("other"), []byte("user")); err != nil {
			testutil.Report("error %v", err)
			return
		}
		testutil.Report("put")
		return
	}
	if role == "hold-put" { // manyprocesses_test.go
		helperHoldPut(os.Getenv("HASHMAP_FILE"))
		return
	}
	if role == "reader-locks" {
		helperReaderLocks(os.Getenv("HASHMAP_FILE"))
		return
	}
	opts := *helperOpts
	opts.QueueWritersLocally = os.Getenv("HASHMAP_QUEUE_LOCAL") == "1"
	if role == "kill-writer" {
		opts = Options{LockTimeout: killLockTimeout} // the file's own small layout (killOpts)
	}
	m, err := Open(os.Getenv("HASHMAP_FILE"), &opts)
	if err != nil {
		testutil.Report("error %v", err)
		return
	}
	defer m.Close()
	args := strings.Split(os.Getenv("HASHMAP_ARGS"), ",")
	n := func(i int) int { v, _ := strconv.Atoi(args[i]); return v }
	switch role {
	case "locked-increment": // goroutines, increments each: Get then Put under application lock 1
		var wg sync.WaitGroup
		for range n(0) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range n(1) {
					if err := m.Locks().Lock(1); err != nil {
						testutil.Report("error %v", err)
						return
					}
					var v uint64
					if old, err := m.Get([]byte("plain-counter")); err == nil {
						v = binary.LittleEndian.Uint64(old)
					}
					err := m.Put([]byte("plain-counter"), binary.LittleEndian.AppendUint64(nil, v+1))
					if uerr := m.Locks().Unlock(1); err == nil {
						err = uerr
					}
					if err != nil {
						testutil.Report("error %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		testutil.Report("done")
	case "increment": // goroutines, increments each, over 4 counters
		var wg sync.WaitGroup
		for g := range n(0) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n(1) {
					key := []byte(fmt.Sprintf("counter-%d", (g+i)%4))
					err := m.Compute(key, func(old []byte, found bool) ([]byte, bool) {
						var v uint64
						if found {
							v = binary.LittleEndian.Uint64(old)
						}
						return binary.LittleEndian.AppendUint64(nil, v+1), true
					})
					if err != nil {
						testutil.Report("error %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		testutil.Report("done")
	case "putrange": // first, count
		for i := n(0); i < n(0)+n(1); i++ {
			k := fmt.Sprintf("key-%07d", i)
			if err := m.Put([]byte(k), []byte(strings.Repeat(k, 1+i%5))); err != nil {
				testutil.Report("error %v", err)
				return
			}
		}
		testutil.Report("done")
	case "putrange-many": // as putrange, with PutMany in batches of 37 (not a multiple of its 16)
		for start := n(0); start < n(0)+n(1); start += 37 {
			var keys, values [][]byte
			for i := start; i < min(start+37, n(0)+n(1)); i++ {
				k := fmt.Sprintf("key-%07d", i)
				keys, values = append(keys, []byte(k)), append(values, []byte(strings.Repeat(k, 1+i%5)))
			}
			if stored, err := m.PutMany(keys, values); err != nil || stored != len(keys) {
				testutil.Report("error %d of %d stored: %v", stored, len(keys), err)
				return
			}
		}
		testutil.Report("done")
	case "rewrite": // rewrite key "torn" with uniform values of varying sizes for ms milliseconds
		stop := time.Now().Add(time.Duration(n(0)) * time.Millisecond)
		for i := 0; time.Now().Before(stop); i++ {
			v := bytes.Repeat([]byte{byte('a' + i%26)}, 1+(i*7)%200)
			if err := m.Put([]byte("torn"), v); err != nil {
				testutil.Report("error %v", err)
				return
			}
		}
		testutil.Report("done")
	case "kill-writer":
		if at, err := strconv.Atoi(os.Getenv("HASHMAP_DIE_AT_STEP")); err == nil {
			// Die at the at-th step of an insert, a compaction, a rebuild
			// or (HASHMAP_DIE_IN=rewrite) an in-place rewrite, as a kill
			// -9 would: the parent knows exactly where it landed. The
			// rewrites' steps are counted apart: there are so many of
			// them that they would take most deaths.
			rewrites := os.Getenv("HASHMAP_DIE_IN") == "rewrite"
			steps := 0
			testhook.OnStep = func() {
				pc, _, _, _ := runtime.Caller(3) // OnStep, Step, testStep, then the step's function
				name := strings.TrimPrefix(runtime.FuncForPC(pc).Name(), "github.com/sharedmap/sharedmap/segment.")
				inRewrite := name == "(*Segment).saveUndo" || name == "(*Segment).rewriteInPlace" ||
					name == "(*Segment).stageRewrite" || name == "(*Segment).nameStaged" ||
					name == "(*Segment).takeFast" || name == "(*Segment).releaseFast"
				if inRewrite != rewrites {
					return
				}
				if steps++; steps == at {
					testutil.Report("dying in %s", name)
					_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
					time.Sleep(time.Hour)
				}
			}
		}
		killWriter(m, n(0), n(1))
	case "lookups": // hits, misses, stay (0: close and exit once done): Gets of "present" and of absent keys
		for range n(0) {
			if _, err := m.Get([]byte("present")); err != nil {
				testutil.Report("error %v", err)
				return
			}
		}
		for i := range n(1) {
			if _, err := m.Get(fmt.Appendf(nil, "absent-%d", i)); !errors.Is(err, ErrNotFound) {
				testutil.Report("error %v", err)
				return
			}
		}
		if err := m.Put(fmt.Appendf(nil, "done-%d", os.Getpid()), nil); err != nil {
			testutil.Report("error %v", err)
			return
		}
		if n(2) == 1 {
			time.Sleep(time.Hour) // the test kills it
		}
		testutil.Report("done")
	case "unlock-held": // unlock application lock 0, which another process holds; say how it went, and whether TryLock then takes it
		err := m.Locks().Unlock(0)
		class := "other: " + fmt.Sprint(err)
		switch {
		case err == nil:
			class = "nil"
		case errors.Is(err, ErrHeldElsewhere):
			class = "held-elsewhere"
		case errors.Is(err, ErrNotLocked) && strings.Contains(err.Error(), "released only in the process that holds it"):
			class = "not-locked-here"
		}
		ok, err := m.Locks().TryLock(0)
		if err != nil {
			testutil.Report("error %v", err)
			return
		}
		if ok {
			if err := m.Locks().Unlock(0); err != nil {
				testutil.Report("error %v", err)
				return
			}
		}
		testutil.Report("unlock %s trylock %v", class, ok)
	case "hold-lock": // [lock]: take application lock lock (0 if not given), say so with key "held", wait to be killed
		if err := m.Locks().Lock(n(0)); err != nil {
			testutil.Report("error %v", err)
			return
		}
		if err := m.Put([]byte("held"), []byte(strconv.Itoa(os.Getpid()))); err != nil {
			testutil.Report("error %v", err)
			return
		}
		time.Sleep(time.Hour) // the test kills it (a bare select {} is a deadlock to the runtime once nothing else runs)
	case "hold-key": // hold key "k"'s segment lock inside a Compute, say so, wait to be killed
		_ = m.Compute([]byte("k"), func([]byte, bool) ([]byte, bool) {
			testutil.Report("held")
			time.Sleep(time.Hour) // the test kills it
			return nil, false
		})
	case "hold-write": // rewrite key "k" in place with "dead-value", stop halfway (write lock held, sequence odd), say "holding", wait to be killed
		seg := m.table.For(keyHash([]byte("k")))
		testhook.OnStep = func() {
			if seg.Seq()&1 == 1 && seg.Lock().State().Write {
				testutil.Report("holding")
				time.Sleep(time.Hour) // the test kills it
			}
		}
		err := m.Put([]byte("k"), []byte("dead-value"))
		testutil.Report("error the rewrite never stopped halfway: %v", err)
	case "pass-on-and-hold": // start a child (sleep) with the map's descriptors, put "child" = its pid, then hold key "k"'s segment lock until killed
		child, err := childWithMapDescriptors(os.Getenv("HASHMAP_FILE"))
		if err != nil {
			testutil.Report("error %v", err)
			return
		}
		if err := m.Put([]byte("child"), []byte(strconv.Itoa(child))); err != nil {
			testutil.Report("error %v", err)
			return
		}
		_ = m.Compute([]byte("k"), func([]byte, bool) ([]byte, bool) {
			time.Sleep(time.Hour) // the test kills it
			return nil, false
		})
	case "readtorn": // read key "torn" for ms milliseconds; every value must be uniform
		stop := time.Now().Add(time.Duration(n(0)) * time.Millisecond)
		buf := make([]byte, 0, 256)
		reads, torn := 0, 0
		for time.Now().Before(stop) {
			v, err := m.GetInto(buf[:0], []byte("torn"))
			if err != nil {
				continue
			}
			reads++
			if len(v) == 0 || bytes.Count(v, v[:1]) != len(v) {
				torn++
			}
		}
		testutil.Report("reads %d torn %d", reads, torn)
	}
}

func errorsIn(t *testing.T, lines [][]string) {
	t.Helper()
	for _, l := range lines {
		if l[0] == "error" {
			t.Fatalf("helper: %v", l)
		}
	}
}

// 4 processes x 4 goroutines increment 4 shared counters with Compute: the
// totals are exact, so no read-modify-write was lost across processes.
// With QueueWritersLocally in every other process, a process's writers to
// a segment queue on a local mutex first; totals must stay exact.
func TestCrossProcessCompute(t *testing.T) {
	for _, local := range []bool{false, true} {
		t.Run(fmt.Sprintf("queue-writers-locally=%v", local), func(t *testing.T) { testCrossProcessCompute(t, local) })
	}
}

func testCrossProcessCompute(t *testing.T, local bool) {
	path := filepath.Join(t.TempDir(), "m")
	const procs, goroutines, each = 4, 4, 1000
	var cmds []*exec.Cmd
	for p := range procs {
		cmd := helperCmd("increment", path, strconv.Itoa(goroutines), strconv.Itoa(each))
		if local && p%2 == 1 {
			cmd.Env = append(cmd.Env, "HASHMAP_QUEUE_LOCAL=1")
		}
		cmds = append(cmds, cmd)
	}
	errorsIn(t, testutil.Run(t, cmds...))
	m, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var total uint64
	for c := range 4 {
		v, err := m.Get([]byte(fmt.Sprintf("counter-%d", c)))
		if err != nil {
			t.Fatal(err)
		}
		total += binary.LittleEndian.Uint64(v)
	}
	if total != procs*goroutines*each {
		t.Fatalf("counters sum to %d, want %d", total, procs*goroutines*each)
	}
}

// Processes putting disjoint ranges lose nothing, and it survives reopen.
// Half of them write with PutMany, in batches whose keys fall in segments
// the others are writing too.
func TestCrossProcessDisjointPuts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	const procs, per = 4, 3000
	var cmds []*exec.Cmd
	for p := range procs {
		role := "putrange"
		if p%2 == 1 {
			role = "putrange-many"
		}
		cmds = append(cmds, helperCmd(role, path, strconv.Itoa(p*per), strconv.Itoa(per)))
	}
	errorsIn(t, testutil.Run(t, cmds...))
	m, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Len() != procs*per {
		t.Fatalf("Len %d, want %d", m.Len(), procs*per)
	}
	for i := range procs * per {
		k := fmt.Sprintf("key-%07d", i)
		v, err := m.Get([]byte(k))
		if err != nil || string(v) != strings.Repeat(k, 1+i%5) {
			t.Fatalf("%s = %q, %v", k, v, err)
		}
	}
}

// A reader process never sees a torn value while a writer process rewrites
// the value in place and by relocation.
func TestCrossProcessNoTornReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, helperOpts)
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Put([]byte("torn"), []byte("a"))
	m.Close()
	lines := testutil.Run(t,
		helperCmd("rewrite", path, "1500"),
		helperCmd("readtorn", path, "1500"),
		helperCmd("readtorn", path, "1500"))
	errorsIn(t, lines)
	reads := 0
	for _, l := range lines {
		if l[0] == "reads" {
			r, _ := strconv.Atoi(l[1])
			reads += r
			if l[3] != "0" {
				t.Fatalf("a reader saw %s torn values in %s reads", l[3], l[1])
			}
		}
	}
	if reads == 0 {
		t.Fatal("readers read nothing")
	}
	t.Logf("%d reads, none torn", reads)
}

// childWithMapDescriptors starts "sleep 60" with every descriptor this
// process has open on path or its lock file among its files, as a program that hands its
// open files on to a child does, and returns its pid.
func childWithMapDescriptors(path string) (int, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return 0, err
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	var files []*os.File
	for _, fd := range fds {
		// The map's lock file too: a fork passes on every descriptor.
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && (target == abs || target == offheap.LockFilePath(abs)) {
			n, _ := strconv.Atoi(fd.Name())
			files = append(files, os.NewFile(uintptr(n), target))
		}
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("no descriptor open on %s", abs)
	}
	cmd := exec.Command("sleep", "60")
	cmd.ExtraFiles = files
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	return cmd.Process.Pid, nil
}
