//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/ipc"
)

// stuckWorkerEnv makes the test binary a lockbench worker that gets ready
// and then never looks at the stop word (one stuck in Lock, say).
const stuckWorkerEnv = "MAPCTL_TEST_STUCK_WORKER"

func stuckWorker(path string) {
	b, err := openBenchFile(path)
	if err != nil {
		os.Exit(2)
	}
	atomic.AddUint64(&b.words[benchReady], 1)
	time.Sleep(time.Hour)
}

// TestLockbench runs every algorithm across real worker processes and
// checks the JSON report: keys present, work done, exclusion held.
func TestLockbench(t *testing.T) {
	c, o, e := mapctl(t, "", "lockbench", "--algo", "all", "--procs", "2", "--goroutines", "2", "--duration", "150ms", "--json")
	if c != 0 {
		t.Fatalf("lockbench: %d %q %q", c, o, e)
	}
	lines := strings.Split(strings.TrimSpace(o), "\n")
	if want := len(ipc.Algorithms()) + 1; len(lines) != want { // and flock
		t.Fatalf("want one line per algorithm (%d), got %q", want, o)
	}
	for _, l := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"algo", "procs", "goroutines", "ops_per_sec", "fairness", "exclusion_ok"} {
			if _, ok := r[k]; !ok {
				t.Errorf("%s: no %q in %s", r["algo"], k, l)
			}
		}
		if r["exclusion_ok"] != true || r["ops_per_sec"].(float64) <= 0 || r["procs"].(float64) != 2 {
			t.Errorf("bad result %s", l)
		}
	}
	c, o, e = mapctl(t, "", "lockbench", "--algo", "hapax-cr,ttas", "--procs", "1,3", "--runs", "2", "--duration", "50ms", "--markdown")
	if c != 0 || !strings.HasPrefix(o, "| algorithm | 1 process | 3 processes |\n|---|---|---|\n| hapax-cr | ") ||
		strings.Count(o, "(fair ") != 4 {
		t.Errorf("markdown table: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "", "lockbench", "--procs", "2,0"); c != exitUsage || !strings.Contains(e, "--procs") {
		t.Errorf("bad --procs: %d %q", c, e)
	}
	if c, _, e := mapctl(t, "", "lockbench", "--algo", "nope"); c != exitUsage || !strings.Contains(e, "unknown lock algorithm") {
		t.Errorf("unknown algorithm: %d %q", c, e)
	}
	// A run too short to finish anything reports no row of zeros, whose
	// fairness 0 would read as starvation: it fails and says what to do.
	// At 1ns a worker may still finish a critical section before it looks
	// at the clock; the row it then reports has work in it.
	for range 3 {
		c, o, e := mapctl(t, "", "lockbench", "--algo", "ttas", "--procs", "2", "--duration", "1ns", "--json")
		switch {
		case c == exitError && strings.Contains(e, "give a longer --duration"):
		case c == 0:
			var r lockbenchResult
			if err := json.Unmarshal([]byte(strings.TrimSpace(o)), &r); err != nil || r.Ops == 0 {
				t.Errorf("--duration 1ns: a row without work, or none: %q (%v)", o, err)
			}
		default:
			t.Errorf("--duration 1ns: %d %q %q", c, o, e)
		}
	}
}

// TestLockbenchStopsWhileWorkersStart: a signal while lockbench waits for
// its workers to be ready stops it at once, not after the 30 s wait, and
// kills workers that never got ready (here a worker that only sleeps).
func TestLockbenchStopsWhileWorkersStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	err := lockbenchWithin(t, ctx, "exec sleep 40", testLockbenchOpts(time.Second), 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("lockbenchRun after the signal: %v", err)
	}
}

// testLockbenchOpts are lockbench's options for one worker of one
// goroutine running for d.
func testLockbenchOpts(d time.Duration) *lockbenchOpts {
	return &lockbenchOpts{procs: 1, goroutines: 1, cs: 1, slots: 64, duration: d, alockBudgets: "20,5"}
}

// lockbenchWithin runs lockbenchRun on hapax with workers that run the
// shell script (or, if script is empty, this test binary as a worker that
// gets ready and never stops: stuckWorker), failing the test if it has not
// returned within d, and returns its error.
func lockbenchWithin(t *testing.T, ctx context.Context, script string, o *lockbenchOpts, d time.Duration) error {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "locks")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if script == "" {
		t.Setenv(stuckWorkerEnv, path)
	} else {
		self = filepath.Join(dir, "worker.sh")
		if err := os.WriteFile(self, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := lockbenchRun(ctx, self, path, "hapax", o)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("lockbench still running after %v", d)
		return nil
	}
}

