//go:build linux

package ipc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// FuzzRecoverJournal: journals are read from the shared file, so recovery
// must survive any bytes in them. Arbitrary words in a dead process's
// journal, and in the leftovers of a reused slot that this process adopts,
// go through SetJournals, Recover and the surrogate's turns, and then a
// TryLock and Close: never a panic, and Close returns within its bound.
// What garbage makes recovery do to the lock's queue is not asserted: a
// damaged journal cannot be told from a real one, which is why Check
// reports entries that name no lock.
func FuzzRecoverJournal(f *testing.F) {
	entry := func(phase, kind uint8, lock int, value, pred, gen uint64) []byte {
		var b []byte
		for _, w := range []uint64{packState(phase, kind, lock), value, pred, gen} {
			b = binary.LittleEndian.AppendUint64(b, w)
		}
		return b
	}
	f.Add(uint8(0), entry(jQueued, kindHapax, 1, 2, 0, 0), []byte(nil))
	f.Add(uint8(1), entry(jSeatAsk, kindCR, 0, 1, 0, 0), entry(jSeated|adopted, kindCR, 3, 0, 0, 0))
	f.Add(uint8(2), entry(jArriving, kindTidex, 2, 5, 0, 0), entry(jReleasing, kindHapaxVW, 9, 0, 0, 0))
	f.Add(uint8(3), entry(jTicketAsk, kindCR, 1, 3, 0, 0), entry(jQueued|adopted, 77, 1<<20, 0, 0, 0))
	f.Add(uint8(4), entry(jArriving, kindTicket, 0, 0, 0, 0), entry(jReleasing, kindTicket, 1, 3, 0, 0))
	f.Add(uint8(5), entry(jArriving, kindALock, 0, 3, 1, 0), entry(jArbitrate|adopted, kindALock, 0, alockHomeEpisode|2, 0, 0))
	algorithms := Algorithms()
	saved := CloseWait
	CloseWait = 2 * time.Millisecond
	f.Cleanup(func() { CloseWait = saved })
	f.Fuzz(func(t *testing.T, pick uint8, dead, leftover []byte) {
		algo := algorithms[int(pick)%len(algorithms)].Name
		const locks = 4
		a, _ := newJournaledArena(t, locks, leftover, dead)
		if _, err := a.Recover(algo, func(slot int) bool { return slot == 0 }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(surrogateLook) // let the surrogate take a step
		for i := range locks {
			m, err := a.Mutex(algo, i)
			if err != nil {
				t.Fatal(err)
			}
			if m.TryLock() {
				if err := m.Unlock(); err != nil {
					t.Fatalf("%s lock %d: unlock after TryLock: %v", algo, i, err)
				}
			}
		}
		closeWithin(t, a, 5*time.Second)
	})
}

// FuzzDamagedLockBody: lock 0's body words come from the input, as damage
// would leave them, beside a dead journal. Recover must not panic, and after
// a Reset every lock must be taken and released. (It found a ticket-awn
// ingress past 2^63, which Reset copied into egress, whose sign is the
// handover's flag: taken for good; and an alock tail damaged to carry the
// generation Reset moved to, which then named a queue nobody was in.)
func FuzzDamagedLockBody(f *testing.F) {
	f.Add(uint8(0), []byte{1, 2, 3}, []byte(nil))
	f.Add(uint8(6), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 7}, []byte(nil))
	algorithms := Algorithms()
	saved := CloseWait
	CloseWait = 2 * time.Millisecond
	f.Cleanup(func() { CloseWait = saved })
	f.Fuzz(func(t *testing.T, pick uint8, body, dead []byte) {
		algo := algorithms[int(pick)%len(algorithms)].Name
		const locks = 2
		a, _ := newJournaledArena(t, locks, nil, dead)
		ms := make([]Mutex, locks)
		for i := range locks {
			m, err := a.Mutex(algo, i)
			if err != nil {
				t.Fatal(err)
			}
			ms[i] = m
		}
		b := a.lockBody(0)
		for i := range b {
			if len(body) >= 8*(i+1) {
				b[i] = binary.LittleEndian.Uint64(body[8*i:])
			}
		}
		if _, err := a.Recover(algo, func(slot int) bool { return slot == 0 }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(surrogateLook)
		for i, m := range ms {
			if err := a.Reset(i); err != nil {
				t.Fatal(err)
			}
			if err := m.LockTimeout(time.Second); err != nil {
				t.Fatalf("%s lock %d after Reset: %v", algo, i, err)
			}
			if err := m.Unlock(); err != nil {
				t.Fatalf("%s lock %d: %v", algo, i, err)
			}
		}
		closeWithin(t, a, 5*time.Second)
	})
}

// closeWithin closes a, failing t if Close takes longer than d.
func closeWithin(t *testing.T, a *Arena, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { a.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("Close did not return within %v", d)
	}
}

// newJournaledArena makes an in-memory arena of locks locks with two
// journals: this process's (slot 0, holding the leftovers of a reused slot)
// and a dead process's (slot 1), each from bytes (zero-padded).
func newJournaledArena(t testing.TB, locks int, leftover, dead []byte) (*Arena, [][]uint64) {
	t.Helper()
	return newJournaledArenaOf(t, Config{Slots: 4, Locks: locks}, leftover, dead)
}

// newJournaledArenaOf is newJournaledArena for an arena of config cfg.
func newJournaledArenaOf(t testing.TB, cfg Config, leftover, dead []byte) (*Arena, [][]uint64) {
	t.Helper()
	a := newMemoryArena(t, cfg)
	journals := [][]uint64{bytesToJournal(leftover), bytesToJournal(dead)}
	if err := a.SetJournals(journals, 0); err != nil {
		t.Fatal(err)
	}
	return a, journals
}

// newMemoryArena formats and attaches an arena of config cfg in process
// memory.
func newMemoryArena(t testing.TB, cfg Config) *Arena {
	t.Helper()
	n, err := cfg.Words()
	if err != nil {
		t.Fatal(err)
	}
	words := make([]uint64, n)
	if err := Format(words, cfg); err != nil {
		t.Fatal(err)
	}
	a, err := Attach(words)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// bytesToJournal makes a one-process journal of the default size from b,
// zero-padded.
func bytesToJournal(b []byte) []uint64 {
	j := make([]uint64, 32*journalEntryWords)
	for i := range j {
		if len(b) < 8*(i+1) {
			break
		}
		j[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return j
}

// TestTicketArrivalDiedUnrecorded: a ticket-awn arrival that died between
// drawing its ticket and recording it is placed by elimination: the one
// ticket no journal names is its, and the survivor takes its turn; one that
// died before drawing is dropped; two such dead arrivals with one unnamed
// ticket cannot be told apart and the lock is reset. In each case the lock
// is free afterwards.
func TestTicketArrivalDiedUnrecorded(t *testing.T) {
	for _, c := range []struct {
		name         string
		dead, drawn  int
		wantResetGen bool
	}{
		{"drew", 1, 1, false},
		{"never drew", 1, 0, false},
		{"two dead, one drew", 2, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, journals := newJournaledArena(t, 1, nil, nil)
			defer a.Close()
			m, _ := a.Mutex("ticket-awn", 0)
			m.Lock() // ticket 0, held by this live process
			b := a.lockBody(0)
			for k := range c.dead {
				e := entry{journals[1][k*journalEntryWords : (k+1)*journalEntryWords]}
				e.set(jArriving, kindTicket, 0, 0, 0, atomic.LoadUint64(&b[lGen]))
				if k < c.drawn {
					atomic.AddUint64(&b[lArrive], 1) // drew a ticket, died before recording it
				}
			}
			if _, err := a.Recover("ticket-awn", func(slot int) bool { return slot == 0 }); err != nil {
				t.Fatal(err)
			}
			// Let the surrogate look while this live process still holds:
			// nothing it does may take the lock from a live holder.
			time.Sleep(20 * surrogateLook)
			if err := m.Unlock(); err != nil {
				t.Fatal(err)
			}
			if !testutil.WaitFor(5*time.Second, func() bool {
				if m.TryLock() {
					return m.Unlock() == nil
				}
				return false
			}) {
				t.Fatalf("lock not free after recovery: egress %d, ingress %d", int64(atomic.LoadUint64(&b[lDepart])), atomic.LoadUint64(&b[lArrive]))
			}
			if reset := atomic.LoadUint64(&b[lGen]) != 0; reset != c.wantResetGen {
				t.Fatalf("reset %v, want %v", reset, c.wantResetGen)
			}
		})
	}
}

// TestALockArrivalDiedBeforeLink: an alock arrival of the other cohort that
// died after its CAS into the tail but before linking behind its
// predecessor leaves that predecessor's release waiting for the link; the
// survivor links it, takes its turn and releases. One that died before its
// CAS is dropped. Either way the lock is free afterwards.
func TestALockArrivalDiedBeforeLink(t *testing.T) {
	for _, entered := range []bool{true, false} {
		t.Run(fmt.Sprintf("entered=%v", entered), func(t *testing.T) {
			a, journals := newJournaledArena(t, 1, nil, nil)
			defer a.Close()
			a.DeclareALockHome(0, 1) // a home that never comes: this process is of the other cohort
			m, _ := a.Mutex("alock", 0)
			m.Lock()
			l := a.alockSurrogate(0)
			holder := atomic.LoadUint64(l.tailR)
			dead := uint64(a.awnNodes.get())
			q := l.nodeQueued(dead)
			atomic.StoreUint32(q.budget, budgetWaiting)
			atomic.StoreUint64(q.next, 0)
			e := entry{journals[1][:journalEntryWords]}
			e.set(jArriving, kindALock, 0, dead, holder, atomic.LoadUint64(l.gen))
			if entered && !atomic.CompareAndSwapUint64(l.tailR, holder, dead) {
				t.Fatal("tail moved")
			}
			if _, err := a.Recover("alock", func(slot int) bool { return slot == 0 }); err != nil {
				t.Fatal(err)
			}
			unlocked := make(chan error, 1)
			go func() { unlocked <- m.Unlock() }()
			select {
			case err := <-unlocked:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the release still waits for the dead arrival's link")
			}
			if !testutil.WaitFor(5*time.Second, func() bool { return m.TryLock() && m.Unlock() == nil }) {
				t.Fatalf("lock not free after recovery: tail %d", atomic.LoadUint64(l.tailR))
			}
		})
	}
}

// TestALockRecoveryLinksOnlyAWaiter: a dead alock waiter's surrogate links
// it behind its predecessor only while that link is missing and the dead
// one still waits. Once the predecessor has handed it the lock, the
// predecessor's node may already serve a new episode whose link word is
// zero again: a link written there would send that episode's handover to
// the dead one. Then the unlinked case: the link is made.
func TestALockRecoveryLinksOnlyAWaiter(t *testing.T) {
	for _, handed := range []bool{true, false} {
		t.Run(fmt.Sprintf("handed=%v", handed), func(t *testing.T) {
			a, journals := newJournaledArena(t, 1, nil, nil)
			defer a.Close()
			l := a.alockSurrogate(0)
			pred, dead := uint64(a.awnNodes.get()), uint64(a.awnNodes.get())
			q := l.nodeQueued(dead)
			atomic.StoreUint64(q.next, 0)
			atomic.StoreUint64(l.tailR, dead)
			atomic.StoreUint64(l.nodeQueued(pred).next, 0) // reused (handed), or never linked
			budget := budgetWaiting
			if handed {
				budget = 3
			}
			atomic.StoreUint32(q.budget, budget)
			e := entry{journals[0][:journalEntryWords]}
			gen := atomic.LoadUint64(l.gen)
			e.set(jQueued|adopted, kindALock, 0, dead, pred, gen)
			a.stepALock(e, atomic.LoadUint64(&e.w[0]), 0, dead, pred, gen)
			link := atomic.LoadUint64(l.nodeQueued(pred).next)
			switch {
			case handed && link != 0:
				t.Fatalf("the surrogate linked node %d into the reused predecessor's episode", link)
			case !handed && link != dead:
				t.Fatalf("the surrogate left the waiting dead arrival unlinked (link %d)", link)
			}
		})
	}
}

// TestALockNodeOutlivesItsEntry: an alock Unlock pools its node only after
// the episode's journal entry has ended. A process killed between the two
// would otherwise leave an idle node, which a newcomer may take from the
// dead (nodePool.get), still named by a live entry, on whose behalf
// recovery would then release the newcomer's lock.
func TestALockNodeOutlivesItsEntry(t *testing.T) {
	a, journals := newJournaledArena(t, 1, nil, nil)
	defer a.Close()
	a.DeclareALockHome(0, 1) // a home that never comes: this process is of the other cohort
	m, _ := a.Mutex("alock", 0)
	m.Lock()
	ran := false
	testHookReleased = func(node uint64) {
		ran = true
		if owner := atomic.LoadUint64(a.awnNode(uint32(node)).owner); owner&idleNode != 0 || owner == returnedNode {
			t.Errorf("node %d pooled (owner %#x) while its episode's entry is live", node, owner)
		}
		named := false
		for i := 0; i < len(journals[0]); i += journalEntryWords {
			s := atomic.LoadUint64(&journals[0][i])
			named = named || uint8(s>>8) == kindALock && s&0x7f == jReleasing && atomic.LoadUint64(&journals[0][i+1]) == node
		}
		if !named {
			t.Error("no releasing entry names the node: the test cannot tell")
		}
	}
	defer func() { testHookReleased = nil }()
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
	if !ran {
		t.Fatal("the hook never ran")
	}
}

// gonePid returns the pid of a process that has exited and been reaped.
func gonePid(t *testing.T) uint64 {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run a child process to own the dead nodes: %v", err)
	}
	return uint64(cmd.Process.Pid)
}

// TestRetiredALockNodeWaitsForItsSuccessor: Recover gives a dead alock
// episode's node back once the episode is over, but not while another
// entry still names it as its predecessor (a dead successor's surrogate
// may still link behind it) or the tail names it (which a finished
// episode never leaves: damage, so the node stays). Once the successor's
// episode is over too, both nodes go back.
func TestRetiredALockNodeWaitsForItsSuccessor(t *testing.T) {
	a, journals := newJournaledArena(t, 1, nil, nil)
	defer a.Close()
	l := a.alockSurrogate(0)
	gen := atomic.LoadUint64(l.gen)
	dead := gonePid(t)
	pred, succ := uint64(a.awnNodes.get()), uint64(a.awnNodes.get())
	for _, n := range []uint64{pred, succ} {
		atomic.StoreUint64(a.awnNode(uint32(n)).owner, dead)
	}
	retired := entry{journals[0][:journalEntryWords]}
	retired.set(jRetired|adopted, kindALock, 0, pred, 0, gen)
	waiting := entry{journals[0][journalEntryWords : 2*journalEntryWords]}
	waiting.set(jQueued|adopted, kindALock, 0, succ, pred, gen)
	atomic.StoreUint64(l.tailR, succ)
	atomic.StoreUint32(l.nodeQueued(succ).budget, budgetWaiting)
	recoverOnce := func() Recovery {
		r, err := a.Recover("alock", func(slot int) bool { return slot == 0 })
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := recoverOnce(); r.Nodes != 0 || atomic.LoadUint64(a.awnNode(uint32(pred)).owner) != dead {
		t.Fatalf("node %d given back while its successor's entry names it (%+v)", pred, r)
	}
	tail := uint64(a.awnNodes.get())
	atomic.StoreUint64(a.awnNode(uint32(tail)).owner, dead)
	atomic.StoreUint64(l.tailR, tail)
	inTail := entry{journals[0][2*journalEntryWords : 3*journalEntryWords]}
	inTail.set(jRetired|adopted, kindALock, 0, tail, 0, gen)
	if r := recoverOnce(); atomic.LoadUint64(a.awnNode(uint32(tail)).owner) != dead || atomic.LoadUint64(&inTail.w[0])&0x7f != jRetired {
		t.Fatalf("node %d given back while the tail names it (%+v)", tail, r)
	}
	inTail.set(jFree, 0, 0, 0, 0, 0)
	// The successor's episode ends (its surrogate released it): the tail
	// is empty and its entry retired.
	atomic.StoreUint64(l.tailR, 0)
	waiting.phase(jRetired | adopted)
	r := recoverOnce()
	for _, n := range []uint64{pred, succ} {
		if o := atomic.LoadUint64(a.awnNode(uint32(n)).owner); o != returnedNode {
			t.Errorf("node %d not given back (owner %#x, %+v)", n, o, r)
		}
	}
	if r.Nodes != 2 {
		t.Errorf("Recover counted %d nodes given back, want 2", r.Nodes)
	}
	for i := 0; i < 2*journalEntryWords; i += journalEntryWords {
		if s := atomic.LoadUint64(&journals[0][i]); s != jFree {
			t.Errorf("entry %d left in state %#x", i/journalEntryWords, s)
		}
	}
}

// TestSurrogateLeavesDoneEntries: an adopted entry that another process's
// Recover marked done (it gave the retired node back) is freed by this
// process's sweep alone; the surrogate leaves it, or the two could count
// the entry free twice.
func TestSurrogateLeavesDoneEntries(t *testing.T) {
	a, journals := newJournaledArena(t, 1, nil, nil)
	defer a.Close()
	e := entry{journals[0][:journalEntryWords]}
	e.set(jDone|adopted, kindALock, 0, 1, 0, 0)
	free := a.journals.free.Load()
	a.driveAdopted()
	if s := atomic.LoadUint64(&e.w[0]); s&0x7f != jDone || a.journals.free.Load() != free {
		t.Fatalf("the surrogate handled a done entry: state %#x, free entries %d, was %d", s, a.journals.free.Load(), free)
	}
	a.journals.mu.Lock()
	swept := a.journals.sweepDone()
	a.journals.mu.Unlock()
	if swept != 1 || a.journals.free.Load() != free+1 {
		t.Fatalf("the sweep freed %d entries (free %d, was %d)", swept, a.journals.free.Load(), free)
	}
}

// TestALockFailedTryLockEndsItsEntryFirst: a TryLock of the other cohort
// whose CAS into the tail fails ends its journal entry before it pools its
// node. The other order leaves, to a process killed in between, a pooled
// node (which a newcomer may take from the dead) still named by an arriving
// entry: recovery would then find that node in the tail and end the
// newcomer's episode on the dead one's behalf.
func TestALockFailedTryLockEndsItsEntryFirst(t *testing.T) {
	a, journals := newJournaledArena(t, 1, nil, nil)
	defer a.Close()
	a.DeclareALockHome(0, 1) // a home that never comes: this process is of the other cohort
	m, _ := a.Mutex("alock", 0)
	l := a.alockSurrogate(0)
	const arrival = 1 << 40 // not a node: only makes the CAS fail
	testHookBeforeTailCAS = func() { atomic.StoreUint64(l.tailR, arrival) }
	pooled := 0
	testHookPooling = func(node uint64) {
		pooled++
		for i := 0; i < len(journals[0]); i += journalEntryWords {
			if s := atomic.LoadUint64(&journals[0][i]); s != jFree && atomic.LoadUint64(&journals[0][i+1]) == node {
				t.Errorf("node %d pooled while an entry in state %#x names it", node, s)
			}
		}
	}
	defer func() { testHookBeforeTailCAS, testHookPooling = nil, nil }()
	if m.TryLock() {
		t.Fatal("TryLock entered past another arrival")
	}
	if pooled != 1 {
		t.Fatalf("the node was pooled %d times, want 1", pooled)
	}
	testHookBeforeTailCAS = nil
	atomic.StoreUint64(l.tailR, 0)
	if !m.TryLock() || m.Unlock() != nil {
		t.Fatal("lock not free afterwards")
	}
}

// errKilled stands for a process killed at a test hook.
var errKilled = errors.New("killed here")

// killedAt runs step with hook set to stop it (as a kill would) where the
// hook runs, and reports whether it got there.
func killedAt(hook *func(), step func()) (killed bool) {
	*hook = func() { panic(errKilled) }
	defer func() {
		*hook = nil
		if r := recover(); r != nil {
			if r != errKilled {
				panic(r)
			}
			killed = true
		}
	}()
	step()
	return false
}

// TestTicketSurrogateKilledMidRelease: the surrogate that takes a dead
// ticket-awn holder's turn records the release in the journal before it
// starts it. Killed between the release's egress store, which hands the
// turn to the next ticket's node, and its store to that node's flag, it
// leaves a releasing entry, and the next survivor sets the flag; left
// queued, the entry would look done (egress is past its ticket) and the
// waiter on that node would wait for good.
func TestTicketSurrogateKilledMidRelease(t *testing.T) {
	a, journals := newJournaledArena(t, 1, nil, nil)
	defer a.Close()
	l := openTicketAWN(a, 0).(*ticketAWN)
	if l.waiters.n == 0 {
		t.Fatal("the test arena has no ticket-awn waiter array (newJournaledArena takes the default)")
	}
	b := a.lockBody(0)
	gen := atomic.LoadUint64(&b[lGen])
	// Ticket 0 is the dead holder's; ticket 1's waiter arrived further back
	// and waits on its node.
	atomic.StoreUint64(&b[lArrive], 2)
	n := a.awnNodes.get()
	nd := a.awnNode(n)
	atomic.StoreUint32(nd.mine, 0)
	atomic.StoreUint32(l.waiters.at(1), n)
	e := entry{journals[0][:journalEntryWords]}
	e.set(jQueued|adopted, kindTicket, 0, 0, 0, gen)
	if !killedAt(&testHookBetweenStores, func() { a.stepTicket(e, atomic.LoadUint64(&e.w[0]), 0, 0, gen) }) {
		t.Fatal("the surrogate's step never reached the release")
	}
	if egress := l.egress(); egress != -1 {
		t.Fatalf("egress %d after the killed release, want -1 (a node handover)", egress)
	}
	for range 3 { // the next survivor's looks
		if atomic.LoadUint64(&e.w[0]) == jFree {
			break
		}
		if a.stepTicket(e, atomic.LoadUint64(&e.w[0]), 0, 0, gen) {
			break
		}
	}
	if atomic.LoadUint32(nd.mine) != 1 {
		t.Fatalf("the waiter on ticket 1's node was never handed the lock (entry state %#x)", atomic.LoadUint64(&e.w[0]))
	}
}

// TestALockDeadReleaseEmptiedTheQueue: a dead alock episode whose release
// had already emptied the queue (its CAS of the tail to empty landed, then
// the process, or its surrogate, died before the entry ended) is retired:
// no successor will ever link behind it. While a successor that took the
// tail from it has not linked yet, it is not; once linked, the successor
// is handed the lock; nor while a successor's entry is on its way between
// journals.
func TestALockDeadReleaseEmptiedTheQueue(t *testing.T) {
	a, journals := newJournaledArena(t, 1, nil, nil)
	defer a.Close()
	l := a.alockSurrogate(0)
	gen := atomic.LoadUint64(l.gen)
	dead := uint64(a.awnNodes.get())
	q := l.nodeQueued(dead)
	atomic.StoreUint64(q.next, 0)
	atomic.StoreUint32(q.budget, 3)
	e := entry{journals[0][:journalEntryWords]}
	step := func() {
		s := atomic.LoadUint64(&e.w[0])
		a.stepALock(e, s, 0, dead, 0, gen)
	}
	phase := func() uint64 { return atomic.LoadUint64(&e.w[0]) & 0x7f }

	// A successor took the tail and has not linked: the release must wait.
	succ := uint64(a.awnNodes.get())
	atomic.StoreUint32(l.nodeQueued(succ).budget, budgetWaiting)
	atomic.StoreUint64(l.tailR, succ)
	waiting := entry{journals[0][journalEntryWords : 2*journalEntryWords]}
	waiting.set(jQueued, kindALock, 0, succ, dead, gen)
	e.set(jReleasing|adopted, kindALock, 0, dead, 0, gen)
	step()
	if phase() != jReleasing {
		t.Fatalf("entry in phase %#x before the successor linked, want releasing", phase())
	}
	atomic.StoreUint64(q.next, succ)
	step()
	if phase() != jRetired || atomic.LoadUint32(l.nodeQueued(succ).budget) == budgetWaiting {
		t.Fatalf("linked successor not handed the lock (phase %#x)", phase())
	}

	// A successor's entry in the middle of a move between journals (by a
	// Recover elsewhere) is missed by one scan: the second finds it.
	waiting.set(jFree, 0, 0, 0, 0, 0)
	atomic.StoreUint32(l.nodeQueued(succ).budget, budgetWaiting)
	atomic.StoreUint64(q.next, 0)
	e.set(jReleasing|adopted, kindALock, 0, dead, 0, gen)
	moved := entry{journals[1][:journalEntryWords]}
	testHookBetweenScans = func() { moved.set(jQueued|adopted, kindALock, 0, succ, dead, gen) }
	step()
	testHookBetweenScans = nil
	if phase() != jReleasing {
		t.Fatalf("entry in phase %#x while a successor's entry moved, want releasing", phase())
	}

	// The release emptied the queue before the process died.
	moved.set(jFree, 0, 0, 0, 0, 0)
	atomic.StoreUint64(l.tailR, 0)
	step()
	if phase() != jRetired {
		t.Fatalf("entry in phase %#x after a release that emptied the queue, want retired", phase())
	}
}

// TestTicketSurrogateChecksEgressLast: a survivor finishing a dead
// ticket-awn release that chose a node handover sets the flag of the node
// in ticket t+1's array slot only if egress has not moved meanwhile. If it
// has, t+1 held and released the lock, and the slot may name the node of
// a later arrival (n tickets on, reusing it), which a set flag would hand
// the lock while another holds it.
func TestTicketSurrogateChecksEgressLast(t *testing.T) {
	a, journals := newJournaledArena(t, 1, nil, nil)
	defer a.Close()
	l := openTicketAWN(a, 0).(*ticketAWN)
	n := int64(l.waiters.n)
	if n == 0 {
		t.Fatal("the test arena has no ticket-awn waiter array (newJournaledArena takes the default)")
	}
	b := a.lockBody(0)
	gen := atomic.LoadUint64(&b[lGen])
	// Ticket 0 died releasing, having chosen ticket 1's node; ticket 1 has
	// been handed the lock (its flag landed, it withdrew the node).
	atomic.StoreUint64(&b[lArrive], uint64(n+2))
	atomic.StoreUint64(&b[lDepart], uint64(1<<64-1)) // egress -1
	later := a.awnNodes.get()
	nd := a.awnNode(later)
	atomic.StoreUint32(nd.mine, 0)
	e := entry{journals[0][:journalEntryWords]}
	e.set(jReleasing|adopted, kindTicket, 0, 0, 0, gen)
	testHookTicketFlag = func() {
		// Meanwhile ticket 1 and 2 release, 3 holds, and ticket n+1 waits on
		// its node in the slot ticket 1 used.
		atomic.StoreUint64(&b[lDepart], 3)
		atomic.StoreUint32(l.waiters.at(n+1), later)
	}
	defer func() { testHookTicketFlag = nil }()
	a.stepTicket(e, atomic.LoadUint64(&e.w[0]), 0, 0, gen)
	if atomic.LoadUint32(nd.mine) != 0 {
		t.Fatalf("ticket %d handed the lock while ticket 3 holds it", n+1)
	}
}

// TestHapaxSurrogateKilledMidRelease: the surrogate taking a dead hapax
// holder's turn records the release before its Depart store, so that one
// killed right after that store leaves an entry the next survivor finishes
// (the successor's slot is set, the entry ends); left queued, Depart past
// its predecessor would read as "not its turn yet" at every look, and the
// entry would never end.
func TestHapaxSurrogateKilledMidRelease(t *testing.T) {
	a, journals := newJournaledArena(t, 1, nil, nil)
	defer a.Close()
	b := a.lockBody(0)
	gen := atomic.LoadUint64(&b[lGen])
	const pred, dead, waiter = 10, 11, 12 // the dead holds after pred; a waiter follows
	atomic.StoreUint64(&b[lDepart], pred)
	atomic.StoreUint64(&b[lArrive], waiter)
	atomic.StoreUint64(&b[lHolder], dead)
	e := entry{journals[0][:journalEntryWords]}
	e.set(jQueued|adopted, kindHapax, 0, dead, pred, gen)
	step := func() bool { return a.stepAdopted(e, atomic.LoadUint64(&e.w[0])) }
	if !killedAt(&testHookBetweenStores, func() { step() }) {
		t.Fatal("the surrogate's step never reached the release")
	}
	if d := atomic.LoadUint64(&b[lDepart]); d != dead {
		t.Fatalf("Depart %d after the killed release, want %d", d, dead)
	}
	ended := false
	for range 3 {
		if ended = step(); ended {
			break
		}
	}
	if !ended {
		t.Fatalf("the entry never ended (state %#x)", atomic.LoadUint64(&e.w[0]))
	}
	if v := atomic.LoadUint64(a.toSlot(0, dead).value); v != dead {
		t.Fatalf("the waiter's slot holds %d, want %d: the release was not finished", v, dead)
	}
}

// TestRestepAfterReleaseLeavesTheLock: a surrogate that released a dead
// episode's lock and was killed before freeing the entry leaves it
// releasing; while the lock moves on, the next survivor's step must not
// release again. Hapax-VW: a dead waiter handed the lock through its slot
// (Depart left behind), and one that was not; Tidex: pred's process reuses
// its identity, so Depart comes back to the entry's predecessor.
func TestRestepAfterReleaseLeavesTheLock(t *testing.T) {
	for _, c := range []struct {
		algo   string
		kind   uint8
		handed bool
	}{
		{"hapax-vw", kindHapaxVW, true},
		{"hapax-vw", kindHapaxVW, false},
		{"tidex", kindTidex, false},
	} {
		t.Run(fmt.Sprintf("%s/handed=%v", c.algo, c.handed), func(t *testing.T) {
			a, journals := newJournaledArena(t, 1, nil, nil)
			defer a.Close()
			b := a.lockBody(0)
			gen := atomic.LoadUint64(&b[lGen])
			const stale, pred, dead = 5, 10, 11
			atomic.StoreUint64(&b[lDepart], pred)
			if c.handed {
				atomic.StoreUint64(&b[lDepart], stale) // pred handed over through the slot
			}
			atomic.StoreUint64(&b[lArrive], dead)
			e := entry{journals[0][31*journalEntryWords : 32*journalEntryWords]}
			e.set(jQueued|adopted, c.kind, 0, dead, pred, gen)
			if c.handed {
				e.markRegistered() // and slot(pred) no longer holds pred
			}
			step := func() bool { return a.stepAdopted(e, atomic.LoadUint64(&e.w[0])) }
			if !step() {
				t.Fatal("the first step did not release")
			}
			// The surrogate died before freeing the entry; the lock moves on.
			if c.kind == kindTidex {
				a.tidexIDs.put(pred) // pred's process takes its identity again
			}
			m, err := a.Mutex(c.algo, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.LockTimeout(time.Second); err != nil {
				t.Fatal("the lock is not free after the release:", err)
			}
			if err := m.Unlock(); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if step() {
					break
				}
			}
			if err := m.LockTimeout(100 * time.Millisecond); err != nil {
				t.Fatalf("lock stuck after the re-step (Depart %d, Arrive %d): %v", atomic.LoadUint64(&b[lDepart]), atomic.LoadUint64(&b[lArrive]), err)
			}
			_ = m.Unlock()
		})
	}
}

// TestHapaxVWJournaledHandoverStoresDepart: with journals, a hapax-vw
// release to a registered waiter stores Depart before clearing the slot,
// never the assured handover alone, which leaves Depart naming an older
// episode: recovery reads whose turn it is, and whether a dead episode's
// release happened, from Depart.
func TestHapaxVWJournaledHandoverStoresDepart(t *testing.T) {
	a, _ := newJournaledArena(t, 1, nil, nil)
	defer a.Close()
	m, _ := a.Mutex("hapax-vw", 0)
	b := a.lockBody(0)
	m.Lock()
	first := atomic.LoadUint64(&b[lHolder])
	entered, done := make(chan uint64), make(chan struct{})
	go func() {
		defer close(done)
		m.Lock()
		entered <- atomic.LoadUint64(&b[lDepart])
		_ = m.Unlock()
	}()
	// Wait until the second waiter has registered in the first's slot.
	if !testutil.WaitFor(5*time.Second, func() bool { return atomic.LoadUint64(a.toSlot(0, first).value) == first }) {
		t.Fatal("the waiter never registered in its predecessor's slot")
	}
	atomic.StoreUint64(&b[lWaited], 1) // contended: the release may hand over through the slot
	// Depart first, the slot after: a slot cleared first would let the
	// successor enter and release before a late Depart store moved Depart
	// back to an episode before it.
	hooked := false
	testHookBetweenStores = func() {
		if hooked {
			return // the second one's release
		}
		hooked = true
		// The slot may read 0 already: the waiter, seeing Depart, ratifies
		// and clears its own registration (as it may on a slower
		// machine); Depart must be there either way.
		if d, v := atomic.LoadUint64(&b[lDepart]), atomic.LoadUint64(a.toSlot(0, first).value); d != first || v != first && v != 0 {
			t.Errorf("between the release's stores: Depart %d, slot %d; want Depart %d and the slot %d or cleared by the waiter", d, v, first, first)
		}
	}
	defer func() { testHookBetweenStores = nil }()
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
	depart := <-entered
	<-done
	if depart != first {
		t.Fatalf("Depart %d while the second holds, want %d (its predecessor)", depart, first)
	}
	if !hooked {
		t.Fatal("the release never reached the hook between its stores")
	}
}

// TestReleasedSince: whether a dead episode's release, with Depart at its
// predecessor again, happened after all.
func TestReleasedSince(t *testing.T) {
	const pred, dead, other = 10, 11, 12
	type another struct { // another entry on the arena
		phase    uint8
		pred     uint64
		kind     uint8
		lock     int
		laterGen bool
	}
	queuedAfterDepart := another{jQueued, pred, kindTidex, 0, false}
	for _, c := range []struct {
		name   string
		arrive uint64
		holder uint64
		other  *another
		want   ownerVerdict
	}{
		{"the dead one holds", dead, 0, nil, ownerThis},
		{"its own holder word", dead, dead, nil, ownerThis},
		{"a waiter behind it", other, 0, &another{jQueued, dead, kindTidex, 0, false}, ownerThis},
		{"the lock is free", pred, 0, nil, ownerOther},
		{"another holder word", other, other, nil, ownerOther},
		{"another entry after Depart", other, 0, &queuedAfterDepart, ownerOther},
		{"another releasing after Depart", other, 0, &another{jReleasing, pred, kindTidex, 0, false}, ownerOther},
		{"a live arrival", other, 0, &another{jArriving, 0, kindTidex, 0, false}, ownerAmbiguous},
		{"a dead arrival", other, 0, &another{jArriving | adopted, 0, kindTidex, 0, false}, ownerThis},
		{"after Depart, another generation", other, 0, &another{jQueued, pred, kindTidex, 0, true}, ownerThis},
		{"after Depart, another lock", other, 0, &another{jQueued, pred, kindTidex, 1, false}, ownerThis},
		{"after Depart, another algorithm", other, 0, &another{jQueued, pred, kindALock, 0, false}, ownerThis},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, journals := newJournaledArena(t, 2, nil, nil)
			defer a.Close()
			b := a.lockBody(0)
			gen := atomic.LoadUint64(&b[lGen])
			atomic.StoreUint64(&b[lDepart], pred)
			atomic.StoreUint64(&b[lArrive], c.arrive)
			atomic.StoreUint64(&b[lHolder], c.holder)
			e := entry{journals[1][:journalEntryWords]}
			e.set(jReleasing|adopted, kindTidex, 0, dead, pred, gen)
			if o := c.other; o != nil {
				ogen := gen
				if o.laterGen {
					ogen++
				}
				entry{journals[0][:journalEntryWords]}.set(o.phase, o.kind, o.lock, other, o.pred, ogen)
			}
			if got := a.releasedSince(0, dead, pred, c.arrive, gen, e); got != c.want {
				t.Fatalf("releasedSince = %v, want %v", got, c.want)
			}
		})
	}
}

// TestTicketSurrogateOnDamagedEgress: a dead ticket-awn releaser's entry
// and a damaged egress word, in an arena without waiting arrays (egress
// saying a node handover) and in one with them (egress and ticket at the
// ends of their range). The surrogate's step must not panic: it ran in a
// goroutine of its own, so a panic (a division by zero, a negative array
// index, before awnArray.at took any ticket) killed the process.
func TestTicketSurrogateOnDamagedEgress(t *testing.T) {
	for _, c := range []struct {
		name           string
		cfg            Config
		ticket, depart uint64
	}{
		{"no-arrays", Config{Slots: 4, Locks: 1, AWNWaiters: -1, AWNNodes: -1}, 0, ^uint64(0)}, // egress -1: a handover to ticket 0's node
		{"arrays", Config{Slots: 4, Locks: 1}, 1 << 63, 1 << 63},
	} {
		t.Run(c.name, func(t *testing.T) {
			var dead []byte
			for _, w := range []uint64{packState(jReleasing, kindTicket, 0), c.ticket, 0, 0} {
				dead = binary.LittleEndian.AppendUint64(dead, w)
			}
			a, _ := newJournaledArenaOf(t, c.cfg, nil, dead)
			atomic.StoreUint64(&a.lockBody(0)[lDepart], c.depart)
			a.closing.Store(true) // no surrogate goroutine: the step runs here, where a panic is caught
			if _, err := a.Recover("ticket-awn", func(s int) bool { return s == 0 }); err != nil {
				t.Fatal(err)
			}
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("surrogate step panicked: %v", p)
					}
				}()
				a.driveAdopted()
			}()
		})
	}
}

