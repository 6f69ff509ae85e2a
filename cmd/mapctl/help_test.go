//go:build linux

package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestUsage(t *testing.T) {
	p := newMap(t)
	for _, args := range [][]string{
		{},
		{"nosuchcommand"},
		{"put", p},
		{"get", p, "a", "b"},
		{"create"},
		{"create", p, "--entries", "x"},
		{"stats", p, "--nosuchflag"},
		{"demo", "extra"},
		{"demo", "--goroutines", "10001"},
		{"demo-worker", p, "0", "10001", "1"},
		{"help", "nosuchcommand"},
		{"create", filepath.Join(t.TempDir(), "s3"), "--segments", "3"}, // refused by Open's checks
		{"create", filepath.Join(t.TempDir(), "nan"), "--bloat", "NaN"},
		{"stats", p, "--segments"},   // only adds to --json
		{"stats", p, "--count", "3"}, // only counts --watch lines
		{"put", p, "k", "v", "--ttl", "-1s"},
		{"bench", "extra"},
		{"bench", "--key-size", "7"},
		{"bench", "--reads", "101"},
		{"bench", "--batch", "0"},
		{"bench", "--batch", "5000"},
		{"bench", "--keys", "gauss"},
		{"bench", "--duration", "0s"},
		{"bench", "--procs", "0"},
	} {
		c, o, e := mapctl(t, "", args...)
		if c != exitUsage || o != "" || !strings.Contains(e, "usage") && !strings.Contains(e, "unknown command") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and a message", args, c, o, e)
		}
	}
	if c, o, _ := mapctl(t, "", "help"); c != 0 || !strings.Contains(o, "Commands:") || strings.Contains(o, "demo-worker") {
		t.Fatalf("help: %d %q", c, o)
	}
	for _, cmd := range commands() {
		for _, args := range [][]string{{cmd.name, "--help"}, {cmd.name, "-h"}, {"help", cmd.name}} {
			c, o, e := mapctl(t, "", args...)
			if c != 0 || !strings.Contains(o, "usage: mapctl "+cmd.name) || !strings.Contains(o, "Example") || !strings.Contains(o, "Exit status") || e != "" {
				t.Errorf("%q: %d %q %q", args, c, o, e)
			}
		}
	}
	if _, o, _ := mapctl(t, "", "create", "--help"); !strings.Contains(o, "-entries int") || !strings.Contains(o, "(default 65536)") {
		t.Errorf("create --help does not show the flags with defaults: %q", o)
	}
	if _, o, _ := mapctl(t, "", "dump", "--help"); !strings.Contains(o, `\t`) || !strings.Contains(o, `\\`) {
		t.Errorf("dump --help does not document the escapes: %q", o)
	}
}

// The command list of "mapctl help" is a table: every summary starts in the
// same column, however long the longest command name.
func TestHelpListAligns(t *testing.T) {
	c, out, _ := mapctl(t, "", "help")
	if c != exitOK {
		t.Fatalf("help: exit %d", c)
	}
	_, list, _ := strings.Cut(out, "Commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	column := -1
	rows := 0
	for row := range strings.SplitSeq(list, "\n") {
		var summary string
		for _, c := range commands() {
			if strings.HasPrefix(row, "  "+c.name+" ") {
				summary = c.summary
			}
		}
		if strings.HasPrefix(row, "  help ") {
			summary = "show this help"
		}
		at := strings.Index(row, summary)
		if summary == "" || at < 0 {
			t.Fatalf("row %q names no command", row)
		}
		if column >= 0 && at != column {
			t.Errorf("row %q: summary in column %d, others in %d", row, at, column)
		}
		column = at
		rows++
	}
	if rows < 10 {
		t.Fatalf("found %d rows in %q", rows, list)
	}
}

// TestHelpHelp: help, which "mapctl help" lists, has a help of its own
// like every other command.
func TestHelpHelp(t *testing.T) {
	for _, args := range [][]string{{"help", "help"}, {"help", "--help"}, {"help", "-h"}} {
		c, o, e := mapctl(t, "", args...)
		if c != 0 || !strings.Contains(o, "usage: mapctl help") || !strings.Contains(o, "Example") || !strings.Contains(o, "Exit status") || e != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want help's usage and exit 0", args, c, o, e)
		}
	}
	// "--help COMMAND" is "help COMMAND"; a second command is a usage error.
	for _, args := range [][]string{{"--help", "create"}, {"-h", "create"}, {"help", "create"}} {
		if c, o, e := mapctl(t, "", args...); c != 0 || !strings.Contains(o, "usage: mapctl create") || e != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want create's usage", args, c, o, e)
		}
	}
	for _, args := range [][]string{{"help", "create", "extra"}, {"--help", "zz"}} {
		if c, o, e := mapctl(t, "", args...); c != exitUsage || o != "" || e == "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want a usage error", args, c, o, e)
		}
	}
}
