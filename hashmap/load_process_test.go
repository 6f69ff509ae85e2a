//go:build linux

package hashmap

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// loadOpts is the cache map the GetOrLoad process tests share.
var loadOpts = &Options{Entries: 1000, AverageKeySize: 16, AverageValueSize: 32, Cache: true}

// 4 processes x 4 goroutines ask for one cold key at once: the load runs
// once in all (the loads count themselves in the file), and every caller
// gets its value.
func TestGetOrLoadAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, loadOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const procs, goroutines = 4, 4
	var helpers []*exec.Cmd
	for range procs {
		helpers = append(helpers, helperCmd("load-cold", path, strconv.Itoa(goroutines), strconv.Itoa(procs), "200"))
	}
	lines := testutil.Run(t, helpers...)
	errorsIn(t, lines)
	values := gotValues(t, lines)
	if len(values) != procs*goroutines {
		t.Fatalf("%d callers got a value, want %d", len(values), procs*goroutines)
	}
	if n := counted(m, "loads"); n != 1 {
		t.Fatalf("the load ran %d times, want 1", n)
	}
	wantValue(t, m, "cold", string(values[0].value))
	t.Logf("%d callers in %d processes got %q from one load", len(values), procs, values[0].value)
}

// A loader process SIGKILLed in the middle of its load: the processes
// waiting for it see its registry slot dead, one of them takes the token
// over and loads, and every caller gets that value.
func TestGetOrLoadLoaderKilled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, loadOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	hang := helperCmd("load-hang", path)
	var hangOut bytes.Buffer
	hang.Stdout = &hangOut
	if err := hang.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hang.Process.Kill(); _ = hang.Wait() }()
	if !testutil.WaitFor(20*time.Second, func() bool { _, err := m.Get([]byte("loading")); return err == nil }) {
		t.Fatalf("the hanging loader did not start its load: %s", hangOut.String())
	}
	const procs, goroutines = 2, 2
	var wg sync.WaitGroup
	var lines [][]string
	wg.Add(1)
	go func() {
		defer wg.Done()
		lines = testutil.Run(t,
			helperCmd("load-cold", path, strconv.Itoa(goroutines), strconv.Itoa(procs), "0"),
			helperCmd("load-cold", path, strconv.Itoa(goroutines), strconv.Itoa(procs), "0"))
	}()
	if !testutil.WaitFor(20*time.Second, func() bool { return counted(m, "ready") >= procs }) {
		t.Fatal("the waiting processes did not get ready")
	}
	time.Sleep(200 * time.Millisecond) // they find the token and wait
	if n := counted(m, "loads"); n != 0 {
		t.Fatalf("%d loads ran while the loader lived", n)
	}
	killed := time.Now()
	if err := hang.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	errorsIn(t, lines)
	values := gotValues(t, lines)
	if len(values) != procs*goroutines {
		t.Fatalf("%d callers got a value, want %d", len(values), procs*goroutines)
	}
	if n := counted(m, "loads"); n != 1 {
		t.Fatalf("the load ran %d times after the kill, want 1", n)
	}
	first := values[0].at
	for _, v := range values {
		if v.at.Before(first) {
			first = v.at
		}
	}
	took := first.Sub(killed)
	t.Logf("the first waiter had the value %v after the loader's SIGKILL", took)
	if took > 2*time.Second {
		t.Fatalf("takeover took %v", took)
	}
}

// gotValue is a helper's report of a value it got, and when.
type gotValue struct {
	value []byte
	at    time.Time
}

// gotValues collects the "got VALUE UNIXNANO" reports of lines, which must
// all carry one value.
func gotValues(t *testing.T, lines [][]string) []gotValue {
	t.Helper()
	var out []gotValue
	for _, l := range lines {
		if l[0] != "got" || len(l) != 3 {
			continue
		}
		ns, err := strconv.ParseInt(l[2], 10, 64)
		if err != nil {
			t.Fatalf("report %v: %v", l, err)
		}
		out = append(out, gotValue{[]byte(l[1]), time.Unix(0, ns)})
		if string(out[0].value) != l[1] {
			t.Fatalf("callers got %q and %q", out[0].value, l[1])
		}
	}
	return out
}

// countIn adds one to the counter under key.
func countIn(m *Map, key string) error {
	return m.Compute([]byte(key), func(old []byte, found bool) ([]byte, bool) {
		var n uint64
		if found && len(old) == 8 {
			n = binary.LittleEndian.Uint64(old)
		}
		return binary.LittleEndian.AppendUint64(nil, n+1), true
	})
}

// counted reads the counter under key (0 when absent).
func counted(m *Map, key string) int {
	v, err := m.Get([]byte(key))
	if err != nil || len(v) != 8 {
		return 0
	}
	return int(binary.LittleEndian.Uint64(v))
}

// helperLoad runs the helper processes of the GetOrLoad tests; it reports
// whether role was one of them.
func helperLoad(role string) bool {
	switch role {
	case "load-cold", "load-hang":
	default:
		return false
	}
	m, err := Open(os.Getenv("HASHMAP_FILE"), &Options{LoadTimeout: time.Minute})
	if err != nil {
		testutil.Report("error %v", err)
		return true
	}
	defer m.Close()
	ctx := context.Background()
	if role == "load-hang" { // load key "cold", say so with key "loading", wait to be killed
		_, err := m.GetOrLoad(ctx, []byte("cold"), func(context.Context) ([]byte, error) {
			if err := m.Put([]byte("loading"), []byte("yes")); err != nil {
				testutil.Report("error %v", err)
			}
			time.Sleep(time.Hour) // the test kills it
			return nil, nil
		})
		testutil.Report("error the hanging load returned: %v", err)
		return true
	}
	// load-cold goroutines procs loadMillis: once procs processes are
	// ready (key "ready"), goroutines ask for key "cold"; a load counts
	// itself in key "loads" and takes loadMillis.
	var goroutines, procs, loadMillis int
	if _, err := fmt.Sscanf(os.Getenv("HASHMAP_ARGS"), "%d,%d,%d", &goroutines, &procs, &loadMillis); err != nil {
		testutil.Report("error args: %v", err)
		return true
	}
	if err := countIn(m, "ready"); err != nil {
		testutil.Report("error %v", err)
		return true
	}
	if !testutil.WaitFor(20*time.Second, func() bool { return counted(m, "ready") >= procs }) {
		testutil.Report("error the other processes did not get ready")
		return true
	}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := m.GetOrLoad(ctx, []byte("cold"), func(context.Context) ([]byte, error) {
				if err := countIn(m, "loads"); err != nil {
					return nil, err
				}
				time.Sleep(time.Duration(loadMillis) * time.Millisecond)
				return fmt.Appendf(nil, "loaded-by-%d", os.Getpid()), nil
			})
			if err != nil {
				testutil.Report("error %v", err)
				return
			}
			testutil.Report("got %s %d", v, time.Now().UnixNano())
		}()
	}
	wg.Wait()
	return true
}