// TestLockbenchMedianIsARun: with an even number of runs the reported
// throughput is one run's, as its ops and seconds are, not the mean of the
// middle two, which would make the JSON contradict itself.
func TestLockbenchMedianIsARun(t *testing.T) {
	r := medianResult([]lockbenchResult{{Ops: 100, Seconds: 1, OpsPerSec: 100, ExclusionOK: true}, {Ops: 300, Seconds: 1, OpsPerSec: 300, ExclusionOK: true}})
	if got := float64(r.Ops) / r.Seconds; got != r.OpsPerSec {
		t.Errorf("ops/seconds %v, ops_per_sec %v", got, r.OpsPerSec)
	}
}

// TestLockbenchMedianFairnessIsTheRunsOwn: with an even count the reported
// run's own fairness goes with its min_ops and max_ops, not the lower of
// the fairness values beside another run's counts.
func TestLockbenchMedianFairnessIsTheRunsOwn(t *testing.T) {
	r := medianResult([]lockbenchResult{
		{Ops: 100, Seconds: 1, OpsPerSec: 100, Fairness: 0.9, MinOps: 90, MaxOps: 100, ExclusionOK: true},
		{Ops: 300, Seconds: 1, OpsPerSec: 300, Fairness: 0.1, MinOps: 10, MaxOps: 100, ExclusionOK: true}})
	if r.Fairness != 0.9 || r.MinOps != 90 {
		t.Errorf("fairness %v with min/max %d/%d, want the slower run's own 0.9 with 90/100", r.Fairness, r.MinOps, r.MaxOps)
	}
}

// TestLockbenchKillsUnreadyWorkers: workers that never get ready are
// killed at the ready deadline, not left running with lockbench waiting
// for them.
func TestLockbenchKillsUnreadyWorkers(t *testing.T) {
	defer func(d time.Duration) { lockbenchReadyWait = d }(lockbenchReadyWait)
	lockbenchReadyWait = 300 * time.Millisecond
	err := lockbenchWithin(t, context.Background(), "exec sleep 40", testLockbenchOpts(time.Second), 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("lockbenchRun with a worker that never gets ready: %v", err)
	}
}

// TestLockbenchEndsWhenWorkersDoNot: a worker that exits before it is
// ready is reported at once, not at the ready deadline (30 s), and one that
// never stops after the stop word does not keep lockbench waiting for
// good.
func TestLockbenchEndsWhenWorkersDoNot(t *testing.T) {
	o := testLockbenchOpts(100 * time.Millisecond)
	t.Run("exits before ready", func(t *testing.T) {
		err := lockbenchWithin(t, context.Background(), "echo cannot-open >&2\nexit 2", o, 5*time.Second)
		if err == nil || !strings.Contains(err.Error(), "cannot-open") {
			t.Errorf("lockbenchRun with a worker that exits: %v", err)
		}
	})
	t.Run("never stops", func(t *testing.T) {
		defer func(d time.Duration) { lockbenchStopGrace = d }(lockbenchStopGrace)
		lockbenchStopGrace = 500 * time.Millisecond
		err := lockbenchWithin(t, context.Background(), "", o, 10*time.Second)
		if err == nil || !strings.Contains(err.Error(), "after the stop") {
			t.Errorf("lockbenchRun with a worker that never stops: %v", err)
		}
	})
}

// TestLockbenchHelpSaysSlotsZero: --slots 0 runs with the default array,
// which the help has to say, since no power of two is 0.
func TestLockbenchHelpSaysSlotsZero(t *testing.T) {
	_, o, _ := mapctl(t, "", "lockbench", "--help")
	if want := fmt.Sprintf("0 means the default, %d", ipc.DefaultSlots); !strings.Contains(o, want) {
		t.Errorf("lockbench --help does not say %q: %q", want, o)
	}
}

// TestAWorkerThatCannotStartIsNamed: when a worker process cannot be
// started, lockbench reports why, not that it was interrupted (stopping
// the workers already started cancels the run's context, which must not
// read as an interrupt).
func TestAWorkerThatCannotStartIsNamed(t *testing.T) {
	ctx, kill := context.WithCancel(context.Background())
	defer kill()
	missing := filepath.Join(t.TempDir(), "no-such-mapctl")
	o := &lockbenchOpts{procs: 2, goroutines: 1}
	_, err := startLockbenchWorkers(ctx, kill, nil, missing, filepath.Join(t.TempDir(), "locks"), "ttas", o)
	if err == nil {
		t.Fatal("workers started from a binary that does not exist")
	}
	if strings.Contains(err.Error(), "interrupted") || !strings.Contains(err.Error(), "no-such-mapctl") {
		t.Fatalf("err = %v, want the start's own error naming the binary", err)
	}
}
