//go:build linux

package main

import (
	"bytes"
	"encoding/json"
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

// TestDumpSalvageOfAGrownMap: a map that grew past the size its header
// records is dumped whole by dump --salvage: intact, with bytes appended
// (which check refuses), and with its header page zeroed, where stderr
// says the growth log was read; cut short inside its tiers, it writes
// only entries that were put, says that the entries past the end are
// lost, and exits with status 3; the file is never written.
func TestDumpSalvageOfAGrownMap(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.map")
	const n = 8000
	// --no-splits: the file must grow, which a map that splits does only
	// once it has split as far as it may.
	fillNumbered(t, p, n, "--entries", "1000", "--key-size", "8", "--value-size", "32", "--no-splits")
	c, o, e := mapctl(t, "", "stats", "--json", p)
	var st struct {
		GrowthSteps int   `json:"growth_steps"`
		FileSize    int64 `json:"file_size"`
	}
	if c != exitOK || json.Unmarshal([]byte(o), &st) != nil || st.GrowthSteps < 2 {
		t.Fatalf("stats --json: %d %q %s; want a map that grew at least twice", c, o, e)
	}
	c, want, e := mapctl(t, "", "dump", p)
	if c != exitOK || strings.Count(want, "\n") != n {
		t.Fatalf("dump: %d, %d lines: %s", c, strings.Count(want, "\n"), e)
	}
	clean, err := os.ReadFile(p)
	if err != nil || int64(len(clean)) != st.FileSize {
		t.Fatalf("the file: %d bytes, %v; stats says %d", len(clean), err, st.FileSize)
	}
	wantLines := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSuffix(want, "\n"), "\n") {
		wantLines[l] = true
	}
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
		status int
		says   string
		whole  bool
	}{
		{"intact", func(b []byte) []byte { return b }, exitOK, "tiers whole", true},
		{"bytes appended", func(b []byte) []byte { return append(b, "junk"...) }, exitOK, "4 bytes past the", true},
		{"header page zeroed", func(b []byte) []byte { clear(b[:4096]); return b }, exitOK, "grew 2 times", true},
		// Inside the last value in the file, so in a tier the pool
		// handed out.
		{"cut short", func(b []byte) []byte { return b[:bytes.LastIndex(b, []byte("VALUE-"))+3] }, exitError, "are lost", false},
	} {
		if err := os.WriteFile(p, tc.damage(bytes.Clone(clean)), 0o600); err != nil {
			t.Fatal(err)
		}
		if tc.name != "intact" {
			if c, _, e := mapctl(t, "", "check", p); c != exitError {
				t.Errorf("%s: check: %d %q; want it refused", tc.name, c, e)
			}
		}
		before, _ := os.ReadFile(p)
		c, got, e := mapctl(t, "", "dump", "--salvage", p)
		if c != tc.status || !strings.Contains(e, tc.says) {
			t.Errorf("%s: dump --salvage: status %d, stderr %q; want %d, saying %q", tc.name, c, e, tc.status, tc.says)
		}
		if tc.whole && got != want {
			t.Errorf("%s: dump --salvage wrote %d lines, want the %d dump wrote", tc.name, strings.Count(got, "\n"), n)
		}
		lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
		for _, l := range lines {
			if !wantLines[l] {
				t.Fatalf("%s: dump --salvage wrote %q, which dump did not", tc.name, l)
			}
		}
		if !tc.whole && (len(lines) == n || len(lines) < n/2) {
			t.Errorf("%s: dump --salvage wrote %d of %d lines; want those before the cut", tc.name, len(lines), n)
		}
		if testing.Verbose() {
			t.Logf("%s: %d lines; %s", tc.name, len(lines), e)
		}
		if after, _ := os.ReadFile(p); !bytes.Equal(before, after) {
			t.Fatalf("%s: dump --salvage wrote the file", tc.name)
		}
	}
}
