//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rate is how the summaries state the size of the file, the time taken
// and the rate.
const rate = `[\d.]+ (bytes|KiB|MiB|GiB|TiB) %s in [\d.]+ s, [\d.]+ (bytes|KiB|MiB|GiB|TiB)/s`

// check, recover and recover --repair end with the summary line they
// always printed, then the file's size, the time the check took and the
// rate, in parentheses.
func TestCheckSummaryStatesThroughput(t *testing.T) {
	p := newMap(t)
	if c, _, e := mapctl(t, "key\tvalue\n", "load", p, "-"); c != exitOK {
		t.Fatalf("load: %s", e)
	}
	for _, tc := range []struct {
		args  []string
		clean string
	}{
		{[]string{"check", p}, "no problems"},
		{[]string{"recover", p}, "nothing held by the dead"},
		{[]string{"recover", "--repair", p}, "nothing held by the dead"},
	} {
		c, out, e := mapctl(t, "", tc.args...)
		want := regexp.MustCompile(`(?m)^ok: \d+ segments, 1 entries, ` + tc.clean + ` \(` + fmt.Sprintf(rate, "checked") + `\)$`)
		if c != exitOK || !want.MatchString(out) {
			t.Errorf("%s: %d %q %q; want a summary matching %s", strings.Join(tc.args, " "), c, out, e, want)
		}
	}
}

// On a terminal, check, recover and dump draw their progress line on
// stderr and erase it, and dump ends with a summary there stating its
// rate; with stderr a pipe, none of that is written.
func TestProgressOnATerminalOnly(t *testing.T) {
	defer func(every time.Duration) { progressEvery = every }(progressEvery)
	progressEvery = 0 // the map is small: draw at every update
	p := newMap(t)
	if c, _, e := mapctl(t, "a\t1\nb\t2\n", "load", p, "-"); c != exitOK {
		t.Fatalf("load: %s", e)
	}
	for _, tc := range []struct {
		args []string
		line string // what the progress line starts with
	}{
		{[]string{"check", p}, "checking ["},
		{[]string{"recover", p}, "checking ["},
		{[]string{"recover", "--repair", p}, "repairing ["},
		{[]string{"dump", p}, "dumping ["},
	} {
		name := strings.Join(tc.args[:len(tc.args)-1], " ")
		term := runOnTerminal(t, tc.args)
		if !strings.Contains(term, "\r"+tc.line) || !strings.Contains(term, "\r\033[K") {
			t.Errorf("%s on a terminal: stderr %q; want a progress line %q, erased", name, term, tc.line)
		}
		if tc.args[0] == "dump" && !regexp.MustCompile(`dumped 2 entries \(`+fmt.Sprintf(rate, "read")+`\)\n`).MatchString(term) {
			t.Errorf("dump on a terminal: stderr %q; want a summary stating the rate", term)
		}
		piped := runOnPipe(t, tc.args)
		if strings.Contains(piped, "[") || strings.Contains(piped, "\r") || strings.Contains(piped, "dumped") {
			t.Errorf("%s into a pipe: stderr %q; want no progress line and no summary", name, piped)
		}
	}
}

// runOnTerminal runs mapctl args with stderr a terminal (a pseudo-terminal
// of the test's) and returns what it wrote there.
func runOnTerminal(t *testing.T, args []string) string {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pts.Close()
	// Raw: the terminal passes \r and \n on as they are.
	termios, err := unix.IoctlGetTermios(int(pts.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	termios.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(pts.Fd()), unix.TCSETS, termios); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	if c := run(args, strings.NewReader(""), &bytes.Buffer{}, pts); c != exitOK {
		t.Fatalf("%s: exit status %d", strings.Join(args, " "), c)
	}
	// With its last descriptor closed, the terminal reads as ended (EIO)
	// once what was written is read.
	pts.Close()
	<-read
	return out.String()
}

// runOnPipe runs mapctl args with stderr a pipe and returns what it wrote
// there.
func runOnPipe(t *testing.T, args []string) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := run(args, strings.NewReader(""), &bytes.Buffer{}, w)
	w.Close()
	if c != exitOK {
		t.Fatalf("%s: exit status %d", strings.Join(args, " "), c)
	}
	var out bytes.Buffer
	if _, err := out.ReadFrom(r); err != nil && !errors.Is(err, os.ErrClosed) {
		t.Fatal(err)
	}
	return out.String()
}