// TestRecoverSeatsFreesOnlyItsOwnCount: a dead process's journal holds a
// hapax-cr seat entry with the adopted bit (it had adopted the entry from a
// predecessor in its slot before it died). Recovery frees that entry in
// the dead journal without counting it among this process's free entries:
// it counted it, and an episode later ran without a journal entry, which
// recovery could not have released.
func TestRecoverSeatsFreesOnlyItsOwnCount(t *testing.T) {
	var dead []byte
	for _, w := range []uint64{packState(jSeated, kindCR, 0) | adopted, 0, 0, 0} {
		dead = binary.LittleEndian.AppendUint64(dead, w)
	}
	a, js := newJournaledArenaOf(t, Config{Slots: 4, Locks: 40}, nil, dead)
	atomic.StoreUint64(&a.lockBody(0)[lRestrict], 1) // the dead process's seat
	before := a.journals.free.Load()
	a.closing.Store(true) // no surrogate goroutines
	if _, err := a.Recover("hapax-cr", func(s int) bool { return s == 0 }); err != nil {
		t.Fatal(err)
	}
	a.closing.Store(false)
	if after := a.journals.free.Load(); after != before {
		t.Fatalf("this process's free entries: %d before Recover, %d after", before, after)
	}
	if s := atomic.LoadUint64(&js[1][0]); s != jFree {
		t.Fatalf("the dead journal's seat entry is %#x, not free", s)
	}
	for i := 1; i <= len(js[0])/journalEntryWords; i++ {
		m, _ := a.Mutex("hapax", i)
		if !m.TryLock() {
			t.Fatalf("TryLock %d failed", i)
		}
		if e, _ := a.findEpisode(i, kindHapax, atomic.LoadUint64(&a.lockBody(i)[lHolder])); !e.ok() {
			t.Fatalf("lock %d held without a journal entry", i)
		}
	}
}

