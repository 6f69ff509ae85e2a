package main

import (
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
