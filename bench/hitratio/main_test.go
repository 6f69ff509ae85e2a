package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/VictoriaMetrics/fastcache"
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
	// Until the measured map exists: sizing it makes and removes files
	// at the same path, so a file is only taken for the measured one once
	// it has been there at five polls in a row.
	seen := 0
	for i := 0; i < 200 && seen < 5; i++ {
		time.Sleep(50 * time.Millisecond)
		if len(mapFilesIn(t, dir)) > 0 {
			seen++
		} else {
			seen = 0
		}
	}
	if seen < 5 {
		t.Fatal("no map file that stays after 10 s")
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

// TestFastcacheSizeNoted: the table says each store is given the same
// memory, but fastcache rounds every budget up to a multiple of 32 MiB
// (512 buckets of 64 KiB chunks), and the note said so only below 32 MiB:
// at -memory 48 it has 64 MiB, unnoted.
func TestFastcacheSizeNoted(t *testing.T) {
	for _, mb := range []int64{1, 32, 40, 48, 64, 80} {
		budget := mb << 20
		c, note, err := open("fastcache", budget, 64, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var s fastcache.Stats
		c.(fastCache).c.UpdateStats(&s)
		c.close()
		if has := int64(s.MaxBytesSize); has != budget && note == "" {
			t.Errorf("-memory %d: fastcache has %d MiB, and the table says nothing", mb, has>>20)
		} else if has == budget && note != "" {
			t.Errorf("-memory %d: fastcache has the budget, and the table notes %q", mb, note)
		}
	}
}

// TestTableNotesRistrettoDrops: ristretto's Set drops writes when its
// buffer is full, which the table did not say; its cell now counts them,
// and fastcache's says the size it has.
func TestTableNotesRistrettoDrops(t *testing.T) {
	out, err := hitratio("-memory", "48", "-keys", "1000", "-requests", "1000", "-s", "1.1", "-dir", t.TempDir()).CombinedOutput()
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	var row string
	for l := range strings.Lines(string(out)) {
		if strings.HasPrefix(l, "| 1.10 |") {
			row = l
		}
	}
	cells := strings.Split(row, "|")
	if len(cells) != 6 || !regexp.MustCompile(`\(\d+ of \d+ Sets dropped\)`).MatchString(cells[3]) ||
		!strings.Contains(cells[4], "(has 64 MiB)") {
		t.Errorf("row %q: want ristretto's dropped Sets and fastcache's 64 MiB noted", row)
	}
}
