package hashmap

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// The tests of Clear, Touch and GetTTL, DeleteFunc and LockContext across
// processes run helper processes in the roles of opsRoles: each opens the
// map at HASHMAP_FILE (timed by the fileClock at HASHMAP_CLOCK, if set),
// runs with the arguments in HASHMAP_ARGS, and reports an error it returns
// as a line "error ...". Each test's file adds its roles.
var opsRoles = map[string]func(m *Map, args []string) error{}

// helperOps runs role if it is one of opsRoles; it reports whether it was.
func helperOps(role string) bool {
	run, ok := opsRoles[role]
	if !ok {
		return false
	}
	var opts *Options
	if clock := os.Getenv("HASHMAP_CLOCK"); clock != "" {
		opts = &Options{Now: fileClock(clock).Now}
	}
	m, err := Open(os.Getenv("HASHMAP_FILE"), opts)
	if err == nil {
		defer m.Close()
		err = run(m, strings.Split(os.Getenv("HASHMAP_ARGS"), ","))
	}
	if err != nil {
		testutil.Report("error %v", strings.ReplaceAll(err.Error(), "\n", " "))
	}
	return true
}

// argInt is args[i] as a number (0 if it is none).
func argInt(args []string, i int) int {
	v, _ := strconv.Atoi(args[i])
	return v
}

// fileClock is a clock every process of a test reads from one file, which
// the test moves by replacing the file (a rename, so a reader sees the old
// time or the new one): Options.Now for maps shared by several processes.
type fileClock string

// slowClock, set in helpers from HASHMAP_CLOCK_SLOW, makes each reading of
// a fileClock take a while, so that the clock moves between the readings
// of one call (see TestTouchRacingExpiryAcrossProcesses).
var slowClock = os.Getenv("HASHMAP_CLOCK_SLOW") == "1"

func (c fileClock) Now() time.Time {
	if slowClock {
		time.Sleep(300 * time.Microsecond)
	}
	b, err := os.ReadFile(string(c))
	if err != nil {
		panic(fmt.Sprintf("fileClock: %v", err))
	}
	ns, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		panic(fmt.Sprintf("fileClock: %v", err))
	}
	return time.Unix(0, ns)
}

func (c fileClock) Set(t time.Time) {
	tmp := string(c) + ".next"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(t.UnixNano(), 10)), 0o600); err != nil {
		panic(err)
	}
	if err := os.Rename(tmp, string(c)); err != nil {
		panic(err)
	}
}

// helperProc is a helper process whose report lines are read as it runs.
type helperProc struct {
	cmd   *exec.Cmd
	lines chan []string
}

// startHelper starts cmd and reads its reports until it exits; the test's
// end kills it if it is still running.
func startHelper(t *testing.T, cmd *exec.Cmd) *helperProc {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helperProc{cmd: cmd, lines: make(chan []string, 1024)}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := testutil.Reports(sc.Text()); len(f) == 1 && len(f[0]) > 0 {
				h.lines <- f[0]
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return h
}

// expect waits for the helper's next report and fails the test unless
// its first word is word.
func (h *helperProc) expect(t *testing.T, word string, timeout time.Duration) []string {
	t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			t.Fatalf("the helper exited before reporting %q", word)
		}
		if l[0] != word {
			t.Fatalf("the helper reported %v, want %q", l, word)
		}
		return l
	case <-time.After(timeout):
		t.Fatalf("no %q from the helper within %v", word, timeout)
	}
	return nil
}

// rest is every report the helper makes until it exits, and how it exited.
func (h *helperProc) rest() ([][]string, error) {
	var all [][]string
	for l := range h.lines {
		all = append(all, l)
	}
	return all, h.cmd.Wait()
}

// pollKey waits, up to 30 s, for key k to appear in m.
func pollKey(m *Map, k string) bool {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if ok, _ := m.Contains([]byte(k)); ok {
			return true
		}
	}
	return false
}

// opsKey is key i of the cross-process tests' fills.
func opsKey(i int) []byte { return fmt.Appendf(nil, "key-%05d", i) }

// opsValue is key i's value.
func opsValue(i int) []byte { return []byte(strings.Repeat(fmt.Sprintf("v%d-", i), 1+i%5)) }
