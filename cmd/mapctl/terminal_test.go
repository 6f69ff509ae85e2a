//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestTerminalScreens runs mapctl as a user does, in a terminal of 80 by
// 24 (tmux), typing at a shell, and reads the screen: load of a file of a
// million lines draws its progress line, with a rate and the time left,
// on the terminal, then erases it for its summary; stats --watch, while
// another load writes, prints its table within the 80 columns, with its
// header, counts grouped in thousands (entries 1,000,000) and "-" for a
// hit ratio without lookups. Only a terminal shows these: with stderr a pipe, load draws
// nothing, and only a terminal's width wraps a long line.
//
// tmux is a Debian package; without it the test fails, saying how to
// install it (.ci/run installs it).
func TestTerminalScreens(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatal("tmux is not installed: this test runs mapctl in a terminal of its own; install it with: apt-get install tmux")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// Short paths, typed at the prompt: ./mapctl is this test binary,
	// which runs mapctl with MAPCTL_TEST_PROCESS=1 (see load_test.go).
	if err := os.Symlink(self, filepath.Join(dir, "mapctl")); err != nil {
		t.Fatal(err)
	}
	const lines = 1_000_000
	writeLines(t, filepath.Join(dir, "big.tsv"), lines)

	socket := filepath.Join(dir, "tmux.sock") // a server of its own, not the user's
	tm := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tmux, append([]string{"-S", socket}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// A terminal (a tmux session) for each command, running a shell.
	terminal := func(name string) {
		tm("-f", "/dev/null", "new-session", "-d", "-s", name, "-x", "80", "-y", "24", "-c", dir, "-e", loadProcessEnv+"=1", "sh")
	}
	t.Cleanup(func() { _ = exec.Command(tmux, "-S", socket, "kill-server").Run() })
	// screen is what the terminal shows, each line whole: -J joins a line
	// the terminal wrapped, which is how one too wide shows.
	screen := func(name string) string { return tm("capture-pane", "-t", name, "-p", "-J") }
	// prompts counts the shell's prompts on a screen: lines that are one,
	// or that start with one and what was typed after it.
	prompts := func(s string) int {
		n := 0
		for line := range strings.Lines(s) {
			line = strings.TrimRight(line, "\n ")
			if line == "#" || line == "$" || strings.HasPrefix(line, "# ") || strings.HasPrefix(line, "$ ") {
				n++
			}
		}
		return n
	}
	// waitFor polls the screen until match finds something, and returns
	// the screen and the match; it fails when the shell shows more than
	// ended prompts (the command ended without showing it) or after two
	// minutes.
	waitFor := func(name, what string, ended int, match func(string) string) (string, string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			s := screen(name)
			if m := match(s); m != "" {
				return s, m
			}
			if prompts(s) > ended {
				t.Fatalf("the command ended with no %s on the screen:\n%s", what, s)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s on the screen within 2 minutes:\n%s", what, s)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// typed types command at the shell's prompt, once the shell shows it,
	// and returns the prompts on the screen: one more, and it has ended.
	// The count is taken once the shell shows the command after its
	// prompt (tmux passes keys on without waiting for the shell to echo
	// them), counting prompts up to that line: on a loaded machine the
	// screen read before typing may not show the previous command yet.
	typed := func(name, command string) int {
		t.Helper()
		s := screen(name)
		for prompts(s) == 0 || !strings.HasSuffix(strings.TrimRight(s, "\n "), "#") && !strings.HasSuffix(strings.TrimRight(s, "\n "), "$") {
			time.Sleep(20 * time.Millisecond)
			s = screen(name)
		}
		tm("send-keys", "-t", name, "-l", command)
		tm("send-keys", "-t", name, "Enter")
		deadline := time.Now().Add(2 * time.Minute)
		for {
			n, through := 0, 0
			for line := range strings.Lines(screen(name)) {
				line = strings.TrimRight(line, "\n ")
				if line == "#" || line == "$" || strings.HasPrefix(line, "# ") || strings.HasPrefix(line, "$ ") {
					n++
				}
				if line == "# "+command || line == "$ "+command {
					through = n
				}
			}
			if through > 0 {
				return through
			}
			if time.Now().After(deadline) {
				t.Fatalf("the shell did not show %q within 2 minutes", command)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	contains := func(sub string) func(string) string {
		return func(s string) string {
			if strings.Contains(s, sub) {
				return sub
			}
			return ""
		}
	}
	if c, _, e := mapctl(t, "", "create", filepath.Join(dir, "m.map"), "--entries", fmt.Sprint(lines), "--key-size", "10", "--value-size", "16"); c != exitOK {
		t.Fatalf("create: %s", e)
	}

	terminal("load")
	ended := typed("load", "./mapctl load m.map big.tsv")
	progressLine := regexp.MustCompile(`(?m)^loading \[[#.]{20}\] +\d+% \d{1,3}(,\d{3})* lines \d{1,3}(,\d{3})*/s ETA \d+(s|m\d\ds)$`)
	s, progress := waitFor("load", "progress line with a rate and an ETA", ended, func(s string) string { return progressLine.FindString(s) })
	t.Logf("load, running:\n%s", strings.TrimRight(s, "\n"))
	if len(progress) > 80 {
		t.Errorf("progress line of %d columns: %q", len(progress), progress)
	}
	summary := fmt.Sprintf("read %d lines: %d keys added, 0 replaced", lines, lines)
	s, _ = waitFor("load", "load summary", ended, contains(summary))
	t.Logf("load, done:\n%s", strings.TrimRight(s, "\n"))
	if strings.Contains(s, "loading [") {
		t.Errorf("the progress line stays after the load")
	}

	// The table while another load (its output elsewhere) replaces every
	// key: puts/s in the thousands while it runs (it may not have begun, or
	// be done, on a loaded machine), no lookups.
	terminal("watch")
	typed("watch", "./mapctl load m.map big.tsv >/dev/null 2>&1 &")
	ended = typed("watch", "./mapctl stats m.map --watch 300ms --count 6")
	row := regexp.MustCompile(`^\d\d:\d\d:\d\d +1,000,000 +0 +- +(\d{1,3}(,\d{3})*|\d+(\.\d+)?[kM]) +0 +0 +0$`)
	s, _ = waitFor("watch", "watch table of 6 rows", ended, func(s string) string {
		n := 0
		for line := range strings.Lines(s) {
			if row.MatchString(strings.TrimRight(line, "\n")) {
				n++
			}
		}
		if n == 6 {
			return "6 rows"
		}
		return ""
	})
	t.Logf("stats --watch:\n%s", strings.TrimRight(s, "\n"))
	ended = typed("watch", "wait; echo background load: $?")
	waitFor("watch", "end of the other load", ended, contains("background load: 0"))
	header := "time         entries   gets/s   hit%   puts/s dels/s waits/s tmo"
	if !strings.Contains(s, "\n"+header+"\n") {
		t.Errorf("no header %q on the screen", header)
	}
	for line := range strings.Lines(s) {
		if line = strings.TrimRight(line, "\n"); len(line) > 80 {
			t.Errorf("a line of %d columns, wrapped by the terminal: %q", len(line), line)
		}
	}
}

// writeLines writes a load file of n lines, each a new key.
func writeLines(t *testing.T, path string, n int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := range n {
		fmt.Fprintf(w, "key%07d\tvalue-%010d\n", i, i)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