// TestForeignEntriesDropped: entries of a kind the algorithm in use never
// writes, adopted with this process's slot or left by a dead process, are
// damage: Recover frees them rather than have a surrogate step another
// algorithm's procedure on the lock's words (FuzzRecoverJournal found a
// ticket-awn entry on a tidex lock breaking a live TryLock's Unlock).
func TestForeignEntriesDropped(t *testing.T) {
	entry := func(phase, kind uint8, lock int, value uint64) []byte {
		var b []byte
		for _, w := range []uint64{packState(phase, kind, lock), value, 0, 0} {
			b = binary.LittleEndian.AppendUint64(b, w)
		}
		return b
	}
	a, journals := newJournaledArena(t, 4, entry(jQueued, kindTicket, 0, 3), entry(jArriving, kindHapax, 0, 9))
	if _, err := a.Recover("tidex", func(slot int) bool { return slot == 0 }); err != nil {
		t.Fatal(err)
	}
	for slot, j := range journals {
		if s := atomic.LoadUint64(&j[0]); s != jFree {
			t.Errorf("journal %d: the foreign entry is %#x after Recover, want free", slot, s)
		}
	}
	if got, want := a.journals.free.Load(), int64(len(journals[0])/journalEntryWords); got != want {
		t.Errorf("%d of this process's entries free after Recover, want all %d", got, want)
	}
}

