//go:build linux

package hashmap

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
	"github.com/sharedmap/sharedmap/offheap"
	"golang.org/x/sys/unix"
)

// helperReaderLocks is a user who may only read the map: it opens the file
// read-only, takes every lock such a user can take over all of it (flock
// shared, a POSIX read lock and an OFD read lock, each from byte 0 to
// beyond the end), checks that it reads entries and cannot open the lock
// file, says so, and holds the locks until it is killed.
func helperReaderLocks(path string) {
	fd, err := os.Open(path)
	if err != nil {
		testutil.Report("error %v", err)
		return
	}
	whole := unix.Flock_t{Type: unix.F_RDLCK}
	if err := unix.Flock(int(fd.Fd()), unix.LOCK_SH); err != nil {
		testutil.Report("error flock: %v", err)
		return
	}
	if err := unix.FcntlFlock(fd.Fd(), unix.F_SETLK, &whole); err != nil {
		testutil.Report("error lockf: %v", err)
		return
	}
	if err := unix.FcntlFlock(fd.Fd(), unix.F_OFD_SETLK, &whole); err != nil {
		testutil.Report("error ofd: %v", err)
		return
	}
	m, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		testutil.Report("error read-only open: %v", err)
		return
	}
	if v, err := m.Get([]byte("k")); err != nil || string(v) != "before" {
		testutil.Report("error read-only Get = %q, %v", v, err)
		return
	}
	if _, err := os.Open(offheap.LockFilePath(path)); !errors.Is(err, os.ErrPermission) {
		testutil.Report("error the lock file opened for a reader: %v", err)
		return
	}
	testutil.Report("held")
	time.Sleep(time.Hour) // the test kills it
}

// startAndAwait starts cmd and returns once it reported want on stdout (its
// other report lines fail the test), or fails the test after timeout.
func startAndAwait(t *testing.T, cmd *exec.Cmd, want string, timeout time.Duration) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	got := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if r := testutil.Reports(sc.Text()); len(r) == 1 {
				got <- strings.Join(r[0], " ")
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case line := <-got:
		if line != want {
			t.Fatalf("helper %v: %s", cmd.Args, line)
		}
	case <-time.After(timeout):
		t.Fatalf("helper %v did not say %q within %v", cmd.Args, want, timeout)
	}
}

// asNobody returns the helper command for role, run as the user nobody
// through setpriv, from a copy of the test binary that nobody may run.
func asNobody(t *testing.T, dir, role, path string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run a helper as another user (CI runs as root)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is needed to run a helper as another user: %v", err)
	}
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(dir, "helper.test")
	if err := os.WriteFile(self, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"--reuid=65534", "--regid=65534", "--clear-groups", "--"}
	if emu := os.Getenv("SHAREDMAP_TEST_EMULATOR"); emu != "" { // as testutil.Self
		args = append(args, emu)
	}
	args = append(args, self, "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd := exec.Command(setpriv, args...)
	cmd.Env = append(os.Environ(), "SHAREDMAP_TEST_HELPER_ROLE="+role, "HASHMAP_FILE="+path)
	cmd.Stderr = os.Stderr
	return cmd
}

