//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sharedmap/sharedmap/hashmap"
)

// Output that cannot be written (a full disk, a closed pipe) fails the
// command: inspect and check used to exit 0 with nothing delivered. The
// message names the command, as every other error does, and says the
// command itself completed (a create's map is there).
func TestOutputErrorFails(t *testing.T) {
	p := newMap(t)
	for _, args := range [][]string{{"inspect", p}, {"check", p}, {"stats", p}, {"help"}} {
		var stderr bytes.Buffer
		want := "mapctl: " + args[0] + ": writing the output"
		if args[0] == "help" { // help is no command of the table
			want = "mapctl: writing the output"
		}
		if c := run(args, strings.NewReader(""), failingWriter{}, &stderr); c != exitError || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "completed") {
			t.Errorf("%q to a failing writer: exit %d, %q", args, c, stderr.String())
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestLongKeyShortenedInErrors: an error about a 100 KB key quotes its
// first bytes and says how long it is, rather than echoing all of it.
func TestLongKeyShortenedInErrors(t *testing.T) {
	p := newMap(t)
	key := strings.Repeat("k", 100_000)
	for _, args := range [][]string{{"put", p, key, "v"}, {"get", p, key}, {"delete", p, key}} {
		c, _, e := mapctl(t, "", args...)
		if c == 0 || len(e) > 1000 || !strings.Contains(e, `"`+key[:maxQuoted]+`"… (100000 bytes)`) {
			t.Errorf("%s of a 100 KB key: exit %d, stderr of %d bytes, %.300q", args[0], c, len(e), e)
		}
	}
	// The flag package's errors name the argument they reject: a long one
	// that starts with "-" is cut the same way, one word or many, and so
	// is a long unknown command.
	spaced := strings.Repeat("k ", 50_000)
	hundredKB := regexp.MustCompile(`… \(10000[01] bytes\)`) // the argument's own length, said
	for _, args := range [][]string{
		{"get", p, "-" + key}, {"create", p, "--entries", key}, {"stats", p, "--json=" + key},
		{"get", p, "-" + spaced}, {"create", p, "--entries", spaced}, {"stats", p, "--json=" + spaced},
		{key}, {"help", key},
	} {
		c, _, e := mapctl(t, "", args...)
		if c != exitUsage || len(e) > 1000 || !hundredKB.MatchString(e) {
			t.Errorf("%.20q with a 100 KB argument: exit %d, stderr of %d bytes, %.300q", args[0], c, len(e), e)
		}
	}
	// A cut inside a character backs up to its start.
	if got, want := quoteShort(strings.Repeat("k", maxQuoted-1)+"é"+"tail"), `"`+strings.Repeat("k", maxQuoted-1)+`"… (69 bytes)`; got != want {
		t.Errorf("quoteShort cutting é: %s, want %s", got, want)
	}
	if got := quoteShort("short\n"); got != `"short\n"` {
		t.Errorf("quoteShort of a short key: %s", got)
	}
}

// TestErrorsNameFlags: errors that hashmap words with Options fields
// (MaxBloatFactor, Cache, DefaultTTL) name the flags that set them.
func TestErrorsNameFlags(t *testing.T) {
	full := filepath.Join(t.TempDir(), "full.map")
	if c, _, e := mapctl(t, "", "create", full, "--entries", "4", "--key-size", "4", "--value-size", "4", "--no-growth"); c != 0 {
		t.Fatalf("create: %q", e)
	}
	bounded := filepath.Join(t.TempDir(), "bounded.map")
	if c, _, e := mapctl(t, "", "create", bounded, "--entries", "4", "--key-size", "4", "--value-size", "4", "--max-size", "600KiB"); c != 0 {
		t.Fatalf("create: %q", e)
	}
	var many strings.Builder
	for i := range 50000 {
		fmt.Fprintf(&many, "other%d\tvalue\n", i)
	}
	var lines strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&lines, "key%d\tvalue\n", i)
	}
	p := newMap(t)
	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{lines.String(), []string{"load", full, "-"}, "more --entries or a larger --bloat"},
		{"", []string{"put", full, "one", "more"}, "more --entries or a larger --bloat"},
		{many.String(), []string{"load", bounded, "-"}, "(--max-size "},
		{"", []string{"put", "--ttl", "1m", p, "k", "v"}, "not created as a cache (mapctl create --cache)"},
		{"k\tv\n", []string{"load", "--ttl", "1m", p, "-"}, "--ttl: the map was not created as a cache (mapctl create --cache)"},
	} {
		c, _, e := mapctl(t, tc.stdin, tc.args...)
		if c != exitError || !strings.Contains(e, tc.want) || strings.Contains(e, "MaxBloatFactor") || strings.Contains(e, "Options.") || strings.Contains(e, "DefaultTTL") {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q, no Options field", tc.args, c, e, exitError, tc.want)
		}
	}
}

// TestTimeoutSaysWhatReleases: a lock timeout in a command that only
// reads, which waits out a lock a dead process left, names the commands
// that find and release such a lock; a writer releases it itself.
func TestTimeoutSaysWhatReleases(t *testing.T) {
	timeout := fmt.Errorf("segment 35: %w", hashmap.ErrTimeout)
	for _, c := range []*command{getCmd, dumpCmd, statsCmd, inspectCmd, checkCmd, putCmd} {
		var errb bytes.Buffer
		e := &env{stderr: &errb}
		e.fail(c, timeout)
		if hint := strings.Contains(errb.String(), "mapctl recover releases it"); hint != c.readOnly {
			t.Errorf("%s: %q; want the hint %v", c.name, errb.String(), c.readOnly)
		}
	}
}

// TestBadFlagValuesSayWhatTheFlagTakes: a flag value that does not parse
// is answered with what the flag takes and an example, where the flag
// package says only "parse error", which gives no clue that --ttl wants a
// unit or that --entries takes no exponent.
func TestBadFlagValuesSayWhatTheFlagTakes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", p, "--entries", "1e6"}, `invalid value "1e6" for flag --entries: want a whole number in digits`},
		{[]string{"create", p, "--bloat", "lots"}, `invalid value "lots" for flag --bloat: want a number`},
		{[]string{"put", "--ttl", "5", p, "k", "v"}, `invalid value "5" for flag --ttl: want a duration with its unit, as 90s`},
		{[]string{"create", p, "--entries", "-5"}, `--entries -5: want at least 1`},
		{[]string{"create", p, "--bloat", "0.5"}, `--bloat 0.5: want a number at least 1`},
	} {
		if c, _, e := mapctl(t, "", tc.args...); c != exitUsage || !strings.Contains(e, tc.want) {
			t.Errorf("mapctl %v: status %d, stderr %q; want %d and %q", tc.args, c, e, exitUsage, tc.want)
		}
	}
}
