//go:build linux

package registry

import (
	"bufio"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
	"github.com/sharedmap/sharedmap/offheap"
)

var testLayout = Layout{Off: offheap.HeaderSize, Slots: 4, Ledgers: 3}

func openFile(t testing.TB, path string) *offheap.File {
	t.Helper()
	f, err := offheap.Open(path, offheap.OpenOptions{
		Create: true,
		Size:   offheap.HeaderSize + testLayout.Bytes(),
		Init: func(r *offheap.Region) error {
			Format(r.Bytes(testLayout.Off, testLayout.Bytes()), testLayout)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func attach(t testing.TB, f *offheap.File) *Registry {
	t.Helper()
	r, err := Attach(f, testLayout)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestHelperProcess is the body of helper processes: join, report the
// slot, dirty a ledger, and wait to be killed.
func TestHelperProcess(t *testing.T) {
	if testutil.Role() != "join" {
		t.Skip("runs only as a helper process")
	}
	f := openFile(t, os.Getenv("REGISTRY_FILE"))
	r := attach(t, f)
	i, err := r.Join(time.Second)
	if err != nil {
		testutil.Report("error %v", err)
		return
	}
	atomic.StoreUint64(r.Ledger(i, 1), 42)
	testutil.Report("slot %d", i)
	time.Sleep(time.Hour)
}

func TestJoinLeaveAndDeath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reg")
	fa, fb := openFile(t, path), openFile(t, path)
	defer fa.Close()
	a, b := attach(t, fa), attach(t, fb)
	ia, err := a.Join(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := b.Join(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ia == ib {
		t.Fatalf("two descriptions got slot %d", ia)
	}
	live, _ := a.Live(nil)
	if len(live) != 2 {
		t.Fatalf("live %v, want both", live)
	}
	if alone, _ := a.Alone(); alone {
		t.Fatal("Alone with b open")
	}
	s, _ := a.Slot(ib)
	if !s.Alive || !s.InUse || s.PID != os.Getpid() || s.StartTicks == 0 || s.Generation == 0 {
		t.Fatalf("b's slot seen from a: %+v", s)
	}
	// b "dies": its descriptors close without Leave, like a killed
	// process's.
	atomic.StoreUint64(b.Ledger(ib, 2), 7)
	fb.Close()
	s, _ = a.Slot(ib)
	if !s.Dead() {
		t.Fatalf("b's slot after its descriptor closed: %+v", s)
	}
	if alone, _ := a.Alone(); !alone {
		t.Fatal("not Alone after b died")
	}
	// Newcomers take free slots first; the dead slot only when no other is
	// left, with its ledgers clean.
	var c *Registry
	ic := -1
	for range testLayout.Slots - 1 {
		fc := openFile(t, path)
		defer fc.Close()
		c = attach(t, fc)
		if ic, err = c.Join(time.Second); err != nil {
			t.Fatal(err)
		}
		if ic == ib {
			break
		}
	}
	if ic != ib {
		t.Fatalf("last newcomer took slot %d, the dead one was %d", ic, ib)
	}
	if v := atomic.LoadUint64(c.Ledger(ic, 2)); v != 0 {
		t.Fatalf("inherited ledger %d", v)
	}
	if s2, _ := a.Slot(ic); s2.Generation <= s.Generation {
		t.Fatalf("generation %d after %d", s2.Generation, s.Generation)
	}
	// Leave frees the slot for good.
	if err := c.Leave(); err != nil {
		t.Fatal(err)
	}
	if s, _ := a.Slot(ic); s.InUse || s.Alive {
		t.Fatalf("slot after Leave: %+v", s)
	}
}

func TestFullAndRecoveryLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reg")
	var regs []*Registry
	for range testLayout.Slots {
		f := openFile(t, path)
		defer f.Close()
		r := attach(t, f)
		if _, err := r.Join(time.Second); err != nil {
			t.Fatal(err)
		}
		regs = append(regs, r)
	}
	f := openFile(t, path)
	defer f.Close()
	extra := attach(t, f)
	if _, err := extra.Join(time.Second); err == nil || !strings.Contains(err.Error(), "every process slot") {
		t.Fatalf("join of one too many: %v", err)
	}
	unlock, err := regs[0].LockRecovery(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := regs[1].LockRecovery(30 * time.Millisecond); err == nil {
		t.Fatal("two holders of the recovery lock")
	}
	if time.Since(start) < 30*time.Millisecond {
		t.Fatal("gave up before its timeout")
	}
	// The same process (same description) is kept out too.
	if _, err := regs[0].LockRecovery(10 * time.Millisecond); err == nil {
		t.Fatal("recovery lock taken twice through one description")
	}
	unlock()
	unlock2, err := regs[1].LockRecovery(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	unlock2()
}

// TestKilledProcessIsDead: a real process joins and is SIGKILLed; its slot
// reads dead (the kernel dropped its lock), its pid is recorded, and the
// slot can be taken again.
func TestKilledProcessIsDead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reg")
	f := openFile(t, path)
	defer f.Close()
	r := attach(t, f)
	cmd := testutil.Command("join", "REGISTRY_FILE="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "@ slot ") {
		cmd.Process.Kill()
		t.Fatalf("helper said %q, %v", line, err)
	}
	s, _ := r.Slot(0)
	if !s.Alive || s.PID != cmd.Process.Pid {
		t.Fatalf("helper's slot while it runs: %+v (pid %d)", s, cmd.Process.Pid)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	// A repair that began while it lived did not repair it as dead: its
	// slot is not freed.
	if n, err := r.MarkDeadRecovered([]Slot{s}); err != nil || n != 0 {
		t.Fatalf("MarkDeadRecovered of a slot alive when the repair began = %d, %v; want 0", n, err)
	}
	s, _ = r.Slot(0)
	if !s.Dead() {
		t.Fatalf("helper's slot after SIGKILL: %+v", s)
	}
	n, err := r.MarkDeadRecovered([]Slot{s})
	if err != nil || n != 1 {
		t.Fatalf("MarkDeadRecovered = %d, %v", n, err)
	}
	if i, err := r.Join(time.Second); err != nil || i != 0 {
		t.Fatalf("rejoin: slot %d, %v", i, err)
	}
}

func TestAttachRejectsMismatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reg")
	f := openFile(t, path)
	defer f.Close()
	l := testLayout
	l.Ledgers++
	if _, err := Attach(f, l); err == nil {
		t.Fatal("attached with the wrong ledger count")
	}
	l = testLayout
	l.Slots = math.MaxInt / 2
	if _, err := Attach(f, l); err == nil {
		t.Fatal("attached a layout larger than the file")
	}
}

// TestMend: the damage Check reports in the area header and in the slots
// is what MendHeader and Mend rewrite. Afterwards Attach takes the
// registry, Check reports nothing, a slot whose state word was garbage and
// which no live process holds counts as a dead process's (for recovery to
// release and free), and our own slot is still ours. Mending a sound
// registry changes nothing.
func TestMend(t *testing.T) {
	f := openFile(t, filepath.Join(t.TempDir(), "reg"))
	defer f.Close()
	l := testLayout
	r := attach(t, f)
	self, err := r.Join(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	other := (self + 1) % l.Slots
	pad := l.SlotSize() - slotHeaderSize - int64(l.Ledgers+l.Counters)*8
	if pad <= 0 {
		t.Fatal("the test layout leaves no padding to damage")
	}
	head := f.Uint64s(l.Off, areaHeaderSize/8)
	head[0] ^= 1          // magic
	head[hLedgers/8] += 2 // a size
	head[7] = 5           // an unused word
	*f.Uint64(l.slotOff(other) + sState) = 77
	*f.Uint64(l.slotOff(self) + sClaimedAt + 8) = 3
	f.Bytes(l.slotOff(2)+l.SlotSize()-1, 1)[0] = 9
	f.Bytes(l.Off+l.Bytes()-1, 1)[0] = 1
	if _, err := Attach(f, l); err == nil {
		t.Fatal("Attach took a registry with a damaged header")
	}
	if found := r.Check(func(error) {}); found != 5 {
		t.Errorf("Check found %d problems, want 5 (header word, state, slot word, padding, tail)", found)
	}
	if n, err := MendHeader(f, l); n != 3 || err != nil {
		t.Fatalf("MendHeader = %d, %v; want the 3 words damaged", n, err)
	}
	if _, err := Attach(f, l); err != nil {
		t.Fatalf("Attach after MendHeader: %v", err)
	}
	if n, err := r.Mend(time.Second); n != 4 || err != nil {
		t.Fatalf("Mend = %d, %v; want the 4 places damaged", n, err)
	}
	if s, err := r.Slot(other); err != nil || !s.Dead() {
		t.Errorf("slot with a garbage state after Mend: %+v, %v; want a dead process's", s, err)
	}
	// What recovery does once it has released what the dead held (it had
	// no process id: Check objects until then).
	slots, err := r.Slots()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.MarkDeadRecovered(slots); n != 1 || err != nil {
		t.Errorf("MarkDeadRecovered = %d, %v; want the mended slot", n, err)
	}
	r.Check(func(err error) { t.Errorf("after mending: %v", err) })
	if s, err := r.Slot(self); err != nil || !s.InUse || !s.Alive || r.Self() != self {
		t.Errorf("our slot after Mend: %+v, %v", s, err)
	}
	if n, err := MendHeader(f, l); n != 0 || err != nil {
		t.Errorf("MendHeader of a sound header = %d, %v", n, err)
	}
	if n, err := r.Mend(time.Second); n != 0 || err != nil {
		t.Errorf("Mend of sound slots = %d, %v", n, err)
	}
	big := l
	big.Slots = math.MaxInt / 2
	if _, err := MendHeader(f, big); err == nil {
		t.Error("MendHeader of a layout larger than the file succeeded")
	}
}

// TestJoinReportsADeadSlot: Join takes a dead process's slot only when no
// slot is free, clearing its ledgers, so what that process held becomes
// unaccounted for; it says so, for the opener to run a recovery pass (the
// opener's look at the slots before Join may have seen the process alive).
func TestJoinReportsADeadSlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reg")
	f := openFile(t, path)
	defer f.Close()
	r := attach(t, f)
	// Slot 0 reads as a dead process's: in use, and nobody holds its lock.
	atomic.StoreUint64(f.Uint64(r.layout.slotOff(0)+sState), stateInUse)
	for range testLayout.Slots - 1 {
		g := openFile(t, path)
		defer g.Close()
		o := attach(t, g)
		if i, err := o.Join(time.Second); err != nil || i == 0 {
			t.Fatalf("join of a free slot: %d, %v", i, err)
		}
		if o.TookDeadSlot() {
			t.Fatal("a free slot reported as a dead process's")
		}
	}
	if i, err := r.Join(time.Second); err != nil || i != 0 {
		t.Fatalf("join with only the dead slot left: %d, %v", i, err)
	}
	if !r.TookDeadSlot() {
		t.Fatal("the dead process's slot was not reported")
	}
}

// TestSlotOutsideTheRegistry: Slot of an index a damaged word may name,
// below 0 or past the last slot, is ErrNoSlot; it read past the registry
// (past the mapping, for a large index) before.
func TestSlotOutsideTheRegistry(t *testing.T) {
	f := openFile(t, filepath.Join(t.TempDir(), "reg"))
	defer f.Close()
	r := attach(t, f)
	for _, i := range []int{-1, testLayout.Slots, 1 << 30} {
		if _, err := r.Slot(i); !errors.Is(err, ErrNoSlot) {
			t.Errorf("Slot(%d): %v, want ErrNoSlot", i, err)
		}
	}
	if _, err := r.Slot(testLayout.Slots - 1); err != nil {
		t.Errorf("Slot(%d), the last: %v", testLayout.Slots-1, err)
	}
}
