package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadProcessEnv makes the test binary run mapctl with its arguments, for
// tests that need a mapctl of its own process (one to interrupt).
const loadProcessEnv = "MAPCTL_TEST_PROCESS"

func init() {
	if os.Getenv(loadProcessEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
}

// A load fed by a slow stream stores each line as it comes, not when a
// batch fills; an interrupt ends it with every line read stored, the map
// closed (check finds no process that died with it open) and a message
// saying after which line it stopped.
func TestLoadStoresAsLinesComeAndOnInterrupt(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	if c, _, e := mapctl(t, "", "create", p, "--entries", "1000"); c != exitOK {
		t.Fatalf("create: %d %s", c, e)
	}
	cmd := exec.Command(os.Args[0], "load", p, "-")
	cmd.Env = append(os.Environ(), loadProcessEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitFor := func(key, want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			c, out, _ := mapctl(t, "", "get", p, key)
			if c == exitOK && out == want+"\n" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("get %s: %d %q after 20 s, want %q: the line waits in load's batch", key, c, out, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, kv := range []string{"first\tone\n", "second\ttwo\n"} {
		if _, err := stdin.Write([]byte(kv)); err != nil {
			t.Fatal(err)
		}
		k, v, _ := strings.Cut(strings.TrimSuffix(kv, "\n"), "\t")
		waitFor(k, v)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitError {
		t.Fatalf("interrupted load: %v, want exit status %d", err, exitError)
	}
	if want := "interrupted after stdin line 2: stored 2 entries"; !strings.Contains(stderr.String(), want) {
		t.Errorf("interrupted load said %q, want %q", stderr.String(), want)
	}
	if c, out, e := mapctl(t, "", "check", p); c != exitOK {
		t.Errorf("check after the interrupted load: %d %s %s", c, out, e)
	}
}
