//go:build linux

package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestConcurrentCreates: of creates of one new path at once, one succeeds
// and the others say the file exists, as they would one after another.
func TestConcurrentCreates(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	var wg sync.WaitGroup
	codes := make([]int, 4)
	errs := make([]string, 4)
	for i := range codes {
		wg.Go(func() {
			var out, errb bytes.Buffer
			codes[i] = run([]string{"create", p, "--entries", "1000"}, strings.NewReader(""), &out, &errb)
			errs[i] = errb.String()
		})
	}
	wg.Wait()
	ok := 0
	for i, c := range codes {
		switch {
		case c == exitOK:
			ok++
		case c != exitError || !strings.Contains(errs[i], "already exists"):
			t.Errorf("create %d: %d %q", i, c, errs[i])
		}
	}
	if ok != 1 {
		t.Fatalf("%d creates succeeded, want 1", ok)
	}
}

// TestCreateOverAnEmptyFile: a failed create leaves an empty file, which
// is no map, and create makes one over it; a non-empty file at the path is
// refused. create leaves the empty file in place rather than removing it
// first, which could unlink a map another process was creating in it.
func TestCreateOverAnEmptyFile(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.map")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if c, o, e := mapctl(t, "", "create", empty, "--entries", "1000"); c != exitOK {
		t.Fatalf("create over an empty file: %d %q %q", c, o, e)
	}
	if c, _, _ := mapctl(t, "", "put", empty, "k", "v"); c != exitOK {
		t.Fatal("put into the created map")
	}
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("not a map"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, _, e := mapctl(t, "", "create", other, "--entries", "1000"); c == exitOK || !strings.Contains(e, "already exists") {
		t.Fatalf("create over a non-empty file: %d %q", c, e)
	}
}

// TestCreateSaysOneSegment: create's summary agrees in number with a map
// of one segment.
func TestCreateSaysOneSegment(t *testing.T) {
	p := filepath.Join(t.TempDir(), "one.map")
	c, o, e := mapctl(t, "", "create", p, "--entries", "100")
	if c != 0 || !strings.Contains(o, " 1 segment,") {
		t.Fatalf("create of one segment: %d %q %q", c, o, e)
	}
}

// TestCreateRefusesAverageSizesBeyondAnEntry: an average key and value
// that together exceed the largest entry are a usage error naming the
// flags, the values given and the largest accepted, and create leaves no
// file.
func TestCreateRefusesAverageSizesBeyondAnEntry(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.map")
	c, o, e := mapctl(t, "", "create", p, "--entries", "4", "--key-size", "536870912", "--value-size", "536870912")
	if c != exitUsage || o != "" {
		t.Fatalf("create: exit %d, stdout %q, stderr %q; want exit %d", c, o, e, exitUsage)
	}
	for _, want := range []string{"--key-size 536870912", "--value-size 536870912", "the largest --value-size accepted with this --key-size is 536870896"} {
		if !strings.Contains(e, want) {
			t.Errorf("stderr %q does not say %q", e, want)
		}
	}
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused create left a file: %v", err)
	}
}

// TestCreateSplitsByDefault: a store map that grows splits its segments
// as it fills unless created with --no-splits, and stats and inspect say
// how far.
func TestCreateSplitsByDefault(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		want  string
	}{{nil, "Segments: 1 in use, splits up to "}, {[]string{"--no-splits"}, "Segments: 1\n"}, {[]string{"--no-growth"}, "Segments: 1\n"}} {
		p := filepath.Join(t.TempDir(), "m.map")
		if c, o, e := mapctl(t, "", append([]string{"create", p, "--entries", "100"}, tc.flags...)...); c != 0 {
			t.Fatalf("create %v: %d %q %q", tc.flags, c, o, e)
		}
		for _, cmd := range []string{"stats", "inspect"} {
			if c, o, e := mapctl(t, "", cmd, p); c != 0 || !strings.Contains(o, tc.want) {
				t.Fatalf("%s of a map created with %v: %d %q %q; want %q", cmd, tc.flags, c, o, e, tc.want)
			}
		}
	}
}