// TestAReaderStopsNoWriter: a user who may only read a map holds every lock
// such a user can take over the whole map file (flock, a POSIX and an OFD
// read lock) while writers open the map, write, and one dies holding a
// segment lock: every open is prompt, the survivor gets the dead writer's
// lock within the lock timeout's bound, a new process's open recovers it,
// and Check finds the map sound.
func TestAReaderStopsNoWriter(t *testing.T) {
	dir, err := os.MkdirTemp("", "sharedmap-reader-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the reader must reach the map
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.map")
	opts := *helperOpts
	opts.Mode = 0o644
	opts.LockTimeout = 300 * time.Millisecond
	a, err := Open(path, &opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Put([]byte("k"), []byte("before")); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if st, err := os.Stat(offheap.LockFilePath(path)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("lock file of a map written by its owner alone: %v, %v; want mode 0600", st, err)
	}

	reader := asNobody(t, dir, "reader-locks", path)
	startAndAwait(t, reader, "held", 10*time.Second)

	start := time.Now()
	a, err = Open(path, &opts) // the survivor, open before the holder dies
	if err != nil {
		t.Fatalf("a writable open under a reader's locks: %v", err)
	}
	defer a.Close()
	holder := helperCmd("hold-key", path)
	startAndAwait(t, holder, "held", 10*time.Second)
	opens := time.Since(start)
	if opens > 5*time.Second {
		t.Errorf("two writers' opens under a reader's locks took %v", opens)
	}
	_ = holder.Process.Signal(syscall.SIGKILL)
	_, _ = holder.Process.Wait()

	start = time.Now()
	if err := a.Put([]byte("k"), []byte("after")); err != nil {
		t.Fatalf("Put to the dead holder's segment under a reader's locks: %v", err)
	}
	put, bound := time.Since(start), 3*opts.LockTimeout+time.Second
	if put > bound {
		t.Errorf("Put to the dead holder's segment took %v, more than %v", put, bound)
	}
	t.Logf("under the reader's locks: two writers opened in %v (the second up to holding its lock); the survivor's Put to the dead holder's segment took %v (LockTimeout %v)", opens, put, opts.LockTimeout)
	b, err := Open(path, &opts) // a new process's open, as mapctl put makes
	if err != nil {
		t.Fatalf("a writable open under a reader's locks: %v", err)
	}
	if err := b.Put([]byte("k2"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := a.Recover(); err != nil {
		t.Fatalf("Recover under a reader's locks: %v", err)
	}
	problems, err := a.Check()
	if err != nil || len(problems) != 0 {
		t.Fatalf("Check under a reader's locks: %v, %v", problems, err)
	}
	if v, err := a.Get([]byte("k")); err != nil || string(v) != "after" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	stray := strings.Join(a.StrayLocks(), "\n")
	for _, want := range []string{
		fmt.Sprintf("POSIX read lock on bytes 0..EOF by pid %d", reader.Process.Pid),
		fmt.Sprintf("FLOCK read lock on bytes 0..EOF by pid %d", reader.Process.Pid),
		"OFDLCK read lock on bytes 0..EOF",
	} {
		if !strings.Contains(stray, want) {
			t.Errorf("StrayLocks does not name %q:\n%s", want, stray)
		}
	}
	if strings.Contains(stray, "write lock") {
		t.Errorf("StrayLocks names a writer's lock:\n%s", stray)
	}
}

// A map created for its group or for everyone to write is written by
// another user through the lock file the owner's process made; where that
// user may neither open the lock file nor make one, Open says what to do.
func TestAnotherUserWhoMayWriteSharesTheMap(t *testing.T) {
	dir, err := os.MkdirTemp("", "sharedmap-writer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // others may enter, not make files
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.map")
	a, err := Open(path, &Options{Mode: 0o666})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if st, err := os.Stat(offheap.LockFilePath(path)); err != nil || st.Mode().Perm() != 0o666 {
		t.Fatalf("lock file of a map everyone may write: %v, %v; want mode 0666", st, err)
	}
	writer := asNobody(t, dir, "writer-put", path)
	startAndAwait(t, writer, "put", 10*time.Second)
	_ = writer.Wait()
	if v, err := a.Get([]byte("other")); err != nil || string(v) != "user" {
		t.Fatalf("the other user's Put: %q, %v", v, err)
	}

	a.Close()
	if err := os.Remove(offheap.LockFilePath(path)); err != nil {
		t.Fatal(err)
	}
	writer = asNobody(t, dir, "writer-put", path)
	out, err := writer.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	if !strings.Contains(string(out), "lock file") || !strings.Contains(string(out), "make it once") {
		t.Fatalf("an open that can neither open nor make the lock file said: %s", out)
	}
}
