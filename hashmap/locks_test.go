//go:build linux

package hashmap

import (
	"encoding/binary"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
	"github.com/sharedmap/sharedmap/ipc"
)

func TestLockTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.map")
	m, err := Open(path, &Options{Entries: 1000, Locks: 3, LockAlgorithm: "hapax-vw"})
	if err != nil {
		t.Fatal(err)
	}
	lt := m.Locks()
	if lt.Len() != 3 || lt.Algorithm() != "hapax-vw" {
		t.Fatalf("table %d %q", lt.Len(), lt.Algorithm())
	}
	if err := lt.Lock(3); !errors.Is(err, ErrNoSuchLock) {
		t.Errorf("Lock(3) = %v, want ErrNoSuchLock", err)
	}
	if err := lt.Unlock(0); !errors.Is(err, ErrNotLocked) {
		t.Errorf("Unlock of a free lock = %v", err)
	}
	if err := lt.Lock(0); err != nil {
		t.Fatal(err)
	}
	if ok, _ := lt.TryLock(0); ok {
		t.Error("TryLock of a held lock succeeded")
	}
	if err := lt.LockTimeout(0, 10*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Errorf("LockTimeout on a held lock = %v", err)
	}
	if ok, _ := lt.TryLock(2); !ok {
		t.Error("TryLock of a free lock failed")
	}
	if st := m.Stats(); st.Locks != 3 || st.LockAlgorithm != "hapax-vw" {
		t.Errorf("stats: %d %q", st.Locks, st.LockAlgorithm)
	}
	m.Close()
	if err := lt.Unlock(0); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}

	// The layout survives reopen; asking for another one is refused.
	if _, err := Open(path, &Options{Locks: 4}); !errors.Is(err, ErrIncompatible) {
		t.Errorf("reopen with other Locks: %v", err)
	}
	if _, err := Open(path, &Options{LockAlgorithm: "tidex"}); !errors.Is(err, ErrIncompatible) {
		t.Errorf("reopen with other LockAlgorithm: %v", err)
	}
	m, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Locks().Len() != 3 || m.Locks().Algorithm() != "hapax-vw" {
		t.Fatalf("reopened table %d %q", m.Locks().Len(), m.Locks().Algorithm())
	}
	// Locks 0 and 2 were held at Close (and a timed-out wait's turn was
	// left on 0): this handle took the closed one's registry slot, and
	// releases what it held, as a dead process's.
	for _, i := range []int{0, 2} {
		if err := m.Locks().LockTimeout(i, 5*time.Second); err != nil {
			t.Fatalf("lock %d held at Close, after reopen: %v", i, err)
		}
		if err := m.Locks().Unlock(i); err != nil {
			t.Error(err)
		}
	}
	ro, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Locks().Lock(0); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only Lock: %v", err)
	}
	for _, o := range []*Options{{Locks: -1}, {LockAlgorithm: "nope"}} {
		if _, err := Open(filepath.Join(t.TempDir(), "x.map"), o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// TestLockTableAcrossProcesses: 4 processes x 2 goroutines increment a
// counter with plain Get and Put under application lock 1; only mutual
// exclusion across processes makes the total exact.
func TestLockTableAcrossProcesses(t *testing.T) {
	for _, alg := range ipc.Algorithms() {
		algo := alg.Name
		t.Run(algo, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.map")
			opts := *helperOpts
			opts.Locks, opts.LockAlgorithm = 2, algo
			m, err := Open(path, &opts)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			const procs, goroutines, iters = 4, 2, 500
			var cmds []*exec.Cmd
			for range procs {
				cmds = append(cmds, helperCmd("locked-increment", path, "2", "500"))
			}
			lines := testutil.Run(t, cmds...)
			errorsIn(t, lines)
			if len(lines) != procs {
				t.Fatalf("%d of %d helpers finished", len(lines), procs)
			}
			v, err := m.Get([]byte("plain-counter"))
			if err != nil {
				t.Fatal(err)
			}
			if got := binary.LittleEndian.Uint64(v); got != procs*goroutines*iters {
				t.Fatalf("counter %d, want %d: the lock did not exclude", got, procs*goroutines*iters)
			}
		})
	}
}

// TestUnlockFromAnotherProcess: a thread-oblivious lock held by one
// process is released by another's Unlock; a cohort lock is not, and
// Unlock says it may be held by another process; an alock held by its
// home is not released by another process, which gets ErrHeldElsewhere.
func TestUnlockFromAnotherProcess(t *testing.T) {
	for _, alg := range ipc.Algorithms() {
		algo := alg.Name
		t.Run(algo, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.map")
			opts := *helperOpts
			opts.Locks, opts.LockAlgorithm = 1, algo
			m, err := Open(path, &opts)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if err := m.Locks().Lock(0); err != nil { // this process opened it first: alock's home
				t.Fatal(err)
			}
			lines := testutil.Run(t, helperCmd("unlock-held", path))
			errorsIn(t, lines)
			want := "unlock nil trylock true"
			switch algo {
			case "cohort", "cohort-cr":
				want = "unlock not-locked-here trylock false"
			case "alock":
				want = "unlock held-elsewhere trylock false"
			}
			if len(lines) != 1 || strings.Join(lines[0], " ") != want {
				t.Fatalf("helper said %q, want %q", lines, want)
			}
			err = m.Locks().Unlock(0)
			if held := want != "unlock nil trylock true"; held && err != nil || !held && !errors.Is(err, ErrNotLocked) {
				t.Fatalf("the holder's Unlock = %v (the lock still held: %v)", err, held)
			}
		})
	}
}

