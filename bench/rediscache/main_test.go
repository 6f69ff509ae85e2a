package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func init() {
	// The test binary as the command, its args following "--" (or all of
	// them, for the processes of the memory figure, which it starts as
	// itself again).
	if os.Getenv("RCBENCH_MAIN") == "1" {
		args := os.Args[1:]
		for i, a := range os.Args {
			if a == "--" {
				args = os.Args[i+1:]
				break
			}
		}
		os.Args = append([]string{"rediscache"}, args...)
		main()
		os.Exit(0)
	}
}

func command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "RCBENCH_MAIN=1", "BENCH_REDIS_SOCKET=")
	return cmd
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-keys", "0"}, {"-value", "0"}, {"-prefix", ""}, {"-zipf", "1"}, {"-runs", "0"},
		{"-duration", "0s"}, {"-procs", "0"},
	} {
		out, err := command(context.Background(), args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("%v: %v, want exit status 2; output:\n%s", args, err, out)
		} else if !strings.Contains(string(out), "bad "+args[0]) {
			t.Errorf("%v: output %q does not name the flag", args, out)
		}
	}
}

// TestSmallRun runs the whole program small, against a redis-server of
// its own: every figure must be measured and the results written with a
// verdict for each target.
func TestSmallRun(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server not found: apt-get install redis-server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	out, err := command(ctx, "-keys", "2000", "-runs", "1", "-duration", "10ms", "-procs", "2", "-out", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{nameMapGet, nameRCGetInto, nameDoCache, nameDoRoundTrip,
		"2 × rediscache, one shared map", "2 × rueidis DoCache", "100x faster than a GET round trip", "less memory than 2 DoCaches"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	if n := strings.Count(string(md), "| met |") + strings.Count(string(md), "| **unmet** |"); n != 9 {
		t.Errorf("%d targets judged, want 9:\n%s", n, md)
	}
}
