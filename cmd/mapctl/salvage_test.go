//go:build linux

package main

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// overwriteHeaderPage writes page over the first 4096 bytes of the file
// at p.
func overwriteHeaderPage(t *testing.T, p string, page []byte) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(page, 0); err != nil {
		t.Fatal(err)
	}
}

// TestDumpSalvageWithoutHeader: with its header page zeroed or overwritten
// with random bytes, a map is refused by dump, check and recover --repair,
// which point at dump --salvage; dump --salvage writes every entry, the
// same lines dump wrote before the damage, says on stderr what it rests
// on, and leaves the file as it is. Loaded into a new map, the lines give
// the map back.
func TestDumpSalvageWithoutHeader(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.map")
	const n = 3000
	fillNumbered(t, p, n, "--entries", "4000", "--key-size", "8", "--value-size", "32")
	c, want, e := mapctl(t, "", "dump", p)
	if c != exitOK {
		t.Fatalf("dump: %d %s", c, e)
	}
	random := make([]byte, 4096)
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	for _, page := range []struct {
		name  string
		bytes []byte
	}{{"zeroed", make([]byte, 4096)}, {"randomised", random}} {
		overwriteHeaderPage(t, p, page.bytes)
		for _, args := range [][]string{{"dump", p}, {"check", p}, {"recover", "--repair", p}} {
			if c, _, e := mapctl(t, "", args...); c != exitError || !strings.Contains(e, "mapctl dump --salvage "+p) {
				t.Errorf("%s header: %s: %d %q; want it refused, pointing at dump --salvage", page.name, args[0], c, e)
			}
		}
		before, _ := os.ReadFile(p)
		c, got, e := mapctl(t, "", "dump", "--salvage", p)
		if c != exitOK || got != want {
			t.Fatalf("%s header: dump --salvage: status %d, %d lines (want %d, the same as before): %s", page.name, c, strings.Count(got, "\n"), n, e)
		}
		if !strings.Contains(e, "salvage: the file header is lost") || !strings.Contains(e, "read as a plain map") {
			t.Errorf("%s header: dump --salvage said %q", page.name, e)
		}
		if after, _ := os.ReadFile(p); !bytes.Equal(before, after) {
			t.Fatalf("%s header: dump --salvage wrote the file", page.name)
		}
	}
	q := filepath.Join(dir, "new.map")
	if c, _, e := mapctl(t, "", "create", q, "--entries", "4000"); c != exitOK {
		t.Fatal(e)
	}
	_, salvaged, _ := mapctl(t, "", "dump", "--salvage", p)
	if c, _, e := mapctl(t, salvaged, "load", q, "-"); c != exitOK {
		t.Fatal(e)
	}
	if c, got, e := mapctl(t, "", "dump", q); c != exitOK || sortedLines(got) != sortedLines(want) {
		t.Fatalf("the new map dumps %d lines (%s), want the %d salvaged", strings.Count(got, "\n"), e, n)
	}
}

func sortedLines(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestWrongSizeSaysWhatToDo: a map one byte too long or 4 KiB short is
// refused naming both sizes and the command that mends or salvages it;
// dump --salvage reads it; and the truncate the error gives makes the
// longer one open again.
func TestWrongSizeSaysWhatToDo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	fillNumbered(t, p, 500, "--entries", "1000", "--key-size", "8", "--value-size", "32")
	_, want, _ := mapctl(t, "", "dump", p)
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	size := st.Size()
	for _, tc := range []struct {
		name string
		size int64
		says []string
	}{
		{"one byte appended", size + 1, []string{"truncate -s " + strconv.FormatInt(size, 10) + " " + p, strconv.FormatInt(size+1, 10), "zeros were added"}},
		{"4 KiB cut", size - 4096, []string{"mapctl dump --salvage " + p, strconv.FormatInt(size-4096, 10), strconv.FormatInt(size, 10), "4096 bytes are gone"}},
	} {
		if err := os.Truncate(p, tc.size); err != nil {
			t.Fatal(err)
		}
		c, _, e := mapctl(t, "", "check", p)
		for _, s := range tc.says {
			if c != exitError || !strings.Contains(e, s) {
				t.Errorf("%s: check: %d %q; want it to say %q", tc.name, c, e, s)
			}
		}
		if c, got, e := mapctl(t, "", "dump", "--salvage", p); c != exitOK || got != want {
			t.Errorf("%s: dump --salvage: %d, %d lines; %s", tc.name, c, strings.Count(got, "\n"), e)
		}
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
		if c, _, e := mapctl(t, "", "check", p); c != exitOK {
			t.Fatalf("%s: after truncate -s %d: check %d %s", tc.name, size, c, e)
		}
	}
}
