//go:build linux

package hashmap

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// helperHoldPut opens the map at path for writing, puts its own key,
// reports it, and keeps the map open until its stdin closes.
func helperHoldPut(path string) {
	m, err := Open(path, &Options{NoCreate: true})
	if err != nil {
		testutil.Report("error %v", err)
		return
	}
	defer m.Close()
	key := fmt.Sprintf("process-%d", os.Getpid())
	if err := m.Put([]byte(key), []byte(key)); err != nil {
		testutil.Report("error %v", err)
		return
	}
	testutil.Report("put %s", key)
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// TestMoreProcessesThanTheOldDefault: 100 processes, more than the 64 a
// map had room for by default, have one map of the default options open
// for writing at once, each puts its key, and every key is there after,
// with Check clean.
func TestMoreProcessesThanTheOldDefault(t *testing.T) {
	const procs = 100
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, &Options{Entries: 10000, AverageKeySize: 16, AverageValueSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	start := time.Now()
	type helper struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		lines *bufio.Scanner
	}
	helpers := make([]helper, procs)
	for i := range helpers {
		cmd := helperCmd("hold-put", path)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		helpers[i] = helper{cmd, stdin, bufio.NewScanner(out)}
	}
	defer func() {
		for _, h := range helpers {
			h.stdin.Close()
			_ = h.cmd.Wait()
		}
	}()
	var keys []string
	for i, h := range helpers {
		report := ""
		for h.lines.Scan() {
			if line := h.lines.Text(); strings.HasPrefix(line, "@ ") {
				report = strings.TrimPrefix(line, "@ ")
				break
			}
		}
		key, ok := strings.CutPrefix(report, "put ")
		if !ok {
			t.Fatalf("helper %d: %q", i, report)
		}
		keys = append(keys, key)
	}
	// Every helper has the map open until its stdin closes.
	live, err := m.reg.Live(nil)
	if err != nil || len(live) != procs+1 {
		t.Fatalf("%d processes have the map open (%v), want %d", len(live), err, procs+1)
	}
	for _, k := range keys {
		if v, err := m.Get([]byte(k)); err != nil || string(v) != k {
			t.Fatalf("Get(%q) = %q, %v", k, v, err)
		}
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Fatalf("Check = %v, %v", problems, err)
	}
	t.Logf("%d processes opened the map and put their keys in %v", procs, time.Since(start).Round(time.Millisecond))
}
