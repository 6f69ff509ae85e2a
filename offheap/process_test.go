//go:build linux

package offheap

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
	"golang.org/x/sys/unix"
)

// helperCmd runs the test binary as a helper process in role (see
// internal/testutil); it reports "@ key=value ..." lines.
func helperCmd(role, path string, env ...string) *exec.Cmd {
	return testutil.Command(role, append([]string{"OFFHEAP_FILE=" + path}, env...)...)
}

// startHelper starts a helper process in role on path and returns it with
// a scanner of its output lines; the caller kills and waits for it.
func startHelper(t *testing.T, role, path string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := helperCmd(role, path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewScanner(out)
}

// TestHelperProcess is not a test: it is the body of the helper processes.
func TestHelperProcess(t *testing.T) {
	role := testutil.Role()
	if role == "" {
		t.Skip("runs only as a helper process")
	}
	path := os.Getenv("OFFHEAP_FILE")
	o := createOpts()
	switch role {
	case "create":
		// Start together, to make the race as tight as the OS allows.
		if at, err := strconv.ParseInt(os.Getenv("OFFHEAP_START"), 10, 64); err == nil {
			time.Sleep(time.Until(time.Unix(0, at)))
		}
		o.Init = func(r *Region) error {
			atomic.StoreUint64(r.Uint64(HeaderSize), uint64(os.Getpid()))
			time.Sleep(20 * time.Millisecond) // let the others pile up on the lock
			return nil
		}
		f, err := Open(path, o)
		if err != nil {
			testutil.Report("error %v", err)
			return
		}
		defer f.Close()
		testutil.Report("ok pid=%d created=%v creator=%d at=%d mark=%d layout=%s", os.Getpid(), f.Created(),
			f.creatorPID(), f.createdAt().UnixNano(), atomic.LoadUint64(f.Uint64(HeaderSize)), f.Layout())
	case "hang":
		o.Init = func(r *Region) error {
			copy(r.Bytes(HeaderSize, 5), "dirty")
			testutil.Report("initializing")
			time.Sleep(time.Hour) // until SIGKILL; select{} would die as a deadlock
			return nil
		}
		_, err := Open(path, o)
		testutil.Report("error %v", err)
	case "die":
		at := os.Getenv("OFFHEAP_DIE_AT")
		testCreateStep = func(step string) {
			if step == at {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Hour)
			}
		}
		_, err := Open(path, o)
		testutil.Report("error %v (did not die at %q)", err, at)
	case "upgrade-die":
		helperUpgradeDie(path) // upgrade_test.go
	case "lease":
		// A read lease on the file, as Samba's oplocks and NFS delegations
		// hold: an open for writing breaks it, waiting until it is given
		// up, here at the SIGIO that says so.
		fd, err := os.Open(path)
		if err != nil {
			testutil.Report("error %v", err)
			return
		}
		broken := make(chan os.Signal, 1)
		signal.Notify(broken, syscall.SIGIO)
		if _, err := unix.FcntlInt(fd.Fd(), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
			testutil.Report("nolease %v", err)
			return
		}
		testutil.Report("leased")
		<-broken
		_, err = unix.FcntlInt(fd.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
		testutil.Report("released %v", err)
		time.Sleep(time.Hour)
	default:
		t.Fatalf("unknown helper role %q", role)
	}
}

// helperReport returns the fields of the last "@ " line of out.
func helperReport(out string) map[string]string {
	m := map[string]string{}
	if lines := testutil.Reports(out); len(lines) > 0 {
		for _, w := range lines[len(lines)-1] {
			k, v, _ := strings.Cut(w, "=")
			m[k] = v
		}
	}
	return m
}

// TestProcessesCreateOnce: 8 processes open one new path with Create at
// the same instant. Exactly one initializes it, all succeed, and all see
// the one header it wrote.
func TestProcessesCreateOnce(t *testing.T) {
	const n = 8
	path := filepath.Join(t.TempDir(), "race")
	start := time.Now().Add(300 * time.Millisecond).UnixNano() // after every helper has started
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	for i := range cmds {
		cmds[i] = helperCmd("create", path, "OFFHEAP_START="+strconv.FormatInt(start, 10))
		outs[i] = new(bytes.Buffer)
		cmds[i].Stdout = outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("helper %d: %v\n%s", i, err, outs[i])
		}
	}
	creators := 0
	var first map[string]string
	for i, b := range outs {
		r := helperReport(b.String())
		if _, ok := r["ok"]; !ok || r["layout"] != "layout-v1" {
			t.Fatalf("helper %d: %q", i, b.String())
		}
		if r["created"] == "true" {
			creators++
			if r["creator"] != r["pid"] {
				t.Errorf("the creator is pid %s but the header names %s", r["pid"], r["creator"])
			}
		}
		if first == nil {
			first = r
		}
		// One header: every process read the same creator, time and Init mark.
		if r["creator"] != first["creator"] || r["at"] != first["at"] || r["mark"] != first["creator"] {
			t.Errorf("helper %d saw creator=%s at=%s mark=%s; helper 0 saw creator=%s at=%s",
				i, r["creator"], r["at"], r["mark"], first["creator"], first["at"])
		}
	}
	if creators != 1 {
		t.Fatalf("%d processes initialized the file, want exactly 1", creators)
	}
}

