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
)

// loadProcessEnv makes the test binary run mapctl with its arguments, for
// tests that need a mapctl of its own process (one to interrupt).
const loadProcessEnv = "MAPCTL_TEST_PROCESS"

func init() {
	if os.Getenv(loadProcessEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
}

// A load fed by a slow stream stores each line as it comes, not when a
// batch fills; an interrupt ends it with every line read stored, the map
// closed (check finds no process that died with it open) and a message
// saying after which line it stopped.
func TestLoadStoresAsLinesComeAndOnInterrupt(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	if c, _, e := mapctl(t, "", "create", p, "--entries", "1000"); c != exitOK {
		t.Fatalf("create: %d %s", c, e)
	}
	cmd := exec.Command(os.Args[0], "load", p, "-")
	cmd.Env = append(os.Environ(), loadProcessEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitFor := func(key, want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			c, out, _ := mapctl(t, "", "get", p, key)
			if c == exitOK && out == want+"\n" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("get %s: %d %q after 20 s, want %q: the line waits in load's batch", key, c, out, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, kv := range []string{"first\tone\n", "second\ttwo\n"} {
		if _, err := stdin.Write([]byte(kv)); err != nil {
			t.Fatal(err)
		}
		k, v, _ := strings.Cut(strings.TrimSuffix(kv, "\n"), "\t")
		waitFor(k, v)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitError {
		t.Fatalf("interrupted load: %v, want exit status %d", err, exitError)
	}
	if want := "interrupted after stdin line 2: stored 2 entries"; !strings.Contains(stderr.String(), want) {
		t.Errorf("interrupted load said %q, want %q", stderr.String(), want)
	}
	if c, out, e := mapctl(t, "", "check", p); c != exitOK {
		t.Errorf("check after the interrupted load: %d %s %s", c, out, e)
	}
}

// TestLoadInterruptedMidFileStoresWhatItParsed: an interrupt while load
// stores one batch of a large file and parses the next stores every line
// parsed, the batches handed over and the one being filled, and says
// after which line it stopped: with a key per line, that many entries.
func TestLoadInterruptedMidFileStoresWhatItParsed(t *testing.T) {
	const lines = 600000
	p := filepath.Join(t.TempDir(), "m.map")
	if c, _, e := mapctl(t, "", "create", p, "--entries", fmt.Sprint(lines)); c != exitOK {
		t.Fatalf("create: %d %s", c, e)
	}
	var in strings.Builder
	for i := range lines {
		fmt.Fprintf(&in, "key-%07d\t%s\n", i, strings.Repeat("v", 40))
	}
	f := filepath.Join(t.TempDir(), "in.tsv")
	if err := os.WriteFile(f, []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "load", p, f)
	cmd.Env = append(os.Environ(), loadProcessEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Interrupt once the load is under way: once the map holds entries.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if c, o, _ := mapctl(t, "", "stats", p, "--json"); c == exitOK && !strings.Contains(o, `"entries": 0,`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the load stored nothing within 20 s")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitError {
		if err == nil {
			t.Skip("the load ended before the interrupt came")
		}
		t.Fatalf("interrupted load: %v %q, want exit status %d", err, stderr.String(), exitError)
	}
	var line, stored int
	msg := stderr.String()
	i := strings.Index(msg, "interrupted after ")
	if i < 0 {
		t.Fatalf("interrupted load said %q", msg)
	}
	if _, err := fmt.Sscanf(msg[i:], "interrupted after "+f+" line %d: stored %d entries", &line, &stored); err != nil {
		t.Fatalf("interrupted load said %q: %v", msg, err)
	}
	t.Logf("interrupted after line %d of %d", line, lines)
	if line != stored || line == 0 {
		t.Errorf("interrupted after line %d with %d entries stored: every line parsed should be", line, stored)
	}
	if c, o, _ := mapctl(t, "", "stats", p, "--json"); c != exitOK || !strings.Contains(o, fmt.Sprintf(`"entries": %d,`, stored)) {
		t.Errorf("load said it stored %d entries; stats says %q", stored, o)
	}
	if c, out, e := mapctl(t, "", "check", p); c != exitOK {
		t.Errorf("check after the interrupted load: %d %s %s", c, out, e)
	}
}

// TestLoadCountsAddedAndReplaced: load says how many lines it read, how
// many keys were new to the map and how many it replaced, where a count of
// stored entries alone would say 12 for 3 keys written 4 times.
func TestLoadCountsAddedAndReplaced(t *testing.T) {
	p := newMap(t)
	var in strings.Builder
	for round := range 4 {
		for _, k := range []string{"a", "b", "c"} {
			fmt.Fprintf(&in, "%s\t%d\n", k, round)
		}
	}
	in.WriteString("\n")
	if c, o, e := mapctl(t, in.String(), "load", p, "-"); c != exitOK || o != "read 13 lines: 3 keys added, 9 replaced\n" || e != "" {
		t.Errorf("load of 3 keys 4 times: exit %d, stdout %q, stderr %q", c, o, e)
	}
	if c, o, _ := mapctl(t, "", "get", p, "b"); c != exitOK || o != "3\n" {
		t.Errorf("get b after the load: exit %d, %q; want the last line's value", c, o)
	}
	if c, o, _ := mapctl(t, "d\t1\na\t9\n", "load", p, "-"); c != exitOK || o != "read 2 lines: 1 key added, 1 replaced\n" {
		t.Errorf("second load: exit %d, stdout %q", c, o)
	}
	if c, o, _ := mapctl(t, "", "load", p, "/dev/null"); c != exitOK || o != "read 0 lines: 0 keys added, 0 replaced\n" {
		t.Errorf("load of nothing: exit %d, stdout %q", c, o)
	}
}

// TestLoadOfManyLinesKeepsTheLastValue: a load larger than a batch,
// stored in the map's order batch by batch, counts exactly and leaves
// each key with the value of its last line, from a file and from stdin,
// where a key's lines fall in different batches and in one.
func TestLoadOfManyLinesKeepsTheLastValue(t *testing.T) {
	const keys, rounds = 40000, 4
	var in strings.Builder
	for r := range rounds {
		for i := range keys {
			fmt.Fprintf(&in, "k%d\tv%d-%d\n", i, r, i)
			if i%1000 == 0 {
				fmt.Fprintf(&in, "k%d\tnext-%d\n", i+1, r) // repeated in the batch, and overwritten next
			}
		}
	}
	lines := keys*rounds + rounds*keys/1000
	f := filepath.Join(t.TempDir(), "in.tsv")
	if err := os.WriteFile(f, []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{f, "-"} {
		p := filepath.Join(t.TempDir(), "m.map")
		if c, _, e := mapctl(t, "", "create", p, "--entries", "60000"); c != exitOK {
			t.Fatalf("create: %d %s", c, e)
		}
		want := fmt.Sprintf("read %d lines: %d keys added, %d replaced\n", lines, keys, lines-keys)
		if c, o, e := mapctl(t, in.String(), "load", p, src); c != exitOK || o != want {
			t.Fatalf("load %s: %d %q %q; want %q", src, c, o, e, want)
		}
		for _, i := range []int{0, 1, 1001, keys / 2, keys - 1} {
			if c, o, _ := mapctl(t, "", "get", p, fmt.Sprintf("k%d", i)); c != exitOK || o != fmt.Sprintf("v%d-%d\n", rounds-1, i) {
				t.Fatalf("load %s: get k%d: %d %q; want the last line's value", src, i, c, o)
			}
		}
	}
}

// TestProgressLine: the progress line shows the part done, the count, the
// rate and the time left, grouped in thousands, and fits 80 columns at
// its widest; with no total it shows the count and the rate.
func TestProgressLine(t *testing.T) {
	for _, tc := range []struct {
		done, total, count int64
		elapsed            time.Duration
		want               string
	}{
		{31, 100, 620_000, 2 * time.Second, "loading [######..............]  31% 620,000 lines 310,000/s ETA 4s"},
		{1, 2, 1_000_000, 90 * time.Second, "loading [##########..........]  50% 1,000,000 lines 11,111/s ETA 1m30s"},
		{100, 100, 5, time.Second, "loading [####################] 100% 5 lines 5/s ETA 0s"},
		{0, 0, 1_234_567, time.Second, "loading 1,234,567 lines 1,234,567/s"},
	} {
		if got := progressLine("loading", "lines", tc.done, tc.total, tc.count, tc.elapsed); got != tc.want {
			t.Errorf("progressLine(%d of %d, %d lines, %v) =\n%q, want\n%q", tc.done, tc.total, tc.count, tc.elapsed, got, tc.want)
		}
	}
	if got := progressLine("filling", "entries", 1, 1<<40, 999_999_999, 10*time.Second); len(got) > progressMax || !strings.HasSuffix(got, " ETA >99h") {
		t.Errorf("widest progress line has %d columns, want at most %d: %q", len(got), progressMax, got)
	}

	// Drawn in place, cleared to the end of the line, and erased when done.
	var b bytes.Buffer
	now := time.Now()
	p := &progress{w: &b, on: true, total: 100, unit: "lines", start: now.Add(-2 * time.Second), last: now.Add(-time.Second)}
	p.update(31, 620_000)
	p.update(32, 640_000) // within a tenth of a second: not drawn
	p.done()
	if want := regexp.MustCompile(`^\rloading \[#{6}\.{14}\]  31% 620,000 lines 3\d\d,\d\d\d/s ETA 4s\033\[K\r\033\[K$`); !want.MatchString(b.String()) {
		t.Errorf("progress wrote %q, want a match for %q", b.String(), want)
	}
}

func TestLoadDumpRoundTrip(t *testing.T) {
	p := newMap(t)
	entries := map[string]string{
		"plain":             "value",
		"tab\tkey":          "tab\tvalue",
		"new\nline":         "multi\nline\nvalue",
		`back\slash`:        `C:\dir\`,
		"cr\r":              "\r\n",
		"empty-value":       "",
		"":                  "empty key",
		"big":               strings.Repeat("x", 70_000), // longer than bufio.Scanner's default line
		"unicode é\x00\xff": "bytes \x01",
	}
	var in strings.Builder
	for k, v := range entries {
		in.Write(appendEscaped(nil, []byte(k)))
		in.WriteByte('\t')
		in.Write(appendEscaped(nil, []byte(v)))
		in.WriteByte('\n')
	}
	in.WriteString("\n") // empty lines are skipped
	if c, o, e := mapctl(t, in.String(), "load", p, "-"); c != 0 || o != "read 10 lines: 9 keys added, 0 replaced\n" {
		t.Fatalf("load: %d %q %q", c, o, e)
	}
	if c, o, _ := mapctl(t, "", "get", p, "tab\tkey"); c != 0 || o != "tab\tvalue\n" {
		t.Fatalf("get after load: %d %q", c, o)
	}
	c, dump, e := mapctl(t, "", "dump", p)
	if c != 0 {
		t.Fatalf("dump: %d %q", c, e)
	}
	lines := strings.Split(strings.TrimSuffix(dump, "\n"), "\n")
	if len(lines) != len(entries) {
		t.Fatalf("dump has %d lines, want %d:\n%s", len(lines), len(entries), dump)
	}
	// Load the dump, from a file, into a second map: same contents.
	f := filepath.Join(t.TempDir(), "dump.tsv")
	if err := os.WriteFile(f, []byte(dump), 0o644); err != nil {
		t.Fatal(err)
	}
	p2 := newMap(t)
	if c, o, e := mapctl(t, "", "load", p2, f); c != 0 || o != "read 9 lines: 9 keys added, 0 replaced\n" {
		t.Fatalf("load of the dump: %d %q %q", c, o, e)
	}
	for k, v := range entries {
		if c, o, e := mapctl(t, "", "get", p2, "--", k); c != 0 || o != v+"\n" {
			t.Fatalf("get %q from the reloaded map: %d %q %q; want %q", k, c, o, e, v)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	p := newMap(t)
	c, o, e := mapctl(t, "a\t1\nb\t2\nno tab here\nc\t3\n", "load", p, "-")
	if c != exitError || !strings.Contains(e, "line 3") || !strings.Contains(e, "loaded 2 entries") || o != "" {
		t.Fatalf("load with a bad line: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "a\\q\t1\n", "load", p, "-"); c != exitError || !strings.Contains(e, `unknown escape \q`) {
		t.Fatalf("load with a bad escape: %d %q", c, e)
	}
	// A full map stops the load at the first failing put.
	small := filepath.Join(t.TempDir(), "small.map")
	if c, _, e := mapctl(t, "", "create", small, "--entries", "10", "--key-size", "8", "--value-size", "8", "--bloat", "1", "--no-growth"); c != 0 {
		t.Fatalf("create: %q", e)
	}
	var in strings.Builder
	for i := range 100000 {
		in.WriteString("key-" + strings.Repeat("k", i%7) + itoa(i) + "\t" + strings.Repeat("v", 100) + "\n")
	}
	c, _, e = mapctl(t, in.String(), "load", small, "-")
	if c != exitError || !strings.Contains(e, "map is full") || !strings.Contains(e, "may be stored or not") {
		t.Fatalf("load into a full map: %d %q", c, e)
	}
	// The count it reports is the map's, and the line it names, the one
	// that failed, is not stored: lines are stored in batches, each in
	// the map's order, so other lines of its batch may be.
	var line, loaded int
	if _, err := fmt.Sscanf(e[strings.Index(e, "line "):], "line %d:", &line); err != nil {
		t.Fatalf("no line number in %q: %v", e, err)
	}
	if _, err := fmt.Sscanf(e[strings.Index(e, "(loaded "):], "(loaded %d entries;", &loaded); err != nil {
		t.Fatalf("no count in %q: %v", e, err)
	}
	if c, o, _ := mapctl(t, "", "stats", small, "--json"); c != 0 || !strings.Contains(o, fmt.Sprintf(`"entries": %d,`, loaded)) {
		t.Fatalf("load reported %d entries loaded; stats says %q", loaded, o)
	}
	i := line - 1
	if c, o, _ := mapctl(t, "", "get", small, "key-"+strings.Repeat("k", i%7)+itoa(i)); c != exitNotFound {
		t.Fatalf("the line load named as failing, %d, is stored: get: %d %q", line, c, o)
	}
	if c, _, e := mapctl(t, "", "load", p, filepath.Join(t.TempDir(), "nonexistent")); c != exitError || !strings.Contains(e, "nonexistent") {
		t.Fatalf("load of a missing file: %d %q", c, e)
	}
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

func TestEscapeRoundTrip(t *testing.T) {
	for _, s := range []string{"", "a", "\t\n\r\\", `\t`, "x\\\\ty", "\x00\xff"} {
		got, err := unescape(appendEscaped(nil, []byte(s)))
		if err != nil || string(got) != s {
			t.Errorf("%q: round trip gives %q, %v", s, got, err)
		}
	}
	if _, err := unescape([]byte(`a\`)); err == nil {
		t.Error("trailing backslash accepted")
	}
}

// A value too large for a tier (stored in parts) goes through load, get,
// dump and a load of the dump whole, and check counts it as one entry.
func TestLoadDumpLargeValue(t *testing.T) {
	p := newMap(t)
	var big strings.Builder
	for i := 0; big.Len() < 2<<20; i++ {
		fmt.Fprintf(&big, "%08x", uint32(i)*2654435761)
	}
	v := big.String()
	if c, o, e := mapctl(t, "large\t"+v+"\nsmall\tx\n", "load", p, "-"); c != 0 || o != "read 2 lines: 2 keys added, 0 replaced\n" {
		t.Fatalf("load: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "get", p, "large"); c != 0 || o != v+"\n" {
		t.Fatalf("get: %d, %d bytes, %q", c, len(o), e)
	}
	c, dump, e := mapctl(t, "", "dump", p)
	if c != 0 || len(dump) != len("large\t")+len(v)+len("\nsmall\tx\n") {
		t.Fatalf("dump: %d, %d bytes, %q", c, len(dump), e)
	}
	p2 := newMap(t)
	if c, o, e := mapctl(t, dump, "load", p2, "-"); c != 0 || o != "read 2 lines: 2 keys added, 0 replaced\n" {
		t.Fatalf("load of the dump: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "get", p2, "large"); c != 0 || o != v+"\n" {
		t.Fatalf("get from the reloaded map: %d, %d bytes, %q", c, len(o), e)
	}
	if c, o, e := mapctl(t, "", "check", p2); c != 0 || !strings.Contains(o, "2 entries, no problems") {
		t.Fatalf("check: %d %q %q", c, o, e)
	}
}
