//go:build linux

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the demo, bench and lockbench re-execute this test binary
// as their worker processes: they come with MAPCTL_DEMO_WORKER=1 and
// "demo-worker ..." (or "bench-worker", "lockbench-worker") args. The
// tests' own helper processes come with an environment variable of their
// own (stuckWorkerEnv, dieInRewriteEnv).
func TestMain(m *testing.M) {
	if path := os.Getenv(stuckWorkerEnv); path != "" {
		stuckWorker(path)
	}
	if os.Getenv(demoWorkerEnv) == "1" && len(os.Args) > 1 && (os.Args[1] == "demo-worker" || os.Args[1] == "lockbench-worker" || os.Args[1] == "bench-worker") {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if args := strings.Split(os.Getenv(dieInRewriteEnv), "\t"); len(args) == 3 {
		dieInRewrite(args[0], args[1], args[2])
	}
	os.Exit(m.Run())
}

// mapctl runs the command line args with stdin and returns the exit status,
// stdout and stderr.
func mapctl(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// newMap creates a map of 1,000 entries of 16-byte keys and 32-byte values
// in a temporary directory and returns its path.
func newMap(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.map")
	if c, o, e := mapctl(t, "", "create", p, "--entries", "1000", "--key-size", "16", "--value-size", "32"); c != 0 || !strings.Contains(o, "created") {
		t.Fatalf("create: %d %q %q", c, o, e)
	}
	return p
}
