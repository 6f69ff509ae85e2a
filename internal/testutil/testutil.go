// Package testutil runs multi-process tests: the test binary re-executes
// itself as helper processes (as Go's own tests do), which open the same
// file and report back on stdout in lines starting with "@ ".
//
// A package using it has one TestHelperProcess that starts with
//
//	role := testutil.Role()
//	if role == "" {
//		t.Skip("only runs as a helper process")
//	}
//
// and switches on role; the parent starts helpers with Command and collects
// their reports with Run.
package testutil

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// roleEnv names the helper's role in its environment; empty in the parent.
const roleEnv = "SHAREDMAP_TEST_HELPER_ROLE"

// Command returns a command that runs this test binary's TestHelperProcess
// in the given role, with extra "KEY=value" environment entries. Its stderr
// goes to the parent's.
func Command(role string, env ...string) *exec.Cmd {
	cmd := Self("-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), roleEnv+"="+role), env...)
	cmd.Stderr = os.Stderr
	return cmd
}

// emulatorEnv names a program that runs this test binary when the machine
// cannot (qemu-aarch64 for an arm64 binary on amd64: .ci/arm64); helpers
// are started through it too, and inherit it for theirs.
const emulatorEnv = "SHAREDMAP_TEST_EMULATOR"

// Self returns a command that runs this test binary with args, through
// the emulator named in SHAREDMAP_TEST_EMULATOR if any.
func Self(args ...string) *exec.Cmd {
	if emu := os.Getenv(emulatorEnv); emu != "" {
		return exec.Command(emu, append([]string{os.Args[0]}, args...)...)
	}
	return exec.Command(os.Args[0], args...)
}

// Role is the role this process runs as, or "" in the parent.
func Role() string { return os.Getenv(roleEnv) }

// Report prints one report line for the parent.
func Report(format string, args ...any) { fmt.Printf("@ "+format+"\n", args...) }

// Reports returns the fields of every report line in out. The test
// framework's own output (PASS, ok...) is not a report and is skipped.
func Reports(out string) [][]string {
	var lines [][]string
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "@ "); ok {
			lines = append(lines, strings.Fields(rest))
		}
	}
	return lines
}

// Run starts every command at once, waits for all, and returns their report
// lines (in arrival order). A helper that fails marks the test failed.
func Run(t testing.TB, cmds ...*exec.Cmd) [][]string {
	t.Helper()
	var mu sync.Mutex
	var lines [][]string
	var wg sync.WaitGroup
	for _, cmd := range cmds {
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if f := Reports(sc.Text()); len(f) == 1 && len(f[0]) > 0 {
					mu.Lock()
					lines = append(lines, f[0])
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("helper %s: %v", cmd.Args, err)
		}
	}
	return lines
}

// Commands returns n commands for the same role, each with HELPER_INDEX set
// to its index (0..n-1) besides env.
func Commands(role string, n int, env ...string) []*exec.Cmd {
	cmds := make([]*exec.Cmd, n)
	for i := range cmds {
		cmds[i] = Command(role, append(env, fmt.Sprintf("HELPER_INDEX=%d", i))...)
	}
	return cmds
}

// WaitFor polls cond every millisecond until it holds, and reports false if
// timeout passes first.
func WaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}