// TestRecoverSeatsDuringLiveUnlock: a hapax-cr Unlock gives its seat back,
// then ends its seat entry. A recovery pass in between must not count the
// entry as a live seat and then free a dead process's seat entry without
// giving its seat back: the count would stay one too high for good, and
// with as many leaked seats as cores every Lock would wait out
// crPatience. The steps are run here one by one.
func TestRecoverSeatsDuringLiveUnlock(t *testing.T) {
	a, journals := newJournaledArena(t, 1, nil, nil)
	defer a.Close()
	m, _ := a.Mutex("hapax-cr", 0)
	l := m.(*restricted)
	b := a.lockBody(0)
	gen := atomic.LoadUint64(&b[lGen])
	dead := entry{journals[1][:journalEntryWords]} // a dead process, seated
	dead.set(jSeated, kindCR, 0, 0, 0, gen)
	atomic.AddUint64(&b[lRestrict], 1)
	m.Lock()
	if got := crState(atomic.LoadUint64(&b[lRestrict])).seated(); got != 2 {
		t.Fatalf("seated %d, want 2", got)
	}
	// Unlock's steps, with a recovery pass between the seat and the entry.
	if err := l.inner.Unlock(); err != nil {
		t.Fatal(err)
	}
	e, own := a.findSeat(0)
	leavingSeat(e)
	l.leaveSeat(entry{})
	done := make(chan error, 1)
	go func() {
		_, err := a.Recover("hapax-cr", func(s int) bool { return s == 0 })
		done <- err
	}()
	time.Sleep(5 * time.Millisecond) // the pass sees the seat CAS in flight, and looks again
	a.endEpisode(e, own)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := a.Recover("hapax-cr", func(s int) bool { return s == 0 }); err != nil {
		t.Fatal(err)
	}
	if got := crState(atomic.LoadUint64(&b[lRestrict])).seated(); got != 0 {
		t.Fatalf("nobody holds a seat, yet the count says %d seated", got)
	}
}