// FuzzDecodeLockLayout: any bytes after the segment record either decode to
// a lock layout that encodes back to the same bytes, or give ErrCorrupt;
// never a panic.
func FuzzDecodeLockLayout(f *testing.F) {
	for _, n := range []int{0, 1, 16} {
		l, err := newLockLayout(n, "hapax")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(l.encode())
	}
	f.Add([]byte(lockRecordMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := decodeLockLayout(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		if got := l.encode(); string(got) != string(b) {
			t.Fatalf("decoded %+v re-encodes to %q, not %q", l, got, b)
		}
	})
}

// FuzzAttachArena: Attach of arbitrary words never panics, and an arena it
// accepts has locks that work.
func FuzzAttachArena(f *testing.F) {
	n, _ := ipc.Config{Slots: 2, Locks: 1}.Words()
	good := make([]uint64, n)
	if err := ipc.Format(good, ipc.Config{Slots: 2, Locks: 1}); err != nil {
		f.Fatal(err)
	}
	f.Add(wordsToBytes(good))
	f.Fuzz(func(t *testing.T, b []byte) {
		words := make([]uint64, len(b)/8)
		for i := range words {
			words[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
		a, err := ipc.Attach(words)
		if err != nil {
			return
		}
		if a.Config().Locks > 0 {
			m, err := a.Mutex("ttas", 0)
			if err != nil {
				t.Fatal(err)
			}
			if m.TryLock() {
				_ = m.Unlock()
			}
		}
	})
}

func wordsToBytes(w []uint64) []byte {
	var b []byte
	for _, x := range w {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

// TestTTASLeftInAReusedSlotIsReleased: D holds ttas lock 0 and dies; every
// other slot is in use, so the next opener N takes D's slot. The TTAS word
// names its owner by slot, so recovery took D's lock for N's and never
// released it: held by nobody, for good. N
// now releases what its slot's owner id holds as it joins.
func TestTTASLeftInAReusedSlotIsReleased(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	opts := &Options{Entries: 1024, AverageKeySize: 8, AverageValueSize: 8, Segments: 1,
		Locks: 1, LockAlgorithm: "ttas", LockTimeout: 100 * time.Millisecond, MaxProcesses: 2}
	a := mustOpen(t, path, opts)
	defer a.Close()
	d := mustOpen(t, path, opts)
	if err := d.Locks().Lock(0); err != nil {
		t.Fatal(err)
	}
	d.file.Close()               // D dies holding lock 0
	n := mustOpen(t, path, opts) // takes D's slot: the only one not held
	defer n.Close()
	if n.reg.Self() != 1 {
		t.Fatalf("N took slot %d, want D's slot 1", n.reg.Self())
	}
	lockWithin(t, a, 3*time.Second, "the dead holder's TTAS word names N's slot") // recovers at every LockTimeout
}

// lockWithin takes m's lock 0 with Lock, which recovers at every
// LockTimeout, and releases it, failing the test if that takes over d.
func lockWithin(t *testing.T, m *Map, d time.Duration, why string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- m.Locks().Lock(0) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		_ = m.Locks().Unlock(0)
	case <-time.After(d):
		t.Fatalf("Lock(0) still waiting after %v of recovery passes: %s", d, why)
	}
}

// TestTurnLeftInAReusedSlotIsTaken: P times out waiting for
// hapax lock 0 and closes the map before its turn comes, leaving the turn
// in its journal (Arena.Close: "as if this process had died waiting").
// N opens next and takes P's freed slot, adopting the turn, but runs no
// recovery (no slot looked dead). A's recovery passes skip N's journal
// (N lives), so nobody took P's turn and lock 0 stayed stuck for A. A process that adopts episodes as it joins
// now runs a recovery pass, which takes them over.
func TestTurnLeftInAReusedSlotIsTaken(t *testing.T) {
	for _, newcomer := range []bool{false, true} {
		t.Run(map[bool]string{false: "no newcomer", true: "newcomer takes the slot"}[newcomer], func(t *testing.T) {
			defer func(d time.Duration) { ipc.CloseWait = d }(ipc.CloseWait)
			ipc.CloseWait = 50 * time.Millisecond
			path := filepath.Join(t.TempDir(), "m")
			opts := &Options{Entries: 1024, AverageKeySize: 8, AverageValueSize: 8, Segments: 1,
				Locks: 1, LockAlgorithm: "hapax", LockTimeout: 100 * time.Millisecond, MaxProcesses: 3}
			a := mustOpen(t, path, opts)
			defer a.Close()
			p := mustOpen(t, path, opts)
			if err := a.Locks().Lock(0); err != nil {
				t.Fatal(err)
			}
			if err := p.Locks().LockTimeout(0, 20*time.Millisecond); !errors.Is(err, ErrTimeout) {
				t.Fatalf("P's wait: %v", err)
			}
			_ = p.Close() // its turn is still to come: it stays in P's journal
			if newcomer {
				n := mustOpen(t, path, opts)
				defer n.Close()
				if n.reg.Self() != 1 {
					t.Fatalf("N took slot %d, want P's slot 1", n.reg.Self())
				}
			}
			if err := a.Locks().Unlock(0); err != nil {
				t.Fatal(err)
			}
			lockWithin(t, a, 3*time.Second, "P's turn, adopted by N, is never taken")
		})
	}
}

// TestLockTimeoutRecoversTheDead: LockTimeout waited in turns without
// recovering between them, as Lock does, so a lock whose holder's process
// had gone was waited for to the end of d, and with d < 0 for good.
func TestLockTimeoutRecoversTheDead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.map")
	opts := &Options{Entries: 1000, Locks: 1, LockTimeout: 50 * time.Millisecond}
	a := mustOpen(t, path, opts)
	c := mustOpen(t, path, opts)
	defer c.Close()
	if err := a.Locks().Lock(0); err != nil {
		t.Fatal(err)
	}
	a.file.Close() // dies holding lock 0
	if err := c.Locks().LockTimeout(0, 5*time.Second); err != nil {
		t.Fatalf("LockTimeout of a lock whose holder died: %v", err)
	}
	_ = c.Locks().Unlock(0)
}

// TestLockTimeoutsLeaveTheJournalUsable: at map level, forty timed-out
// waits on a held lock used to take all of the process's journal entries
// (one per abandoned turn), so a free lock could no longer be taken.
// Later waits now take over the abandoned turn.
func TestLockTimeoutsLeaveTheJournalUsable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.map")
	opts := &Options{Entries: 1000, Locks: 2, LockTimeout: 50 * time.Millisecond}
	a := mustOpen(t, path, opts)
	defer a.Close()
	b := mustOpen(t, path, opts)
	defer b.Close()
	if err := a.Locks().Lock(0); err != nil {
		t.Fatal(err)
	}
	for range 40 {
		if err := b.Locks().LockTimeout(0, time.Millisecond); !errors.Is(err, ErrTimeout) {
			t.Fatalf("LockTimeout on a held lock: %v", err)
		}
	}
	if ok, err := b.Locks().TryLock(1); err != nil || !ok {
		t.Fatalf("TryLock(1) of a free lock: %v %v", ok, err)
	}
	_ = b.Locks().Unlock(1)
	if err := b.Locks().LockTimeout(1, 300*time.Millisecond); err != nil {
		t.Fatalf("LockTimeout(1) of a free lock: %v", err)
	}
	_ = b.Locks().Unlock(1)
	if err := a.Locks().Unlock(0); err != nil {
		t.Fatal(err)
	}
	if err := b.Locks().LockTimeout(0, 2*time.Second); err != nil {
		t.Fatalf("LockTimeout(0) once it is free: %v", err)
	}
	_ = b.Locks().Unlock(0)
}

// TestLockTableReset: a lock left taken by a handle that closed holding it
// (as damage can leave one: nothing recovery can explain) stays taken until
// LockTable.Reset, which another process's open handle refuses.
func TestLockTableReset(t *testing.T) {
	for _, algo := range []string{"hapax-cr", "ticket-awn", "alock", "ttas"} {
		t.Run(algo, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m")
			opts := &Options{Entries: 1000, Locks: 2, LockAlgorithm: algo, LockTimeout: 100 * time.Millisecond}
			a, err := Open(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := Open(path, opts) // another process, as far as the registry can tell
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Locks().Lock(1); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Locks().Reset(); !errors.Is(err, ErrNotAlone) {
				t.Fatalf("Reset with another handle open: %v, want ErrNotAlone", err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if err := a.Locks().LockTimeout(1, 50*time.Millisecond); !errors.Is(err, ErrTimeout) {
				t.Fatalf("the lock its holder left: %v, want ErrTimeout", err)
			}
			n, err := a.Locks().Reset()
			if err != nil || n != 3 {
				t.Fatalf("Reset = %d, %v; want 3 locks (the table's 2 and the map's own)", n, err)
			}
			if err := a.Locks().LockTimeout(1, time.Second); err != nil {
				t.Fatalf("after Reset: %v", err)
			}
			if err := a.Locks().Unlock(1); err != nil {
				t.Fatal(err)
			}
			if err := a.Put([]byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLockTableResetWaitsForTheMapsOwnLock: a write of this process that
// holds the map's own lock (as linking an overflow tier does) keeps
// LockTable.Reset from forcing it free: Reset waits for it, and fails with
// ErrResetBusy after LockTimeout if it stays held. Before, Reset freed it
// under the write, and a second write got it too (both would link the
// same tier).
func TestLockTableResetWaitsForTheMapsOwnLock(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000, Locks: 1, LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	admin := adminLock{m}
	admin.Lock()
	if _, err := m.Locks().Reset(); !errors.Is(err, ErrResetBusy) {
		t.Fatalf("Reset under a held map lock: %v, want ErrResetBusy", err)
	}
	if m.admin.TryLock() {
		t.Fatal("the map's own lock was free for a second holder after Reset")
	}
	released := make(chan error)
	go func() {
		time.Sleep(20 * time.Millisecond)
		released <- admin.Unlock()
	}()
	if n, err := m.Locks().Reset(); err != nil || n != 2 {
		t.Fatalf("Reset once the write let go: %d, %v; want 2 locks", n, err)
	}
	if err := <-released; err != nil {
		t.Fatalf("the write's Unlock: %v", err)
	}
}
