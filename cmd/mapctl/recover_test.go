//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/internal/testutil"
	"github.com/sharedmap/sharedmap/offheap"
)

// dieInRewriteEnv makes the test binary a process that opens the map at
// its first field and dies (SIGKILL) in the middle of a Put of its second
// and third, after the entry's header is rewritten and before its value is:
// the entry is torn, and only the undo record makes it whole.
const dieInRewriteEnv = "MAPCTL_TEST_DIE_IN_REWRITE"

func dieInRewrite(path, key, value string) {
	m, err := hashmap.Open(path, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testhook.OnStep = func() {
		// The rewrite's first step: the header stored, not the value (the
		// undo record's steps and the fast path's taking of the lock come
		// before, in functions of their own).
		pc, _, _, _ := runtime.Caller(3) // OnStep, Step, testStep, then the step's function
		if name := runtime.FuncForPC(pc).Name(); strings.HasSuffix(name, ".rewriteInPlace") {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Hour)
		}
	}
	_ = m.Put([]byte(key), []byte(value))
	fmt.Fprintln(os.Stderr, "the Put ended without storing the entry's header in place")
	os.Exit(2)
}

// TestRecoverRepairsCutRewrite: a process killed in the middle of
// rewriting a value leaves the key whole: recover says it put the rewrite
// right from the undo record, get reads the value the Put was writing
// (Put's fast path stages it there before it writes: see segment.record),
// and check passes.
func TestRecoverRepairsCutRewrite(t *testing.T) {
	p := newMap(t)
	if c, _, e := mapctl(t, "", "put", p, "key", "the old value"); c != 0 {
		t.Fatalf("put: %q", e)
	}
	cmd := testutil.Self("-test.run=^$")
	cmd.Env = append(os.Environ(), dieInRewriteEnv+"="+p+"\tkey\tTHE NEW VALUE")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the writer ended with %v, not killed in its Put: %s", err, stderr.String())
	}
	if c, o, e := mapctl(t, "", "recover", p); c != 0 || !strings.Contains(o, "a rewrite it cut short put right") {
		t.Fatalf("recover after a writer died mid-rewrite: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "get", p, "key"); c != 0 || o != "THE NEW VALUE\n" {
		t.Fatalf("get after recover: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "check", p); c != 0 {
		t.Fatalf("check after recover: %d %q %q", c, o, e)
	}
}

// TestCheckAndRecover: a sound map passes check and recover; a value
// changed behind the map's back (its checksum no longer matches) makes
// check exit 3 naming the problem and leaves the file as it was.
func TestCheckAndRecover(t *testing.T) {
	p := newMap(t)
	if c, _, e := mapctl(t, "", "put", p, "key", "VALUE-TO-DAMAGE"); c != 0 {
		t.Fatalf("put: %q", e)
	}
	if c, _, e := mapctl(t, "", "put", p, "other", "intact"); c != 0 {
		t.Fatalf("put: %q", e)
	}
	if c, o, e := mapctl(t, "", "check", p); c != 0 || !strings.Contains(o, "ok: ") {
		t.Fatalf("check of a sound map: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "recover", p); c != 0 || !strings.Contains(o, "nothing held by the dead") {
		t.Fatalf("recover of a sound map: %d %q %q", c, o, e)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("VALUE-TO-DAMAGE"))
	if i < 0 {
		t.Fatal("value not found in the file")
	}
	b[i] ^= 0x20
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c, o, e := mapctl(t, "", "check", p)
	if c != exitError || !strings.Contains(o, "fails its checksum") || !strings.Contains(e, " found in ") || !strings.Contains(e, "run mapctl recover --repair "+p) {
		t.Fatalf("check of a damaged map (its error line names the next step): %d %q %q", c, o, e)
	}
	after, _ := os.ReadFile(p)
	if !bytes.Equal(after, b) {
		t.Fatal("check changed the file")
	}
	// dump leaves the damaged entry out, so that dump | load does not
	// store its bytes under a fresh checksum, and fails after the rest.
	if c, o, e := mapctl(t, "", "dump", p); c != exitError || o != "other\tintact\n" || !strings.Contains(e, `key "key"`) || !strings.Contains(e, "mapctl recover --repair") {
		t.Fatalf("dump of a damaged map: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "", "check", filepath.Join(t.TempDir(), "none")); c != exitError || !strings.Contains(e, "no map at") {
		t.Fatalf("check of a missing file: %d %q", c, e)
	}
	// Damage no dead process explains: recover alone leaves it (and says
	// so), --repair rebuilds the segment without the damaged entry.
	if c, o, e := mapctl(t, "", "recover", p); c != exitError || !strings.Contains(o, "fails its checksum") || !strings.Contains(e, "run mapctl recover --repair "+p) {
		t.Fatalf("recover without --repair of a damaged map: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "recover", "--repair", p); c != 0 || !strings.Contains(o, "damaged, rebuilt: 1 entries kept, 1 dropped") || !strings.Contains(o, "ok: ") {
		t.Fatalf("recover --repair: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "check", p); c != 0 || !strings.Contains(o, "ok: ") {
		t.Fatalf("check after repair: %d %q %q", c, o, e)
	}
	if c, o, _ := mapctl(t, "", "get", p, "other"); c != 0 || o != "intact\n" {
		t.Fatalf("get of an undamaged entry after repair: %d %q", c, o)
	}
	if c, _, _ := mapctl(t, "", "get", p, "key"); c != exitNotFound {
		t.Fatalf("get of the damaged entry after repair: exit %d, want %d", c, exitNotFound)
	}
}

// TestRepairLockTableHeader: a byte flipped in the lock table's header,
// whose sizes the file header also holds, is reported by check, leaves the
// entries readable, and recover --repair rewrites it.
func TestRepairLockTableHeader(t *testing.T) {
	p := newMap(t)
	if c, _, e := mapctl(t, "", "put", p, "key", "value"); c != 0 {
		t.Fatalf("put: %q", e)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[offheap.HeaderSize] ^= 0x10 // the lock arena's magic, right after the file header
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if c, o, e := mapctl(t, "", "check", p); c != exitError || !strings.Contains(o, "lock table") {
		t.Fatalf("check of a damaged lock table header: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "dump", p); c != 0 || o != "key\tvalue\n" {
		t.Fatalf("dump with a damaged lock table header: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "recover", "--repair", p); c != 0 || !strings.Contains(o, "mended: lock table header: 1 word rewritten") || !strings.Contains(o, "ok: ") {
		t.Fatalf("recover --repair: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "check", p); c != 0 || !strings.Contains(o, "ok: ") {
		t.Fatalf("check after repair: %d %q %q", c, o, e)
	}
}

// TestRecoverResetLocks: --reset-locks frees the map's locks when it has
// the map to itself, and refuses while another process has it open.
func TestRecoverResetLocks(t *testing.T) {
	p := newMap(t)
	other, err := hashmap.Open(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, o, e := mapctl(t, "", "recover", "--reset-locks", p); c == 0 || !strings.Contains(e, "other processes have the map open") {
		t.Fatalf("recover --reset-locks beside another open handle: %d %q %q", c, o, e)
	}
	other.Close()
	if c, o, e := mapctl(t, "", "recover", "--reset-locks", p); c != 0 || !strings.Contains(o, "locks reset: ") {
		t.Fatalf("recover --reset-locks: %d %q %q", c, o, e)
	}
}