// TestSurrogateSeesEpisodesAdoptedAsItStops: Recover adopts episodes and
// leaves them to the running surrogate. A surrogate that has just found
// nothing left must look again before it stops, or the new episodes wait
// for the next Recover: it stops only if no Recover came since its look.
func TestSurrogateSeesEpisodesAdoptedAsItStops(t *testing.T) {
	a, journals := newJournaledArena(t, 1, nil, nil)
	defer a.Close()
	own := journals[0]
	voided := func(i int) { // an adopted episode of a past generation: finished at its first step
		w := own[i*journalEntryWords:]
		atomic.StoreUint64(&w[3], 99)
		atomic.StoreUint64(&w[0], packState(jQueued, kindHapax, 0)|adopted)
	}
	a.journals.free.Add(-2) // the two entries below are not free
	voided(0)
	injected := make(chan struct{})
	var once sync.Once
	// Atomic: surrogates of earlier tests' arenas, never closed, may
	// still read it (the race detector caught one).
	idle := func() {
		once.Do(func() {
			voided(1)
			a.startSurrogate() // as Recover does after adopting
			close(injected)
		})
	}
	testHookSurrogateIdle.Store(&idle)
	stopped := func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return !a.surrogates
	}
	defer func() {
		testutil.WaitFor(5*time.Second, stopped) // before the hook goes: the surrogate reads it
		testHookSurrogateIdle.Store(nil)
	}()
	a.startSurrogate()
	<-injected
	if !testutil.WaitFor(time.Second, func() bool { return atomic.LoadUint64(&own[journalEntryWords]) == jFree }) {
		t.Fatalf("the episode adopted as the surrogate stopped is still %#x", atomic.LoadUint64(&own[journalEntryWords]))
	}
}

