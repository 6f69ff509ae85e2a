//go:build linux

package ipc

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

func restrictState(tf *testFile, i int) crState {
	return crState(atomic.LoadUint64(&tf.arena.lockBody(i)[lRestrict]))
}

// waitState polls until ok accepts the lock's restriction state.
func waitState(t *testing.T, tf *testFile, what string, ok func(crState) bool) {
	t.Helper()
	if !testutil.WaitFor(10*time.Second, func() bool { return ok(restrictState(tf, 0)) }) {
		s := restrictState(tf, 0)
		t.Fatalf("%s: state never got there: seated %d, arrival %d, serving %d", what, s.seated(), s.arrival(), s.serving())
	}
}

// TestRestrictionBoundsSeats: with the patience clock stopped, at most
// seats goroutines enter the inner lock; the rest wait outside and all get
// in as seats come free. (Admission order is not asserted: two waiters
// seated one after the other can swap on their way into the inner queue.)
func TestRestrictionBoundsSeats(t *testing.T) {
	saved := crPatience
	crPatience = time.Hour
	defer func() { crPatience = saved }()

	tf := openTestFile(t, createTestFile(t, Config{Locks: 1}))
	defer tf.close()
	holder := tf.mutex(t, "hapax-cr", 0)
	holder.Lock()
	seats := crSeats()
	const waiters = 8
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := tf.mutex(t, "hapax-cr", 0)
			m.Lock()
			admitted.Add(1)
			if err := m.Unlock(); err != nil {
				t.Error(err)
			}
		}()
		// Arrive one at a time, so that arrival order is known.
		want := uint64(g + 2)
		waitState(t, tf, "arrival", func(s crState) bool { return s.seated()+(s.arrival()-s.serving()) == want })
	}
	s := restrictState(tf, 0)
	if s.seated() != seats || s.arrival()-s.serving() != waiters+1-seats {
		t.Fatalf("seated %d, passive %d; want %d and %d", s.seated(), s.arrival()-s.serving(), seats, waiters+1-seats)
	}
	if err := holder.Unlock(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if admitted.Load() != waiters {
		t.Fatalf("%d of %d waiters admitted", admitted.Load(), waiters)
	}
	waitState(t, tf, "settle", func(s crState) bool { return s.seated() == 0 && !s.passive() })
}

// TestRestrictionPatience: a passive waiter gets in while seated goroutines
// keep the lock circulating and never leave a seat free.
func TestRestrictionPatience(t *testing.T) {
	tf := openTestFile(t, createTestFile(t, Config{Locks: 1}))
	defer tf.close()
	holder := tf.mutex(t, "hapax-cr", 0)
	holder.Lock()
	// Fill every other seat with waiters in the inner queue.
	var wg sync.WaitGroup
	for range crSeats() - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := tf.mutex(t, "hapax-cr", 0)
			m.Lock()
			m.Unlock()
		}()
	}
	waitState(t, tf, "seats full", func(s crState) bool { return s.seated() == crSeats() })
	late := tf.mutex(t, "hapax-cr", 0)
	got := make(chan error, 1)
	go func() { got <- late.LockTimeout(10 * time.Second) }()
	// The late waiter is passive; after its patience it enters the inner
	// queue although no seat came free.
	waitState(t, tf, "over capacity", func(s crState) bool { return s.seated() == crSeats()+1 && !s.passive() })
	holder.Unlock()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	late.Unlock()
	wg.Wait()
	waitState(t, tf, "settle", func(s crState) bool { return s.seated() == 0 && !s.passive() })
}

