//go:build linux

package registry

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/offheap"
	"golang.org/x/sys/unix"
)

// A writer's locks on the map file itself are read locks, so that a read
// lock over the whole map file, which any user who may read it can take,
// stops no claim and no recovery, and fakes no live process.
func TestReadLocksOnTheMapFileStopNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reg")
	f := openFile(t, path)
	defer f.Close()
	a := attach(t, f)
	if _, err := a.Join(time.Second); err != nil {
		t.Fatal(err)
	}
	// A second writer, then its death.
	fb := openFile(t, path)
	b := attach(t, fb)
	ib, err := b.Join(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fb.Close()

	rd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	whole := unix.Flock_t{Type: unix.F_RDLCK}
	if err := unix.FcntlFlock(rd.Fd(), unix.F_OFD_SETLK, &whole); err != nil {
		t.Fatal(err)
	}
	if s, err := a.Slot(ib); err != nil || !s.Dead() {
		t.Fatalf("a dead writer's slot under a reader's read lock: %+v, %v; want dead", s, err)
	}
	unlock, err := a.LockRecovery(100 * time.Millisecond)
	if err != nil {
		t.Fatalf("recovery lock under a reader's read lock: %v", err)
	}
	unlock()
	fc := openFile(t, path)
	defer fc.Close()
	if _, err := attach(t, fc).Join(100 * time.Millisecond); err != nil {
		t.Fatalf("a claim under a reader's read lock: %v", err)
	}
}

// A process of a version that locked the map file itself holds a write lock
// on its slot's byte there: it reads as alive, and its slot is not taken.
func TestAWriteLockOnTheMapFileIsALiveProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reg")
	f := openFile(t, path)
	defer f.Close()
	old, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: testLayout.slotOff(0), Len: 1}
	if err := unix.FcntlFlock(old.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	atomic.StoreUint64(f.Uint64(testLayout.slotOff(0)+sState), stateInUse)
	atomic.StoreUint64(f.Uint64(testLayout.slotOff(0)+sPID), 1)
	r := attach(t, f)
	if s, err := r.Slot(0); err != nil || !s.Alive {
		t.Fatalf("slot write-locked in the map file: %+v, %v; want alive", s, err)
	}
	for range testLayout.Slots - 1 {
		fn := openFile(t, path)
		defer fn.Close()
		i, err := attach(t, fn).Join(time.Second)
		if err != nil || i == 0 {
			t.Fatalf("Join = %d, %v; slot 0 is a live process's", i, err)
		}
	}
	fn := openFile(t, path)
	defer fn.Close()
	if _, err := attach(t, fn).Join(100 * time.Millisecond); !errors.Is(err, ErrFull) {
		t.Fatalf("Join with every slot live: %v, want ErrFull", err)
	}
}

// A map renamed while a process has it open is reached through another
// lock file: an opener by the new name cannot see that process, and must
// refuse the map rather than take it for dead. Once it is gone, the new
// lock file is adopted.
func TestAnotherLockFileIsRefusedWhileItsProcessesLive(t *testing.T) {
	dir := t.TempDir()
	path, moved := filepath.Join(dir, "reg"), filepath.Join(dir, "moved")
	f := openFile(t, path)
	a := attach(t, f)
	if _, err := a.Join(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	fm := openFile(t, moved)
	defer fm.Close()
	m := attach(t, fm)
	if _, err := m.Join(100 * time.Millisecond); !errors.Is(err, ErrLockFile) {
		t.Fatalf("Join through another lock file while the map's process lives: %v, want ErrLockFile", err)
	}
	f.Close() // the process by the old name ends
	if _, err := m.Join(100 * time.Millisecond); err != nil {
		t.Fatalf("Join once no process holds the old lock file: %v", err)
	}
	if _, err := os.Stat(offheap.LockFilePath(moved)); err != nil {
		t.Fatal(err)
	}
}

// The lock file of a map that only its owner may write is its owner's alone;
// one that its group may write, its group's too.
func TestLockFilePermissionFollowsWhoMayWrite(t *testing.T) {
	for _, c := range []struct{ mapPerm, want os.FileMode }{
		{0o600, 0o600}, {0o644, 0o600}, {0o664, 0o660}, {0o666, 0o666}, {0o640, 0o600}, {0o620, 0o660},
	} {
		path := filepath.Join(t.TempDir(), "reg")
		f := openFile(t, path)
		if err := os.Chmod(path, c.mapPerm); err != nil {
			t.Fatal(err)
		}
		if _, err := attach(t, f).Join(time.Second); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(offheap.LockFilePath(path))
		if err != nil || st.Mode().Perm() != c.want {
			t.Errorf("map %#o: lock file %v, %v; want %#o", c.mapPerm, st.Mode().Perm(), err, c.want)
		}
		f.Close()
	}
}

// A symbolic link where the lock file goes is refused, not followed.
func TestLockFileSymlinkIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "reg")
	f := openFile(t, path)
	defer f.Close()
	victim := filepath.Join(dir, "victim")
	if err := os.Symlink(victim, offheap.LockFilePath(path)); err != nil {
		t.Fatal(err)
	}
	r, err := Attach(f, testLayout)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Join(100 * time.Millisecond); !errors.Is(err, ErrLockFile) {
		t.Fatalf("Join with a symbolic link for a lock file: %v, want ErrLockFile", err)
	}
	if _, err := os.Lstat(victim); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the link's target was made: %v", err)
	}
}