// TestSweepReturnsOnlyUnfindableNodes: Recover's sweep gives back a node a
// gone process holds only when nothing names it and its queue has not been
// reset since it was stamped. Each node below breaks one condition, but
// for the first, which meets them all.
func TestSweepReturnsOnlyUnfindableNodes(t *testing.T) {
	const locks, nodes = 2, 9
	a, journals := newJournaledArenaOf(t, Config{Slots: 4, Locks: locks, AWNNodes: nodes}, nil, nil)
	defer a.Close()
	dead := gonePid(t)
	gen := uint64(5)
	for i := range locks {
		atomic.StoreUint64(&a.lockBody(i)[lGen], gen)
	}
	cases := []struct {
		why   string
		owner uint64
		lock  int // stamped lock index, -1: unstamped
		gen   uint64
		name  func(node uint32)
		back  bool
	}{
		{why: "unnamed, in its stamped generation", owner: dead, gen: gen, back: true},
		{why: "named in the array", owner: dead, gen: gen, name: func(n uint32) { atomic.StoreUint32(a.awnArray(0).at(3), n) }},
		{why: "stamped in a generation a reset voided", owner: dead, gen: gen - 1},
		{why: "unstamped", owner: dead, lock: -1, gen: gen},
		{why: "named by an alock tail", owner: dead, lock: 1, gen: gen, name: func(n uint32) {
			atomic.StoreUint64(&a.lockBody(1)[lWord], tailWord(gen, uint64(n)))
		}},
		{why: "named as a predecessor in a dead process's alock entry", owner: dead, gen: gen, name: func(n uint32) {
			journals[1][0] = jQueued | uint64(kindALock)<<8 | 1<<16
			journals[1][2] = uint64(n)
		}},
		{why: "voided", owner: dead | voidedNode, gen: gen},
		{why: "in use by a live process", owner: uint64(os.Getpid()), gen: gen},
		{why: "pooled by a dead process (get reclaims it)", owner: dead | idleNode, gen: gen},
	}
	for i, c := range cases {
		n := uint32(i + 1)
		atomic.StoreUint64(a.awnNode(n).owner, c.owner)
		if c.lock >= 0 {
			a.stampNode(n, c.lock, c.gen)
		}
		if c.name != nil {
			c.name(n)
		}
	}
	atomic.StoreUint64(&a.w[hAWNCursor], nodes)
	var r Recovery
	a.returnUnfindableNodes(&r)
	for i, c := range cases {
		got := atomic.LoadUint64(a.awnNode(uint32(i+1)).owner) == returnedNode
		if got != c.back {
			t.Errorf("node %d (%s): given back %v, want %v", i+1, c.why, got, c.back)
		}
	}
	if r.Nodes != 1 {
		t.Errorf("Recovery.Nodes = %d, want 1", r.Nodes)
	}
}

