//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fillNumbered creates a map at p with createArgs and loads n entries,
// "keyI" to "VALUE-I-" and 20 x's.
func fillNumbered(t *testing.T, p string, n int, createArgs ...string) {
	t.Helper()
	if c, _, e := mapctl(t, "", append([]string{"create", p}, createArgs...)...); c != exitOK {
		t.Fatalf("create: %d %s", c, e)
	}
	var in strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&in, "key%d\tVALUE-%d-xxxxxxxxxxxxxxxxxxxx\n", i, i)
	}
	if c, _, e := mapctl(t, in.String(), "load", p, "-"); c != exitOK {
		t.Fatalf("load: %d %s", c, e)
	}
}

// writeAtMarker writes data into the file at p, at byte at from the first
// copy of marker.
func writeAtMarker(t *testing.T, p, marker string, at int64, data []byte) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	i := int64(bytes.Index(b, []byte(marker)))
	if i < 0 || i+at < 0 {
		t.Fatalf("%q not in the file", marker)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, i+at); err != nil {
		t.Fatal(err)
	}
}

// TestDumpSavesWhatDamageLeaves: one entry whose header is overwritten
// (so that it no longer decodes) costs a dump that entry only: the other
// entries of its segment and of the segments after it are written, and
// dump exits 3 saying what it left out. Stopping at the damaged segment
// would write 1459 of 2999 sound entries, where recover --repair keeps
// all 2999.
func TestDumpSavesWhatDamageLeaves(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	const n = 3000
	fillNumbered(t, p, n, "--entries", "4000", "--key-size", "8", "--value-size", "32")
	// The entry's key and value follow its 16-byte header, whose last 8
	// bytes are its chunk count and checksum: 0xff... is more chunks than
	// the tier has.
	writeAtMarker(t, p, "key1234VALUE-1234-", -8, bytes.Repeat([]byte{0xff}, 8))
	c, out, e := mapctl(t, "", "dump", p)
	if c != exitError || !strings.Contains(e, "1 entry that does not decode") || !strings.Contains(e, "2999 entries written") {
		t.Errorf("dump: status %d, stderr %q; want 3, naming the entry left out and the 2999 written", c, e)
	}
	if got := strings.Count(out, "\n"); got != n-1 || strings.Contains(out, "key1234\t") {
		t.Errorf("dump wrote %d lines (key1234 among them: %v), want the %d sound entries", got, strings.Contains(out, "key1234\t"), n-1)
	}
	if c, _, e := mapctl(t, "", "recover", "--repair", p); c != exitOK {
		t.Fatalf("recover --repair: %d %s", c, e)
	}
	c, out, e = mapctl(t, "", "dump", p)
	if c != exitOK || strings.Count(out, "\n") != n-1 {
		t.Errorf("after repair: dump status %d, %d lines, stderr %q; want 0 and %d", c, strings.Count(out, "\n"), e, n-1)
	}
}

// holdFirstWrite holds its first Write until released.
type holdFirstWrite struct {
	once            sync.Once
	first, released chan struct{}
}

func (w *holdFirstWrite) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.first); <-w.released })
	return len(p), nil
}

