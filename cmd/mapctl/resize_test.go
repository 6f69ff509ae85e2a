//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// TestResize: a map loaded with many times the entries it was made for
// is resized: resize reports the old and new file, and dump gives the
// same lines after as before.
func TestResize(t *testing.T) {
	// A map that keeps its one segment (--no-splits) chains tiers as it
	// fills, which resize mends; the new file keeps the choice of no
	// splits unless --splits is given.
	p := filepath.Join(t.TempDir(), "m.map")
	if c, o, e := mapctl(t, "", "create", p, "--entries", "1000", "--key-size", "16", "--value-size", "32", "--no-splits"); c != 0 || !strings.Contains(o, "created") {
		t.Fatalf("create --no-splits: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "stats", p); c != 0 || !strings.Contains(o, "Segments: 1\n") {
		t.Fatalf("stats of a map created with --no-splits: %d %q %q", c, o, e)
	}
	var in strings.Builder
	const n = 30_000
	for i := range n {
		fmt.Fprintf(&in, "key-%06d\tvalue of key %d\n", i, i)
	}
	if c, _, e := mapctl(t, in.String(), "load", p, "-"); c != 0 {
		t.Fatalf("load: %d %q", c, e)
	}
	_, before, _ := mapctl(t, "", "dump", p)
	c, o, e := mapctl(t, "", "resize", p)
	if c != 0 {
		t.Fatalf("resize: %d %q %q", c, o, e)
	}
	want := regexp.MustCompile(`^resized ` + regexp.QuoteMeta(p) + `: 30000 entries kept in [0-9.]+m?s
  file size      [0-9.]+ MiB -> [0-9.]+ MiB \(grows to [0-9.]+ [MG]iB\)
  segments       1 -> ([3-9][0-9])
  tiers in use   [0-9]+ -> ([3-9][0-9]) \([0-9.]+ -> 1\.[0-9] per segment\)
  growth steps   [1-9][0-9]* -> 0
$`)
	if !want.MatchString(o) {
		t.Fatalf("resize said:\n%s", o)
	}
	if c, o, e := mapctl(t, "", "stats", p); c != 0 || !regexp.MustCompile(`\nSegments: [0-9]+\n`).MatchString(o) {
		t.Fatalf("stats of the resized map: %d %q %q; want one that does not split, as the map created with --no-splits", c, o, e)
	}
	// In another order: the order of the segments, which are others.
	if _, after, _ := mapctl(t, "", "dump", p); sortedLines(after) != sortedLines(before) || strings.Count(before, "\n") != n {
		t.Fatal("dump after resize has other lines than dump before")
	}
	if c, o, e := mapctl(t, "", "resize", p, "--splits"); c != 0 || !strings.Contains(o, "30000 entries kept") {
		t.Fatalf("resize --splits: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "stats", p); c != 0 || !regexp.MustCompile(`Segments: [0-9]+ in use, splits up to [0-9]+\n`).MatchString(o) {
		t.Fatalf("stats of the map resized with --splits: %d %q %q; want one that splits", c, o, e)
	}
	if c, o, e := mapctl(t, "", "resize", p); c != 0 {
		t.Fatalf("resize of a map that splits: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "stats", p); c != 0 || !strings.Contains(o, " in use, splits up to ") {
		t.Fatalf("stats of a map that splits, resized: %d %q %q; want one that splits still", c, o, e)
	}
	if c, o, e := mapctl(t, "", "resize", p, "--no-splits"); c != 0 {
		t.Fatalf("resize --no-splits: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "stats", p); c != 0 || !regexp.MustCompile(`\nSegments: [0-9]+\n`).MatchString(o) {
		t.Fatalf("stats of the map resized with --no-splits: %d %q %q; want one that does not split", c, o, e)
	}
	if c, o, e := mapctl(t, "", "resize", p, "--entries", "100000", "--no-growth"); c != 0 || !regexp.MustCompile(`segments       [0-9]+ -> 128\n`).MatchString(o) || strings.Contains(o, "grows to") {
		t.Fatalf("resize --entries 100000 --no-growth: %d %q %q", c, o, e)
	}
}

// TestResizeUsage: flags that conflict, and a path that is no map.
func TestResizeUsage(t *testing.T) {
	p := newMap(t)
	if c, _, e := mapctl(t, "", "resize", p, "--no-growth", "--max-size", "1GiB"); c != exitUsage || !strings.Contains(e, "--max-size and --no-growth") {
		t.Fatalf("resize --no-growth --max-size: %d %q", c, e)
	}
	if c, _, e := mapctl(t, "", "resize", p, "--splits", "--no-splits"); c != exitUsage || !strings.Contains(e, "--splits and --no-splits") {
		t.Fatalf("resize --splits --no-splits: %d %q", c, e)
	}
	if c, o, _ := mapctl(t, "", "resize", "--help"); c != 0 || !strings.Contains(o, "-splits") || !strings.Contains(o, "-no-splits") || !strings.Contains(o, "created with --no-splits") {
		t.Fatalf("resize --help does not tell of --splits and --no-splits: %q", o)
	}
	if c, _, e := mapctl(t, "", "resize", p, "--entries", "-3"); c != exitUsage {
		t.Fatalf("resize --entries -3: %d %q", c, e)
	}
	missing := filepath.Join(t.TempDir(), "none")
	if c, _, e := mapctl(t, "", "resize", missing); c != exitError || !strings.Contains(e, "mapctl: resize: ") {
		t.Fatalf("resize of no file: %d %q", c, e)
	}
}

// TestUpgradePointsToResize: upgrade of a map that does not grow says that
// resize gives it growth.
func TestUpgradePointsToResize(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	if c, o, e := mapctl(t, "", "create", p, "--entries", "1000", "--no-growth"); c != 0 {
		t.Fatalf("create: %d %q %q", c, o, e)
	}
	c, o, e := mapctl(t, "", "upgrade", p)
	if c != 0 || !strings.HasSuffix(o, p+": the file does not grow; mapctl resize "+p+" rewrites it in the current layout\n") {
		t.Fatalf("upgrade of a map without growth: %d %q %q", c, o, e)
	}
	if c, o, e = mapctl(t, "", "resize", p); c != 0 {
		t.Fatalf("resize: %d %q %q", c, o, e)
	}
	if c, o, e = mapctl(t, "", "upgrade", p); c != 0 || strings.Contains(o, "resize") {
		t.Fatalf("upgrade after resize: %d %q %q", c, o, e)
	}
}

// TestResizeInterrupted: Ctrl-C or SIGTERM while resize copies stops it
// with status 3, PATH.resize-tmp removed and PATH as it was, and the next
// resize is not disturbed by the one interrupted.
func TestResizeInterrupted(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	m, err := hashmap.Open(p, &hashmap.Options{Entries: 200_000, AverageKeySize: 16, AverageValueSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200_000
	keys, values := make([][]byte, n), make([][]byte, n)
	for i := range n {
		keys[i], values[i] = fmt.Appendf(nil, "key-%09d", i), fmt.Appendf(nil, "value of key %d", i)
	}
	if _, _, err := m.PutAll(keys, values); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	// Resize writes nothing to the old file: it is the same file, with
	// the same bytes, as long as path names it and its mtime stays.
	same := func(a, b os.FileInfo) bool {
		return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
	}
	before, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	tmp := p + ".resize-tmp"
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd := exec.Command(os.Args[0], "resize", p)
		cmd.Env = append(os.Environ(), loadProcessEnv+"=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// Interrupt once the new file is there: while the entries are
		// copied into it.
		for {
			if _, err := os.Stat(tmp); err == nil {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("resize ended before it made %s: %v, stderr %q", tmp, err, stderr.String())
			case <-time.After(100 * time.Microsecond):
			}
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		err := <-done
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitError || !strings.Contains(stderr.String(), "interrupted") {
			t.Fatalf("resize sent %v while it copies: %v, stderr %q; want exit status %d saying it was interrupted", sig, err, stderr.String(), exitError)
		}
		for _, f := range []string{tmp, tmp + "-lock"} {
			if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after %v: %s left (%v)", sig, f, err)
			}
		}
		if now, err := os.Stat(p); err != nil || !same(now, before) {
			t.Fatalf("resize interrupted by %v changed %s", sig, p)
		}
	}
	if c, o, e := mapctl(t, "", "resize", p); c != exitOK || !strings.Contains(o, fmt.Sprintf("%d entries kept", n)) {
		t.Fatalf("resize after the interrupted ones: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "check", p); c != exitOK {
		t.Fatalf("check: %d %q %q", c, o, e)
	}
}