// TestTicketSurrogateGivingUpVoidsTheNode: a surrogate taking a dead
// ticket-awn waiter's turn, whose releaser chose its node (egress negative)
// but has not set the flag, waits a bounded number of looks, then releases
// without giving the node back, since that store may still land. Its
// release withdraws the node from the array, so it marks the node voided
// first: the sweep would otherwise give back a node a releaser may still
// write to.
func TestTicketSurrogateGivingUpVoidsTheNode(t *testing.T) {
	a, journals := newJournaledArena(t, 1, nil, nil)
	defer a.Close()
	l := openTicketAWN(a, 0).(*ticketAWN)
	b := a.lockBody(0)
	gen := atomic.LoadUint64(&b[lGen])
	// Ticket 0's holder released to ticket 1's node and stalled before the
	// node's flag; ticket 1's waiter is dead.
	atomic.StoreUint64(&b[lArrive], 2)
	atomic.StoreUint64(&b[lDepart], ^uint64(0)) // -1
	n := a.awnNodes.get()
	dead := gonePid(t)
	atomic.StoreUint64(a.awnNode(n).owner, dead)
	a.stampNode(n, 0, gen)
	atomic.StoreUint32(a.awnNode(n).mine, 0)
	atomic.StoreUint32(l.waiters.at(1), n)
	e := entry{journals[0][:journalEntryWords]}
	e.set(jQueued|adopted, kindTicket, 0, 1, 0, gen)
	done := false
	for range ticketFlagLooks + 2 {
		if done = a.stepTicket(e, atomic.LoadUint64(&e.w[0]), 0, 1, gen); done {
			break
		}
	}
	if !done {
		t.Fatal("the surrogate never gave up waiting for the flag")
	}
	if egress := l.egress(); pos(egress) != 2 {
		t.Fatalf("egress %d after the surrogate's release, want ±2", egress)
	}
	if nd := atomic.LoadUint32(l.waiters.at(1)); nd != 0 {
		t.Fatalf("the array still names node %d: the test cannot tell", nd)
	}
	var r Recovery
	a.returnUnfindableNodes(&r)
	if owner := atomic.LoadUint64(a.awnNode(n).owner); owner != dead|voidedNode {
		t.Fatalf("node owner %#x: given back or left unmarked, though the stalled releaser may still set its flag", owner)
	}
}

// TestResetWaitsForTheSurrogatesStep: a Reset while the surrogate is in
// the middle of taking a dead episode's turn (it has seen its turn come
// and not yet released) must not let that release land in the lock's new
// generation. Here a dead ticket-awn holder is adopted; the surrogate
// stops between seeing egress reach its ticket and releasing; Reset frees
// the lock and a new holder takes it. The surrogate's stale release then
// read egress afresh and moved it past the new holder's ticket: the next
// TryLock got in beside the holder. (It is how `mapctl recover
// --reset-locks` runs: the open adopts the dead's episodes and starts the
// surrogate, then Reset.)
func TestResetWaitsForTheSurrogatesStep(t *testing.T) {
	a, journals := newJournaledArena(t, 1, nil, nil)
	defer closeWithin(t, a, 5*time.Second)
	m, err := a.Mutex("ticket-awn", 0)
	if err != nil {
		t.Fatal(err)
	}
	b := a.lockBody(0)
	// Ticket 0 is held by the dead process (slot 1).
	atomic.StoreUint64(&b[lArrive], 1)
	atomic.StoreUint64(&b[lHolder], 1)
	dead := entry{journals[1][:journalEntryWords]}
	dead.set(jQueued, kindTicket, 0, 0, 0, atomic.LoadUint64(&b[lGen]))

	inTurn, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	turn := func() {
		once.Do(func() { close(inTurn); <-proceed })
	}
	testHookTicketTurn.Store(&turn)
	defer testHookTicketTurn.Store(nil)
	if _, err := a.Recover("ticket-awn", func(slot int) bool { return slot == 0 }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inTurn:
	case <-time.After(5 * time.Second):
		t.Fatal("the surrogate never took the dead holder's turn")
	}
	resetDone := make(chan error, 1)
	go func() { resetDone <- a.Reset(0) }()
	held := false
	select {
	case err := <-resetDone:
		// Reset did not wait for the step: the lock is free in the new
		// generation while the surrogate is about to release.
		if err != nil {
			t.Fatal(err)
		}
		if !m.TryLock() {
			t.Fatal("lock not free after Reset")
		}
		held = true
		close(proceed)
	case <-time.After(200 * time.Millisecond):
		close(proceed)
		if err := <-resetDone; err != nil {
			t.Fatal(err)
		}
	}
	if !held {
		if err := m.LockTimeout(time.Second); err != nil {
			t.Fatalf("after Reset: %v", err)
		}
	}
	// Let the surrogate finish its step.
	if !testutil.WaitFor(5*time.Second, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return !a.surrogates
	}) {
		t.Fatal("the surrogate never stopped")
	}
	if m.TryLock() {
		t.Fatalf("a second holder got the lock (egress %d, ingress %d): the surrogate released into the new generation",
			int64(atomic.LoadUint64(&b[lDepart])), atomic.LoadUint64(&b[lArrive]))
	}
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := m.LockTimeout(time.Second); err != nil {
		t.Fatalf("the lock after the holder's Unlock: %v", err)
	}
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// TestSweepKeepsANodeAResetClearErased: a ticket-awn Reset frees the lock
// (egress := ingress) before it clears the array, and waiters of the new
// generation may queue in between. One far back publishes its node, the
// releaser of the ticket before it reads that node from the array and
// stores egress -t, and stalls before the node's flag; the clear then
// erases the node, and its waiter dies. Nothing names the node, its stamp
// is of the current generation, its owner is gone: the sweep must still
// keep it, since the stalled releaser's flag store may land at any time
// (the surrogate, finding no node in the array, releases without waiting
// for that store and cannot void the node).
func TestSweepKeepsANodeAResetClearErased(t *testing.T) {
	a, journals := newJournaledArenaOf(t, Config{Slots: 4, Locks: 1, AWNNodes: 1}, nil, nil)
	m, err := a.Mutex("ticket-awn", 0)
	if err != nil {
		t.Fatal(err)
	}
	l := m.(*ticketAWN)
	dead := gonePid(t)
	m.Lock() // ticket 0: its holder "dies"; the Reset frees the lock

	stall, stalled := make(chan struct{}), make(chan struct{})
	var once sync.Once
	testHookBetweenStores = func() {
		if l.egress() < 0 { // a node handover: stop before the flag store
			once.Do(func() { close(stalled); <-stall })
		}
	}
	released := false
	defer func() {
		if !released {
			close(stall)
		}
		closeWithin(t, a, 5*time.Second)
		testHookBetweenStores = nil
	}()

	var node uint32
	var far int64
	errB := make(chan error, 1)
	var beforeClear func()
	beforeClear = func() {
		testHookResetBeforeClear.Store(nil)
		gen := atomic.LoadUint64(l.gen)                // the new generation
		ingress, ok := holdAndQueueNext(t, m, l, errB) // ticket I+1's release stalls
		if !ok {
			return
		}
		// Ticket I+2, of another process, far back: its entry, then its
		// wait, which publishes its node; the process dies waiting (the
		// wait times out, and nothing runs after it).
		far = ingress + 2
		atomic.AddUint64(l.arrive, 1)
		entry{journals[1][:journalEntryWords]}.set(jQueued, kindTicket, 0, uint64(far), 0, gen)
		w := newWaiter(20 * time.Millisecond)
		if o := l.wait(far, gen, &node, &w); o != timedOut || node == 0 || atomic.LoadUint32(l.waiters.at(far)) != node {
			t.Errorf("ticket I+2's wait: outcome %v, node %d: the test cannot tell", o, node)
			return
		}
		if err := m.Unlock(); err != nil { // I+1 holds, and releases to I+2's node
			t.Error(err)
			return
		}
		select {
		case <-stalled:
		case <-time.After(5 * time.Second):
			t.Error("ticket I+1's release never chose the node")
		}
	}
	testHookResetBeforeClear.Store(&beforeClear)
	defer testHookResetBeforeClear.Store(nil)
	if err := a.Reset(0); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}
	if nd := atomic.LoadUint32(l.waiters.at(far)); nd != 0 || l.egress() != -far {
		t.Fatalf("array %d, egress %d: the test cannot tell", nd, l.egress())
	}
	atomic.StoreUint64(a.awnNode(node).owner, dead) // its process dies
	r, err := a.Recover("ticket-awn", func(slot int) bool { return slot == 0 })
	if err != nil {
		t.Fatal(err)
	}
	owner := atomic.LoadUint64(a.awnNode(node).owner)
	reused := false
	if owner == returnedNode && a.awnNodes.get() == node {
		atomic.StoreUint32(a.awnNode(node).mine, 0) // a new waiter, about to publish it
		reused = true
	}
	released = true
	close(stall)
	if err := <-errB; err != nil {
		t.Fatalf("ticket I+1: %v", err)
	}
	if owner == returnedNode {
		t.Fatalf("the sweep gave node %d back (%+v) while ticket %d's releaser had yet to set its flag; drawn again: %v, whose flag that late store set to %d with no handover",
			node, r, far-1, reused, atomic.LoadUint32(a.awnNode(node).mine))
	}
}

