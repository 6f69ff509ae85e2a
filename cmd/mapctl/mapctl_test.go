package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the demo re-execute this test binary as its workers.
func TestMain(m *testing.M) {
	if os.Getenv("MAPCTL_DEMO_WORKER") == "1" && len(os.Args) > 1 && os.Args[1] == "demo-worker" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func capture(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	stdout, stderr = &out, &errb
	defer func() { stdout, stderr = os.Stdout, os.Stderr }()
	code := run(args)
	return code, out.String(), errb.String()
}

func TestCommands(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	if c, _, e := capture(t, "get", p, "k"); c != exitError || !strings.Contains(e, "no map at") {
		t.Fatalf("get on a missing file: %d %q", c, e)
	}
	if c, o, e := capture(t, "create", p, "--entries", "500"); c != 0 || !strings.Contains(o, "created") {
		t.Fatalf("create: %d %q %q", c, o, e)
	}
	if c, _, _ := capture(t, "create", p); c != exitError {
		t.Fatal("create over an existing file succeeded")
	}
	if c, _, e := capture(t, "put", p, "k", "v"); c != 0 {
		t.Fatalf("put: %q", e)
	}
	if c, o, _ := capture(t, "get", p, "k"); c != 0 || o != "v\n" {
		t.Fatalf("get: %d %q", c, o)
	}
	if c, _, _ := capture(t, "get", p, "absent"); c != exitNotFound {
		t.Fatalf("get absent exit %d", c)
	}
	if c, o, _ := capture(t, "stats", "--json", p); c != 0 || !strings.Contains(o, `"tiers_in_use"`) || !strings.Contains(o, `"bytes_used"`) {
		t.Fatalf("stats --json: %q", o)
	}
	if c, _, _ := capture(t, "delete", p, "k"); c != 0 {
		t.Fatal("delete failed")
	}
	if c, _, _ := capture(t, "delete", p, "k"); c != exitNotFound {
		t.Fatal("delete of an absent key did not exit 1")
	}
	if c, o, _ := capture(t, "inspect", p); c != 0 || !strings.Contains(o, "SEGMENT") {
		t.Fatalf("inspect: %q", o)
	}
	if c, _, _ := capture(t, "put", p); c != exitUsage {
		t.Fatal("missing arguments did not exit 2")
	}
	for _, cmd := range commands {
		if c, _, e := capture(t, cmd.name, "--help"); c != 0 || !strings.Contains(e, "usage: mapctl "+cmd.name) {
			t.Fatalf("%s --help: %d %q", cmd.name, c, e)
		}
	}
}

func TestDemo(t *testing.T) {
	c, o, e := capture(t, "demo", "--procs", "3", "--goroutines", "2", "--ops", "2000")
	if c != 0 || !strings.Contains(o, "demo OK") {
		t.Fatalf("demo: %d\n%s\n%s", c, o, e)
	}
}
