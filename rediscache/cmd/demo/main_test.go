//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func init() {
	// The test binary as the demo, its args following "--", and as the
	// demo's workers, which it starts as itself again.
	if os.Getenv("REDISCACHE_DEMO_MAIN") == "1" || os.Getenv(envWorker) != "" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"demo"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	}
}

// TestDemo runs the demo against a redis-server of its own (REDIS_ADDR
// unset) with a short steady phase: it must end with an OK verdict,
// having shown a write reach every process and a standby take over from
// the killed tracker, within the time the demo promises.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$", "--", "-steady", "500ms")
	cmd.Env = append(os.Environ(), "REDISCACHE_DEMO_MAIN=1", "REDIS_ADDR=")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	t.Logf("demo output (%v):\n%s", took.Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "verdict: OK") {
		t.Errorf("last line %q, want the OK verdict", last)
	}
	for _, want := range []string{"tracker is pid", "SIGKILL the tracker", "took over as tracker", `every process reads "gen 2"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if took > 15*time.Second {
		t.Errorf("the demo took %v, more than the 15 s it promises", took)
	}
}
