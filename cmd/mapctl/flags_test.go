//go:build linux

package main

import (
	"cmp"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelpSpellsFlagsWithTwoDashes: every command's --help lists its flags
// as they are written in the help texts and examples (--entries), never
// with the flag package's single dash (-entries).
func TestHelpSpellsFlagsWithTwoDashes(t *testing.T) {
	for _, cmd := range commands() {
		_, o, _ := mapctl(t, "", cmd.name, "--help")
		_, flags, ok := strings.Cut(o, "\nFlags:\n")
		if !ok {
			continue
		}
		flags, _, _ = strings.Cut(flags, "\n\n")
		for line := range strings.Lines(flags) {
			if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") {
				t.Errorf("%s --help: flag line %q; want --NAME", cmd.name, strings.TrimSpace(line))
			}
		}
	}
	if _, o, _ := mapctl(t, "", "create", "--help"); !strings.Contains(o, "\n  --entries int\n") || !strings.Contains(o, "(default 65536)") || !strings.Contains(o, "\n  --cache\n") {
		t.Errorf("create --help: flags not as --entries int (default 65536), --cache: %q", o)
	}
	if _, o, _ := mapctl(t, "", "bench", "--help"); !strings.Contains(o, `(default "uniform")`) {
		t.Errorf("bench --help: a string flag's default not quoted: %q", o)
	}
}

// TestFlagsAnywhere: a flag may come before the arguments, after them or
// between them, as --name VALUE or --name=VALUE, with one dash or two; "--"
// ends the flags. Errors name flags with two dashes.
func TestFlagsAnywhere(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.map")
	if c, _, e := mapctl(t, "", "create", p, "--cache", "--entries", "1000"); c != exitOK {
		t.Fatalf("create --cache: %d %q", c, e)
	}
	for _, args := range [][]string{
		{"put", p, "k", "v", "--ttl", "5m"},
		{"put", "--ttl", "5m", p, "k", "v"},
		{"put", p, "--ttl", "5m", "k", "v"},
		{"put", p, "k", "v", "--ttl=5m"},
		{"put", "-ttl", "5m", p, "k", "v"},
		{"put", "-ttl=5m", p, "k", "v"},
	} {
		if c, o, e := mapctl(t, "", args...); c != exitOK || o != "" || e != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want the entry stored", args, c, o, e)
		}
	}
	if c, o, e := mapctl(t, "", "stats", p, "--json"); c != exitOK || !strings.HasPrefix(o, "{") {
		t.Errorf("stats PATH --json: exit %d, stdout %.40q, stderr %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "stats", "--json=false", p); c != exitOK || !strings.HasPrefix(o, "Path: ") {
		t.Errorf("stats --json=false PATH: exit %d, stdout %.40q, stderr %q", c, o, e)
	}
	// After "--", "--ttl" is a key.
	if c, _, e := mapctl(t, "", "put", p, "--", "--ttl", "v"); c != exitOK {
		t.Errorf("put PATH -- --ttl v: exit %d, stderr %q", c, e)
	}
	if c, o, _ := mapctl(t, "", "get", "--", p, "--ttl"); c != exitOK || o != "v\n" {
		t.Errorf("get -- PATH --ttl: exit %d, stdout %q", c, o)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"put", p, "k", "v", "--tt", "5m"}, "unknown flag --tt"},
		{[]string{"put", p, "k", "v", "-tt=5m"}, "unknown flag -tt"},
		{[]string{"put", p, "k", "v", "--ttl"}, "flag --ttl needs a value: a duration with its unit"},
		{[]string{"stats", p, "--json=maybe"}, `invalid value "maybe" for flag --json: want true or false`},
		{[]string{"create", p, "--entries", "99999999999999999999"}, `invalid value "99999999999999999999" for flag --entries: value out of range: want a whole number`},
		{[]string{"create", p, "--mode", "99"}, `invalid value "99" for flag --mode: want permission bits in octal`},
		{[]string{"stats", p, "---json"}, "bad flag syntax: ---json"},
	} {
		c, o, e := mapctl(t, "", tc.args...)
		if c != exitUsage || o != "" || !strings.Contains(e, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, c, o, e, exitUsage, tc.want)
		}
	}
}

// TestMisspeltNamesSuggestTheNear: an unknown command or flag is answered
// with the names within a couple of edits of it, or that it starts, and
// exit status 2; a name far from any suggests nothing.
func TestMisspeltNamesSuggestTheNear(t *testing.T) {
	p := newMap(t)
	for _, tc := range []struct {
		args []string
		want string // "" for no suggestion
	}{
		{[]string{"creat"}, `unknown command "creat": did you mean "create"?`},
		{[]string{"crate", p}, `did you mean "create"?`},
		{[]string{"stat", p}, `did you mean "stats"?`},
		{[]string{"dmup", p}, `did you mean "dump"?`},
		{[]string{"rec"}, `did you mean "recover"?`},
		{[]string{"de"}, `did you mean "delete" or "demo"?`},
		{[]string{"hlep"}, `did you mean "help"?`},
		{[]string{"help", "inspcet"}, `did you mean "inspect"?`},
		{[]string{"--hlep"}, `did you mean --help?`},
		{[]string{"create", p, "--entires", "5"}, "unknown flag --entires: did you mean --entries?"},
		{[]string{"stats", p, "--wacth", "1s"}, "did you mean --watch?"},
		{[]string{"stats", p, "-jsno"}, "unknown flag -jsno: did you mean --json?"},
		{[]string{"bench", "--value-szie=8"}, "unknown flag --value-szie: did you mean --value-size?"},
		{[]string{"xyzzy"}, ""},
		{[]string{"demo-wrker"}, ""}, // hidden commands are not offered
		{[]string{"stats", p, "-k"}, ""},
		{[]string{"create", p, "--colour"}, ""},
	} {
		c, o, e := mapctl(t, "", tc.args...)
		if c != exitUsage || o != "" {
			t.Errorf("%q: exit %d, stdout %q; want exit %d", tc.args, c, o, exitUsage)
		}
		if tc.want == "" && strings.Contains(e, "did you mean") || !strings.Contains(e, tc.want) {
			t.Errorf("%q: stderr %q; want %q", tc.args, e, cmp.Or(tc.want, "no suggestion"))
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"create", "create", 0}, {"creat", "create", 1},
		{"entires", "entries", 1}, {"wacth", "watch", 1}, {"get", "put", 2}, {"ab", "ba", 1},
		{"kitten", "sitting", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := editDistance(tc.b, tc.a); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.b, tc.a, got, tc.want)
		}
	}
}
