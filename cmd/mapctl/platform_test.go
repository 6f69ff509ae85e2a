package main

import (
	"bytes"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestCommandsRunOnLinuxOnly: mapctl builds everywhere, but a command on
// a map works on Linux only; elsewhere it fails with exit status 3 and
// says why instead of crashing. This file builds on every platform, so
// the other side is at least compiled (CI vets it for darwin, freebsd and
// windows) where it cannot run.
func TestCommandsRunOnLinuxOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "test.map")
	var stdout, stderr bytes.Buffer
	status := run([]string{"create", path, "--entries", "100"}, strings.NewReader(""), &stdout, &stderr)
	if runtime.GOOS == "linux" {
		if status != exitOK {
			t.Fatalf("create on Linux: status %d, stderr %q", status, stderr.String())
		}
		return
	}
	if status != exitError || !strings.Contains(stderr.String(), "Linux only") {
		t.Fatalf("create on %s: status %d, stderr %q; want %d and a message that sharedmap runs on Linux only",
			runtime.GOOS, status, stderr.String(), exitError)
	}
}