// TestRestrictionTimeoutsSettle: timeouts in both phases (outside, and in
// the inner queue) and trylocks give every seat and ticket back.
func TestRestrictionTimeoutsSettle(t *testing.T) {
	tf := openTestFile(t, createTestFile(t, Config{Locks: 1}))
	defer tf.close()
	var wg sync.WaitGroup
	var timeouts atomic.Int64
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := tf.mutex(t, "hapax-cr", 0)
			for i := range 2000 {
				switch {
				case i%5 == 0 && m.TryLock():
				case i%3 == 0:
					if m.LockTimeout(time.Duration(g%4)*20*time.Microsecond) != nil {
						timeouts.Add(1)
						continue
					}
				default:
					m.Lock()
				}
				criticalSection(tf.scratch)
				if i%100 == 0 {
					time.Sleep(100 * time.Microsecond) // a long holder makes waiters time out
				}
				if err := m.Unlock(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d timeouts", timeouts.Load())
	if timeouts.Load() == 0 {
		t.Fatal("no LockTimeout timed out: the test did not test timeouts")
	}
	m := tf.mutex(t, "hapax-cr", 0)
	m.Lock() // after every abandoned inner turn
	m.Unlock()
	waitState(t, tf, "settle", func(s crState) bool { return s.seated() == 0 && !s.passive() })
	if n := tf.scratch[scratchCounter]; tf.scratch[scratchPRNG] != replay(n) {
		t.Fatal("exclusion failed")
	}
}

// TestPatienceNeverOverflowsTheSeatCount: a passive head out of patience
// waits while the seat count is at its field's width. Taking a seat anyway
// would carry the count into the arrival ticket: a ticket nobody drew,
// whose turn never comes, and a seat count that reads 0.
func TestPatienceNeverOverflowsTheSeatCount(t *testing.T) {
	saved := crPatience
	crPatience = 0
	defer func() { crPatience = saved }()
	a := newMemoryArena(t, Config{Slots: 4, Locks: 1})
	m, err := a.Mutex("hapax-cr", 0)
	if err != nil {
		t.Fatal(err)
	}
	l := m.(*restricted)
	full := uint64(crSeatMask) | 1<<crSeatBits // every seat taken; ticket 0 drawn, and served
	atomic.StoreUint64(l.state, full)
	if !a.reserve(1, time.Time{}) {
		t.Fatal("reserve")
	}
	e := a.claim()
	w := newWaiter(20 * time.Millisecond)
	if o := l.waitPassive(&w, 0, atomic.LoadUint64(l.gen), false, e); o != timedOut {
		t.Errorf("the head of the passive queue, every seat taken: %v, want a timeout", o)
	}
	if s := atomic.LoadUint64(l.state); s != full {
		t.Errorf("state %#x, want %#x (seats %d, arrival %d, serving %d)", s, full, crState(s).seated(), crState(s).arrival(), crState(s).serving())
	}
}

// TestTryLockNeverOverflowsTheSeatCount: with every seat the field counts
// taken, a TryLock that wins the free inner lock gives it back and fails.
// Taking a seat anyway would carry the count into the arrival ticket.
func TestTryLockNeverOverflowsTheSeatCount(t *testing.T) {
	a := newMemoryArena(t, Config{Slots: 4, Locks: 1})
	m, err := a.Mutex("hapax-cr", 0)
	if err != nil {
		t.Fatal(err)
	}
	l := m.(*restricted)
	full := uint64(crSeatMask)
	atomic.StoreUint64(l.state, full)
	if m.TryLock() {
		t.Error("TryLock took a seat past the field's width")
	}
	if s := atomic.LoadUint64(l.state); s != full {
		t.Errorf("state %#x, want %#x (seats %d, arrival %d, serving %d)", s, full, crState(s).seated(), crState(s).arrival(), crState(s).serving())
	}
	atomic.StoreUint64(l.state, 0)
	if !m.TryLock() {
		t.Fatal("TryLock of the free lock: the inner lock was not given back")
	}
	_ = m.Unlock()
}

// TestRestrictionResetVoidsStalePassiveTickets: a passive waiter (ticket
// 0) reads the generation and is preempted; a Reset (recovery after the
// holder died) zeroes the state word; in the new generation a holder takes
// the seat and the next arrival queues with passive ticket 0 again. The
// stale waiter then reads the state word, finds "its" ticket 0 served and
// (its handle counting two seats) a seat free, and takes that turn: serving
// moves to 1. The new waiter, whose ticket 0 would never be served again,
// would then wait until its LockTimeout (a Lock, forever). So a waiter
// whose ticket is no longer between serving and arrival queues again. (The inner
// lock keeps the two holders apart either way.)
func TestRestrictionResetVoidsStalePassiveTickets(t *testing.T) {
	saved := crPatience
	crPatience = time.Hour // heads enter only on a free seat
	defer func() { crPatience = saved }()
	a := newMemoryArena(t, Config{Slots: 64, Locks: 1})
	defer closeWithin(t, a, 5*time.Second)
	open := func() *restricted {
		m, err := a.Mutex("hapax-cr", 0)
		if err != nil {
			t.Fatal(err)
		}
		l := m.(*restricted)
		l.seats = 1
		return l
	}
	hN, hS := open(), open()
	hN.Lock() // its process then dies holding it (and its seat)

	paused, resume := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	look := func() {
		if once.CompareAndSwap(false, true) {
			close(paused)
			<-resume
		}
	}
	testHookPassiveLook.Store(&look)
	defer testHookPassiveLook.Store(nil)
	errS := make(chan error, 1)
	go func() { // the stale waiter: passive ticket 0, stopped before it looks at the state word
		err := hS.LockTimeout(5 * time.Second)
		if err == nil {
			err = hS.Unlock()
		}
		errS <- err
	}()
	<-paused

	if err := a.Reset(0); err != nil {
		t.Fatal(err)
	}
	hN.Lock() // the new generation's holder: its seat
	errP := make(chan error, 1)
	go func() { // the new generation's passive ticket
		err := hN.LockTimeout(2 * time.Second)
		if err == nil {
			err = hN.Unlock()
		}
		errP <- err
	}()
	if !testutil.WaitFor(5*time.Second, func() bool {
		s := crState(atomic.LoadUint64(hN.state))
		return s.arrival()-s.serving() == 1
	}) {
		t.Fatal("the new arrival did not queue passively")
	}
	hS.seats = 2 // the stale waiter's handle sees a free seat
	close(resume)
	if !testutil.WaitFor(5*time.Second, func() bool { return crState(atomic.LoadUint64(hN.state)).seated() == 2 }) {
		t.Fatal("the stale waiter took no seat") // its own, or the new waiter's turn's
	}
	if err := hN.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := <-errP; err != nil {
		s := crState(atomic.LoadUint64(hN.state))
		t.Errorf("the new generation's passive waiter: %v (serving %d, arrival %d, seated %d)", err, s.serving(), s.arrival(), s.seated())
	}
	if err := <-errS; err != nil {
		t.Errorf("the stale waiter, after queueing again: %v", err)
	}
}

// TestRestrictionTicketDrawnInAReset: a passive waiter reads the
// generation a Reset has just moved and draws passive ticket 0 from the
// state word the Reset has yet to zero. Its generation being current, it
// then took ticket 0's turn in the zeroed word, which left the word
// serving 1 with arrival 0: the next passive waiter drew ticket 0 and was
// never served (until its LockTimeout; a Lock, forever). Now the first
// waiter, its ticket not between serving and arrival, queues again.
func TestRestrictionTicketDrawnInAReset(t *testing.T) {
	saved := crPatience
	crPatience = time.Hour // heads enter only on a free seat
	defer func() { crPatience = saved }()
	a := newMemoryArena(t, Config{Slots: 64, Locks: 1})
	defer closeWithin(t, a, 5*time.Second)
	m, err := a.Mutex("hapax-cr", 0)
	if err != nil {
		t.Fatal(err)
	}
	l := m.(*restricted)
	l.seats = 1
	m.Lock() // its process then dies holding it (and its seat)

	lockUnlock := func(ch chan<- error) {
		err := m.LockTimeout(2 * time.Second)
		if err == nil {
			err = m.Unlock()
		}
		ch <- err
	}
	errW := make(chan error, 1)
	testHookResetBumped = func() {
		testHookResetBumped = nil
		go lockUnlock(errW) // the new generation, the old word: a passive ticket
		if !testutil.WaitFor(5*time.Second, func() bool { return crState(atomic.LoadUint64(l.state)).arrival() == 1 }) {
			t.Error("the waiter did not draw a passive ticket")
		}
	}
	defer func() { testHookResetBumped = nil }()
	if err := a.Reset(0); err != nil {
		t.Fatal(err)
	}
	if err := <-errW; err != nil {
		s := crState(atomic.LoadUint64(l.state))
		t.Fatalf("the waiter that drew its ticket in the Reset: %v (serving %d, arrival %d, seated %d)", err, s.serving(), s.arrival(), s.seated())
	}

	m.Lock() // a holder and a passive waiter of the new generation
	drawn := crState(atomic.LoadUint64(l.state)).arrival()
	errP := make(chan error, 1)
	go lockUnlock(errP)
	if !testutil.WaitFor(5*time.Second, func() bool { return crState(atomic.LoadUint64(l.state)).arrival() != drawn }) {
		t.Fatal("the next arrival did not queue passively")
	}
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := <-errP; err != nil {
		s := crState(atomic.LoadUint64(l.state))
		t.Fatalf("the next passive waiter: %v (serving %d, arrival %d, seated %d)", err, s.serving(), s.arrival(), s.seated())
	}
}

// TestAStreakThatRanOutQueuesThoughItsDrawFails: a handle that has had its
// streak of admissions past a passive waiter queues behind it, and stays
// queued when the CAS that draws its ticket fails (another goroutine
// changed the state word meanwhile) and it looks again: looking again must
// not find a fresh streak and admit it past the waiter once more, or a
// goroutine passes a waiting ticket by a streak for every failed draw.
func TestAStreakThatRanOutQueuesThoughItsDrawFails(t *testing.T) {
	saved := crPatience
	crPatience = time.Hour
	defer func() { crPatience = saved }()
	tf := openTestFile(t, createTestFile(t, Config{Locks: 1}))
	defer tf.close()
	state := &tf.arena.lockBody(0)[lRestrict]

	holder := tf.mutex(t, "hapax-cr", 0)
	holder.Lock()
	// A passive waiter: its handle allows one seat, which the holder has.
	waiter := tf.mutex(t, "hapax-cr", 0).(*restricted)
	waiter.seats = 1
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		waiter.Lock()
		waiter.Unlock()
	}()
	waitState(t, tf, "a passive waiter", func(s crState) bool { return s.arrival() == 1 && s.serving() == 0 })

	// A handle with seats to spare whose streak is at its end: its next
	// admission past the waiter is the one it must yield. Before its draw,
	// another seat is taken, so that the draw's CAS fails.
	late := tf.mutex(t, "hapax-cr", 0).(*restricted)
	late.seats = 3
	late.streak.Store(crStreak - 1)
	var once sync.Once
	hook := func() { once.Do(func() { atomic.AddUint64(state, 1) }) }
	testHookBeforeDraw.Store(&hook)
	defer testHookBeforeDraw.Store(nil)
	go func() {
		defer wg.Done()
		late.Lock()
		late.Unlock()
	}()
	// Queued: a second ticket. Admitted past the waiter: a third seat.
	waitState(t, tf, "the late caller queued or seated", func(s crState) bool { return s.arrival() == 2 || s.seated() == 3 })
	s := restrictState(tf, 0)
	atomic.AddUint64(state, ^uint64(0)) // the seat the hook took
	holder.Unlock()
	wg.Wait()
	if s.arrival() != 2 {
		t.Fatalf("seated %d, tickets drawn %d: a caller whose streak ran out was admitted past a passive waiter after its draw failed", s.seated(), s.arrival())
	}
	waitState(t, tf, "settle", func(s crState) bool { return s.seated() == 0 && !s.passive() })
}

// TestTryLockKeepsToTheStreak: TryLock admits a handle past passive
// waiters only within its streak, as Lock does; then it fails while they
// wait, so a caller that only tries is no more unbounded than one that
// queues.
func TestTryLockKeepsToTheStreak(t *testing.T) {
	saved := crPatience
	crPatience = time.Hour
	defer func() { crPatience = saved }()
	tf := openTestFile(t, createTestFile(t, Config{Locks: 1}))
	defer tf.close()
	state := &tf.arena.lockBody(0)[lRestrict]

	// A passive waiter, kept outside by a seat taken in the word alone:
	// the inner lock stays free for TryLock.
	atomic.AddUint64(state, 1)
	waiter := tf.mutex(t, "hapax-cr", 0).(*restricted)
	waiter.seats = 1
	done := make(chan struct{})
	go func() {
		defer close(done)
		waiter.Lock()
		waiter.Unlock()
	}()
	waitState(t, tf, "a passive waiter", func(s crState) bool { return s.arrival() == 1 && s.serving() == 0 })

	m := tf.mutex(t, "hapax-cr", 0)
	wins := 0
	for range 4 * crStreak {
		if m.TryLock() {
			wins++
			if err := m.Unlock(); err != nil {
				t.Fatal(err)
			}
		}
	}
	atomic.AddUint64(state, ^uint64(0))
	<-done
	if wins >= crStreak {
		t.Fatalf("TryLock won %d times past a passive waiter; a streak is %d", wins, crStreak)
	}
	if wins == 0 {
		t.Fatal("TryLock never won on a free inner lock")
	}
	if !m.TryLock() {
		t.Fatal("TryLock fails once nobody waits")
	}
	m.Unlock()
}
