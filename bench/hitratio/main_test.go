package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func init() {
	// The test binary as the hitratio command, its args following "--";
	// or, with HITRATIO_FAIL_IN set to a directory, a run that fails while
	// its sharedmap is open.
	switch {
	case os.Getenv("HITRATIO_MAIN") == "1":
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"hitratio"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	case os.Getenv("HITRATIO_FAIL_IN") != "":
		if _, _, err := openSharedmap(8<<20, 64, os.Getenv("HITRATIO_FAIL_IN")); err != nil {
			os.Exit(2)
		}
		fail(errors.New("failing as the test asks"))
	}
}

// hitratio starts the test binary as hitratio with args.
func hitratio(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "HITRATIO_MAIN=1")
	return cmd
}

func mapFilesIn(t *testing.T, dir string) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(dir, "*.map"))
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// TestSignalRemovesMapFile: a hitratio stopped by SIGTERM (or Ctrl-C)
// while it measures sharedmap left its map file behind, by default in
// /dev/shm (RAM) and as large as -memory.
func TestSignalRemovesMapFile(t *testing.T) {
	dir := t.TempDir()
	cmd := hitratio("-memory", "8", "-keys", "1000000", "-requests", "50000000", "-s", "1.1", "-dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	for range 100 { // until the measured map exists
		time.Sleep(100 * time.Millisecond)
		if len(mapFilesIn(t, dir)) > 0 {
			break
		}
	}
	if len(mapFilesIn(t, dir)) == 0 {
		t.Fatal("no map file after 10 s")
	}
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for _, f := range mapFilesIn(t, dir) {
		t.Errorf("left behind after SIGTERM: %s", filepath.Base(f))
	}
}

// TestFailRemovesMapFile: a run that fails while its sharedmap is open (a
// Put's error) left the map file behind.
func TestFailRemovesMapFile(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HITRATIO_FAIL_IN="+dir)
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "failing as the test asks") {
		t.Fatalf("the run did not fail as asked: %v\n%s", err, out)
	}
	for _, f := range mapFilesIn(t, dir) {
		t.Errorf("left behind by fail: %s", filepath.Base(f))
	}
}

// TestBadFlagsRefused: -memory 0 ran until fastcache.New(0) panicked (or
// ristretto refused 0 counters), and -requests 0 printed NaN hit ratios.
// Each is refused with a message naming the flag, before any map is made.
func TestBadFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"-memory", "0"},
		{"-memory", "-1"},
		{"-requests", "0"},
		{"-keys", "0"},
		{"-value", "-1"},
		{"-value", "1200000", "-memory", "1"}, // not one entry fits sharedmap
	} {
		dir := t.TempDir()
		out, err := hitratio(append([]string{"-keys", "1000", "-requests", "1000", "-s", "1.1", "-dir", dir}, args...)...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), args[len(args)-2]) ||
			strings.Contains(string(out), "panic") {
			t.Errorf("%v: want exit status 1 and a message naming %s; got %v:\n%s", args, args[len(args)-2], err, out)
		}
		for _, f := range mapFilesIn(t, dir) {
			t.Errorf("%v: left behind: %s", args, filepath.Base(f))
		}
	}
}