// TestDumpOfATruncatedFileEnds: a map file truncated while dump reads it
// makes dump fail with mapctl's memory-fault message and status 3, and
// does not hang: the fault's panic must not skip Range's exit from the
// in-flight gate, for which dump's deferred Close would wait for good.
func TestDumpOfATruncatedFileEnds(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	fillNumbered(t, p, 20000, "--entries", "20000", "--key-size", "8", "--value-size", "32")
	w := &holdFirstWrite{first: make(chan struct{}), released: make(chan struct{})}
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() { done <- run([]string{"dump", p}, strings.NewReader(""), w, &stderr) }()
	select {
	case <-w.first:
	case <-time.After(10 * time.Second):
		close(w.released)
		t.Fatal("dump wrote nothing in 10 s")
	}
	if err := os.Truncate(p, 8192); err != nil {
		t.Fatal(err)
	}
	close(w.released)
	select {
	case c := <-done:
		if c != exitError || !strings.Contains(stderr.String(), "truncated") {
			t.Errorf("dump: status %d, stderr %q; want 3 and the memory-fault message", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("dump of a file truncated under it did not end within 10 s")
	}
}

// TestGetRefusesADamagedValue: mapctl get verifies the entry's checksum
// and prints no value whose bytes changed after it was written: it exits 3
// naming the key, rather than printing the damaged bytes with status 0.
// The other keys print as before.
func TestGetRefusesADamagedValue(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	fillNumbered(t, p, 3000, "--entries", "4000", "--key-size", "8", "--value-size", "32")
	writeAtMarker(t, p, "key2000VALUE-2000-", 20, []byte("Z"))
	c, out, e := mapctl(t, "", "get", p, "key2000")
	if c != exitError || out != "" || !strings.Contains(e, "checksum") || !strings.Contains(e, "key2000") {
		t.Errorf("get of the damaged entry: status %d, stdout %q, stderr %q; want 3, nothing printed, the checksum failure named", c, out, e)
	}
	if c, out, e := mapctl(t, "", "get", p, "key1999"); c != exitOK || out != "VALUE-1999-xxxxxxxxxxxxxxxxxxxx\n" {
		t.Errorf("get of a sound entry: status %d, stdout %q, stderr %q", c, out, e)
	}
	if c, out, _ := mapctl(t, "", "get", p, "key9999"); c != exitNotFound || out != "" {
		t.Errorf("get of an absent key: status %d, stdout %q; want 1", c, out)
	}
}

// signalAfterFirstLine sends this process SIGINT once a line was written.
type signalAfterFirstLine struct {
	once sync.Once
	mu   sync.Mutex
	out  bytes.Buffer
}

func (w *signalAfterFirstLine) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out.Write(p)
	w.once.Do(func() { _ = syscall.Kill(os.Getpid(), syscall.SIGINT) })
	return len(p), nil
}

// TestStatsWatchEndsOnInterrupt: Ctrl-C, the documented way to end
// stats --watch, ends it with status 0, not 130 (a signal's death), which
// is none of the exit statuses --help lists.
func TestStatsWatchEndsOnInterrupt(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	fillNumbered(t, p, 10, "--entries", "100")
	w := &signalAfterFirstLine{}
	done := make(chan int, 1)
	var stderr bytes.Buffer
	// The signal is sent only after the first line, by when watchStats
	// catches it: it cannot end the test binary.
	go func() { done <- run([]string{"stats", p, "--watch", "20ms"}, strings.NewReader(""), w, &stderr) }()
	select {
	case c := <-done:
		if c != exitOK {
			t.Errorf("stats --watch ended by SIGINT: status %d, stderr %q; want 0", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stats --watch did not end on SIGINT within 10 s")
	}
}

// TestWatchKeepsAnIgnoredInterrupt: a mapctl started with SIGINT ignored
// (a shell does that to a job it starts in the background) goes on
// ignoring it: stats --watch is still running after one. Catching the
// signal to end the watch cleanly must not undo the inherited ignore:
// commands catch only signals not ignored.
// Started without the ignore, the same watch ends on SIGINT with status 0.
func TestWatchKeepsAnIgnoredInterrupt(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	fillNumbered(t, p, 10, "--entries", "100")
	for _, ignored := range []bool{true, false} {
		script := `exec "$0" stats "$1" --watch 20ms`
		if ignored {
			script = `trap "" INT; ` + script
		}
		cmd := exec.Command("sh", "-c", script, os.Args[0], p)
		cmd.Env = append(os.Environ(), loadProcessEnv+"=1")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(stdout)
		if _, err := r.ReadString('\n'); err != nil { // the watch runs
			_ = cmd.Process.Kill()
			t.Fatal(err)
		}
		go func() { _, _ = io.Copy(io.Discard, r) }()
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if ignored {
			select {
			case err := <-exited:
				t.Errorf("started with SIGINT ignored, stats --watch ended on one (%v)", err)
			case <-time.After(500 * time.Millisecond):
				_ = cmd.Process.Kill()
				<-exited
			}
			continue
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("stats --watch ended by SIGINT: %v; want status 0", err)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("stats --watch did not end on SIGINT within 10 s")
		}
	}
}
