//go:build linux

package offheap

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// upgradeSteps are the steps Upgrade marks (testUpgradeStep), in order.
var upgradeSteps = []string{
	"copy B half written", "copy B written", "copy B ready", "copy B synced",
	"copy A half written", "copy A written", "copy A ready", "copy A synced",
}

func noOneElse(*File) (func(), error) { return func() {}, nil }

// checkUpgraded fails unless the file at path has a version-2 header page
// whose two copies verify and say what the version-1 header said, and the
// data after the page is as it was (orig).
func checkUpgraded(t *testing.T, path string, orig []byte) {
	t.Helper()
	now := mustRead(t, path)
	want, _, err := decodeHeader(orig)
	if err != nil {
		t.Fatal(err)
	}
	a, b := decodeCopy(now[copyA:copyA+headerCopySize]), decodeCopy(now[copyB:copyB+headerCopySize])
	if a.kind != copySound || b.kind != copySound {
		t.Fatalf("after the upgrade: copy A %v, copy B %v", a.err, b.err)
	}
	want.version = FormatVersion
	if !a.h.same(&want) || !b.h.same(&want) {
		t.Fatalf("upgraded header %+v / %+v, want %+v", a.h, b.h, want)
	}
	if !bytes.Equal(now[HeaderSize:], orig[HeaderSize:]) {
		t.Fatal("the upgrade changed bytes after the header page")
	}
	f, err := Open(path, OpenOptions{})
	if err != nil {
		t.Fatalf("writable Open after the upgrade: %v", err)
	}
	defer f.Close()
	if f.formatVersion() != FormatVersion || len(f.HeaderProblems()) != 0 {
		t.Fatalf("after the upgrade: version %d, problems %v", f.formatVersion(), f.HeaderProblems())
	}
}

// TestUpgradeVersion1: Upgrade rewrites a version-1 header as version 2,
// both copies, every field kept and nothing after the page changed; run
// again, it finds the file current and writes nothing.
func TestUpgradeVersion1(t *testing.T) {
	path, _ := version1File(t)
	orig := mustRead(t, path)
	calls := 0
	res, err := Upgrade(path, func(*File) (func(), error) { calls++; return func() {}, nil })
	if err != nil || res.From != 1 || calls != 1 {
		t.Fatalf("Upgrade = %+v, %v (alone called %d times)", res, err, calls)
	}
	checkUpgraded(t, path, orig)
	before := mustRead(t, path)
	if res, err := Upgrade(path, func(*File) (func(), error) { t.Fatal("alone called for a current file"); return nil, nil }); err != nil || res.From != FormatVersion || len(res.Mended) != 0 {
		t.Fatalf("Upgrade of a current file = %+v, %v", res, err)
	}
	if !bytes.Equal(mustRead(t, path), before) {
		t.Fatal("Upgrade of a current file changed it")
	}
}

// TestUpgradeRefused: when alone refuses, nothing is written; a version-1
// page whose second half is not zero (where copy B goes) is refused.
func TestUpgradeRefused(t *testing.T) {
	path, v1 := version1File(t)
	busy := errors.New("a process has the map open")
	if _, err := Upgrade(path, func(*File) (func(), error) { return nil, busy }); !errors.Is(err, busy) {
		t.Fatalf("Upgrade refused by alone: %v", err)
	}
	if !bytes.Equal(mustRead(t, path)[:HeaderSize], v1) {
		t.Fatal("a refused upgrade wrote the header")
	}
	h, _, err := decodeHeader(v1)
	if err != nil {
		t.Fatal(err)
	}
	h.layout = append(bytes.Repeat([]byte("long layout "), 100), "end"...) // reaches past 2048
	encodeV1(v1, &h)
	writePage(t, path, v1)
	if _, err := Upgrade(path, noOneElse); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Upgrade of a version-1 header with a layout past 1024 bytes: %v", err)
	}
	if !bytes.Equal(mustRead(t, path)[:HeaderSize], v1) {
		t.Fatal("a refused upgrade wrote the header")
	}
}

// TestUpgradeStoppedAtEachStep: an Upgrade stopped after any step leaves
// a file that opens read-only with its layout and data, as version 1
// until copy B is ready and as version 2 from then on; Upgrade run again
// finishes it.
func TestUpgradeStoppedAtEachStep(t *testing.T) {
	defer func() { testUpgradeStep = func(string) {} }()
	for i, step := range upgradeSteps {
		path, _ := version1File(t)
		orig := mustRead(t, path)
		stop := fmt.Sprintf("stopped at %s", step)
		testUpgradeStep = func(s string) {
			if s == step {
				panic(stop)
			}
		}
		func() {
			defer func() {
				if r := recover(); r != stop {
					t.Fatalf("%s: Upgrade did not stop there: %v", step, r)
				}
			}()
			_, _ = Upgrade(path, noOneElse)
		}()
		testUpgradeStep = func(string) {}
		checkStoppedUpgrade(t, path, orig, step, i >= 2)
	}
}

// checkStoppedUpgrade checks the file at path, whose upgrade stopped after
// step: it opens read-only with orig's layout and data, as version 2 if
// v2, and the next Upgrade leaves it upgraded.
func checkStoppedUpgrade(t *testing.T, path string, orig []byte, step string, v2 bool) {
	t.Helper()
	f, err := Open(path, OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("%s: read-only Open: %v", step, err)
	}
	wantVersion := 1
	if v2 {
		wantVersion = FormatVersion
	}
	if f.formatVersion() != wantVersion || string(f.Layout()) != string(createOpts().Layout) ||
		!bytes.Equal(f.Bytes(HeaderSize, f.Size()-HeaderSize), orig[HeaderSize:]) {
		t.Fatalf("%s: opens as version %d (want %d), layout %q", step, f.formatVersion(), wantVersion, f.Layout())
	}
	f.Close()
	if _, err := Upgrade(path, noOneElse); err != nil {
		t.Fatalf("%s: Upgrade again: %v", step, err)
	}
	checkUpgraded(t, path, orig)
}

// TestUpgradeKilledAtEachStep: as TestUpgradeStoppedAtEachStep, with the
// upgrading process killed (SIGKILL) after each step.
func TestUpgradeKilledAtEachStep(t *testing.T) {
	for i, step := range upgradeSteps {
		path, _ := version1File(t)
		orig := mustRead(t, path)
		var out bytes.Buffer
		cmd := helperCmd("upgrade-die", path, "OFFHEAP_DIE_AT="+step)
		cmd.Stdout = &out
		err := cmd.Run()
		if ws, ok := err.(*exec.ExitError); !ok || ws.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("%s: the upgrade ended with %v, not SIGKILL: %s", step, err, out.String())
		}
		checkStoppedUpgrade(t, path, orig, step, i >= 2)
	}
}

// helperUpgradeDie upgrades the file at path, killing itself after the
// step OFFHEAP_DIE_AT names.
func helperUpgradeDie(path string) {
	at := os.Getenv("OFFHEAP_DIE_AT")
	testUpgradeStep = func(step string) {
		if step == at {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Hour)
		}
	}
	_, err := Upgrade(path, noOneElse)
	testutil.Report("error %v (did not die at %q)", err, at)
}