// TestCrashedCreator: a creator SIGKILLed inside Init leaves the header
// initializing. While it lives, others wait; once it is dead, an Open
// without Create reports ErrNotReady and one with Create starts over.
func TestCrashedCreator(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crash")
	cmd, sc := startHelper(t, "hang", path)
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	for !strings.HasPrefix(sc.Text(), "@ initializing") {
		if !sc.Scan() {
			t.Fatalf("helper exited before initializing: %v", sc.Err())
		}
	}

	// While the creator lives, every kind of opener waits for it.
	for _, o := range []OpenOptions{createOpts(), {}, {ReadOnly: true}} {
		o.initTimeout = 50 * time.Millisecond
		t0 := time.Now()
		_, err := Open(path, o)
		if !errors.Is(err, errInitTimeout) {
			t.Fatalf("Open(%+v) during creation = %v, want errInitTimeout", o, err)
		}
		if d := time.Since(t0); d < 50*time.Millisecond || d > 2*time.Second {
			t.Errorf("timed out after %v, want about 50ms", d)
		}
	}

	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true
	h, _, err := decodeHeader(mustRead(t, path))
	if !errors.Is(err, ErrNotReady) || h.state != stateInitializing {
		t.Fatalf("the dead creator's header: state %#x, %v", h.state, err)
	}
	before := fileHash(t, path)
	for _, o := range []OpenOptions{{}, {ReadOnly: true}} {
		if _, err := Open(path, o); !errors.Is(err, ErrNotReady) {
			t.Fatalf("Open(%+v) of a dead creator's file = %v, want ErrNotReady", o, err)
		}
	}
	if fileHash(t, path) != before {
		t.Fatal("an Open without Create changed the file")
	}

	f := mustOpen(t, path, createOpts())
	if !f.Created() || f.creatorPID() != os.Getpid() {
		t.Fatalf("not re-initialized: created=%v creator=%d", f.Created(), f.creatorPID())
	}
	if !allZero(f.Bytes(HeaderSize, 5)) {
		t.Fatal("the dead creator's writes survived re-initialization")
	}
	g := mustOpen(t, path, OpenOptions{})
	if g.Created() || string(g.Layout()) != "layout-v1" {
		t.Fatal("reopen after recovery is wrong")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCreatorKilledAtEachStep: a creator killed after any step of create
// leaves a file that the next Open with Create initializes again, and
// that an Open without Create reports as not ready rather than as someone
// else's file (which Create would refuse to wipe).
func TestCreatorKilledAtEachStep(t *testing.T) {
	for _, step := range []string{"emptied", "header written", "sized", "reserved"} {
		path := filepath.Join(t.TempDir(), "m")
		// A file that is not ours is refused, so start from one that
		// says it is ours: a header left initializing.
		h := header{version: FormatVersion, state: stateInitializing, fileSize: testSize, dataOffset: HeaderSize}
		b := make([]byte, HeaderSize)
		encodeHeader(b, &h)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd := helperCmd("die", path, "OFFHEAP_DIE_AT="+step)
		cmd.Stdout = &out
		err := cmd.Run()
		if ws, ok := err.(*exec.ExitError); !ok || ws.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("%s: the creator ended with %v, not SIGKILL: %s", step, err, out.String())
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("killed after %q: the file has %d bytes", step, st.Size())
		if _, err := Open(path, OpenOptions{}); !errors.Is(err, ErrNotReady) {
			t.Fatalf("%s: Open without Create = %v, want ErrNotReady", step, err)
		}
		f, err := Open(path, createOpts())
		if err != nil {
			t.Fatalf("%s: Open with Create after the creator died: %v", step, err)
		}
		if !f.Created() || f.Size() != testSize {
			t.Fatalf("%s: created=%v size=%d", step, f.Created(), f.Size())
		}
		f.Close()
	}
}

// TestOpenWaitsOutALease: another process holds a read lease on the file
// (as a Samba or NFS server may). An Open for writing waits for the lease
// to break, as open(2) does, rather than failing with EAGAIN, which an
// open with O_NONBLOCK (briefly used to refuse named pipes) did.
func TestOpenWaitsOutALease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leased")
	mustOpen(t, path, createOpts()).Close()
	cmd, sc := startHelper(t, "lease", path)
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	for !strings.HasPrefix(sc.Text(), "@ leased") {
		if !sc.Scan() {
			t.Fatalf("helper exited before taking its lease: %v", sc.Err())
		}
		if strings.HasPrefix(sc.Text(), "@ nolease") {
			t.Skipf("no lease here: %s", sc.Text())
		}
	}
	f, err := Open(path, OpenOptions{})
	if err != nil {
		t.Fatalf("Open of a leased file: %v", err)
	}
	f.Close()
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "@ released <nil>") {
		t.Errorf("the lease holder said %q, want it released", sc.Text())
	}
}