// TestSurrogateGivingUpVoidsANodeWhosePidWasReused: as
// TestTicketSurrogateGivingUpVoidsTheNode, but the dead waiter's pid has
// been taken by another process when the surrogate gives up waiting for the
// stalled releaser's flag store. The node is still the dead waiter's, and
// that store may still land: once the other process is gone too, the sweep
// must not give it back.
func TestSurrogateGivingUpVoidsANodeWhosePidWasReused(t *testing.T) {
	a, journals := newJournaledArena(t, 1, nil, nil)
	defer a.Close()
	l := openTicketAWN(a, 0).(*ticketAWN)
	b := a.lockBody(0)
	gen := atomic.LoadUint64(&b[lGen])
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Skipf("cannot start a process to take the pid: %v", err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	// Ticket 0 holds, 1 is next; ticket 2's waiter publishes its node in
	// its wait, which ends there: its process dies.
	atomic.StoreUint64(&b[lArrive], 3)
	var n uint32
	w := newWaiter(20 * time.Millisecond)
	if o := l.wait(2, gen, &n, &w); o != timedOut || n == 0 || atomic.LoadUint32(l.waiters.at(2)) != n {
		t.Fatalf("ticket 2's wait: outcome %v, node %d: the test cannot tell", o, n)
	}
	// Its pid is now another process's. Ticket 1's holder released to the
	// node (egress -2) and stalled before its flag.
	atomic.StoreUint64(a.awnNode(n).owner, uint64(other.Process.Pid))
	atomic.StoreUint64(&b[lDepart], ^uint64(1)) // -2
	e := entry{journals[0][:journalEntryWords]}
	e.set(jQueued|adopted, kindTicket, 0, 2, 0, gen)
	done := false
	for range ticketFlagLooks + 2 {
		if done = a.stepTicket(e, atomic.LoadUint64(&e.w[0]), 0, 2, gen); done {
			break
		}
	}
	if !done || atomic.LoadUint32(l.waiters.at(2)) != 0 {
		t.Fatal("the surrogate never gave up waiting for the flag: the test cannot tell")
	}
	_ = other.Process.Kill() // the process that took the pid exits too
	_ = other.Wait()
	var r Recovery
	a.returnUnfindableNodes(&r)
	if owner := atomic.LoadUint64(a.awnNode(n).owner); owner == returnedNode {
		t.Fatalf("node %d given back, though the stalled releaser may still set its flag", n)
	}
}

// TestSurrogateReturnsOnlyTheNodeItWithdrew: a surrogate that takes a dead
// ticket-awn waiter's turn gives the node back after its release has
// withdrawn it from the array. In between, the node is named nowhere, so
// another process's Recover may sweep it back first, and a waiter drawing
// it may publish it in another lock's array and die there. The surrogate's
// give-back must not then take that waiter's node, which its array still
// names (its own surrogate hands it over later, and a new waiter would
// share it meanwhile).
func TestSurrogateReturnsOnlyTheNodeItWithdrew(t *testing.T) {
	a, journals := newJournaledArenaOf(t, Config{Slots: 4, Locks: 2, AWNNodes: 1}, nil, nil)
	l := openTicketAWN(a, 0).(*ticketAWN)
	other := openTicketAWN(a, 1).(*ticketAWN)
	b := a.lockBody(0)
	gen := atomic.LoadUint64(&b[lGen])
	// Two dead owners the test can tell apart: the kernel hands out pids
	// in turn, so a second child has the same pid only across a wrap.
	deadW, deadQ := gonePid(t), gonePid(t)
	for tries := 0; deadQ == deadW; tries++ {
		if tries == 10 {
			t.Fatalf("ten children in a row had pid %d", deadW)
		}
		deadQ = gonePid(t)
	}
	// Ticket 0 holds, 1 is next; ticket 2's waiter publishes its node in
	// its wait, which ends there: its process dies. Ticket 1's holder then
	// released to the node, and the flag store landed.
	atomic.StoreUint64(&b[lArrive], 3)
	var n uint32
	w := newWaiter(20 * time.Millisecond)
	if o := l.wait(2, gen, &n, &w); o != timedOut || n == 0 {
		t.Fatalf("ticket 2's wait: outcome %v, node %d: the test cannot tell", o, n)
	}
	atomic.StoreUint64(a.awnNode(n).owner, deadW)
	atomic.StoreUint64(&b[lDepart], ^uint64(1)) // -2
	atomic.StoreUint32(a.awnNode(n).mine, 1)
	e := entry{journals[0][:journalEntryWords]}
	e.set(jQueued|adopted, kindTicket, 0, 2, 0, gen)

	const farQ = 7
	var swept Recovery
	var once sync.Once
	testHookBetweenStores = func() { // in the surrogate's release, the node withdrawn
		once.Do(func() {
			a.returnUnfindableNodes(&swept) // another process's Recover
			q := a.awnNodes.get()           // a waiter of lock 1 draws it
			if q != n {
				return
			}
			a.stampNode(q, 1, atomic.LoadUint64(&a.lockBody(1)[lGen]))
			atomic.StoreUint32(a.awnNode(q).mine, 0)
			atomic.StoreUint32(other.waiters.at(farQ), q)
			atomic.StoreUint64(a.awnNode(q).owner, deadQ) // and dies waiting
		})
	}
	defer func() { testHookBetweenStores = nil }()
	if !a.stepTicket(e, atomic.LoadUint64(&e.w[0]), 0, 2, gen) {
		t.Fatal("the surrogate did not take the turn")
	}
	if swept.Nodes != 1 || atomic.LoadUint32(other.waiters.at(farQ)) != n {
		t.Fatalf("swept %+v, lock 1's array %d: the test cannot tell", swept, atomic.LoadUint32(other.waiters.at(farQ)))
	}
	if owner := atomic.LoadUint64(a.awnNode(n).owner); owner != deadQ {
		t.Fatalf("node %d, which lock 1's array names for a dead waiter, has owner %#x: the surrogate of lock 0 gave it back", n, owner)
	}
	a.Close()
}
