package ipc

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// Errors. Each is matched with errors.Is.
var (
	// ErrTimeout: a LockTimeout gave up before the lock was granted.
	ErrTimeout = errors.New("ipc: lock wait timed out")
	// ErrNotLocked: Unlock found the lock free or not held by this
	// episode's context (a double unlock, or an unlock without a lock).
	ErrNotLocked = errors.New("ipc: unlock of a lock that is not held")
	// ErrHeldElsewhere: Unlock found the lock held where this algorithm
	// does not let this process release it (alock: by the other cohort;
	// see the package doc). The lock stays held.
	ErrHeldElsewhere = errors.New("ipc: the lock is held where this process may not release it")
	// ErrUnknownAlgorithm: a name that Algorithms does not list.
	ErrUnknownAlgorithm = errors.New("ipc: unknown lock algorithm")
	// ErrBadConfig: an arena configuration or lock index out of range.
	ErrBadConfig = errors.New("ipc: bad arena configuration")
	// ErrNotArena: the words handed to Attach do not hold a formatted arena
	// of that size.
	ErrNotArena = errors.New("ipc: not a lock arena")
)

// Config sizes an arena.
type Config struct {
	// Slots is the size of the shared waiting array, a power of two from 2
	// to 1<<20; 0 means DefaultSlots. Small arrays are for tests that force
	// collisions.
	Slots int
	// Locks is how many locks the arena holds, from 0 to MaxLocks.
	Locks int
	// AWNWaiters is the length of each lock's array of waiting nodes for
	// ticket-awn (the seed's maxArrayWaiters), from 2 to MaxAWNWaiters: up
	// to AWNWaiters-2 waiters beyond the next one wait on their own node;
	// the rest wait on the lock's egress word. 0 means DefaultAWNWaiters;
	// negative means no arrays (ticket-awn then runs as a plain ticket
	// lock), which saves a cache line per lock for other algorithms.
	AWNWaiters int
	// AWNNodes is the size of the shared table of ticket-awn waiting nodes,
	// one cache line each, handed out to processes as they need them and
	// reused within a process. 0 means DefaultAWNNodes; negative means
	// none. A waiter that finds the table used up waits on egress instead.
	AWNNodes int
}

const (
	// DefaultSlots is the waiting array size the Hapax paper uses: enough
	// that waiters on a machine rarely share a slot.
	DefaultSlots = 4096
	// MaxLocks bounds Config.Locks (64 MiB of lock bodies).
	MaxLocks = 1 << 20
	// DefaultAWNWaiters fills one cache line of 32-bit node indices.
	DefaultAWNWaiters = 16
	// MaxAWNWaiters bounds Config.AWNWaiters.
	MaxAWNWaiters = 1024
	// DefaultAWNNodes is 64 KiB of nodes: far more waiters than a machine
	// runs at once.
	DefaultAWNNodes = 1024
	// MaxAWNNodes bounds Config.AWNNodes.
	MaxAWNNodes = 1 << 20

	arenaMagic = 0x31414e4552414350 // "PCARENA1", little-endian

	lineWords = 8 // one 64-byte cache line
	slotWords = 2 // value, then seq (low half) and sleepers (high half)
	lockWords = lineWords

	// Header words.
	hMagic     = 0
	hSlots     = 1
	hLocks     = 2
	hHapax     = 3 // hapax block allocator: blocks handed out so far
	hTidex     = 4 // Tidex id allocator: ids handed out so far
	hAWNArrays = 5 // ticket-awn: waiters per lock array (0 in files from before it)
	hAWNNodes  = 6 // ticket-awn: nodes in the node table
	hAWNCursor = 7 // ticket-awn: nodes handed out so far
	slotsStart = lineWords
)

// Lock body words. Arrive, Depart and the holder's context share one line on
// purpose: an arrival touches both, and the owner writes the context right
// after acquiring, while the line is still its own.
const (
	lArrive   = 0
	lDepart   = 1
	lHolder   = 2 // the owning episode's value, for Unlock
	lDepartQ  = 3 // low half: bumped when Depart changes and someone sleeps; high half: sleepers
	lGen      = 4 // bumped when recovery resets the lock; waiters restart
	lWord     = 5 // low half: the ttas word
	lWaited   = 6 // 1 if the owner had to wait
	lRestrict = 7 // concurrency restriction state (restrict.go)
)

// recordAlgorithm notes the algorithm this arena opened lock index with,
// which Reset needs (an alock is reset otherwise than the others). It is
// kept in process memory only: a mark in the lock's words would have to
// move its generation when set, voiding the queue of a lock in use.
func (a *Arena) recordAlgorithm(index int, algorithm string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.opened == nil {
		a.opened = make(map[int]string)
	}
	a.opened[index] = algorithm
}

// normalized applies the defaults; the result holds literal sizes (0 = none).
func (c Config) normalized() (Config, error) {
	if c.Slots == 0 {
		c.Slots = DefaultSlots
	}
	switch {
	case c.AWNWaiters == 0:
		c.AWNWaiters = DefaultAWNWaiters
	case c.AWNWaiters < 0:
		c.AWNWaiters = 0
	}
	switch {
	case c.AWNNodes == 0:
		c.AWNNodes = DefaultAWNNodes
	case c.AWNNodes < 0:
		c.AWNNodes = 0
	}
	return c.validate()
}

// validate checks literal sizes, as normalized returns them or as an
// arena's header holds them.
func (c Config) validate() (Config, error) {
	if c.AWNWaiters != 0 && (c.AWNWaiters < 2 || c.AWNWaiters > MaxAWNWaiters) {
		return c, fmt.Errorf("%w: %d ticket-awn waiters per lock; want 2 to %d", ErrBadConfig, c.AWNWaiters, MaxAWNWaiters)
	}
	if c.AWNNodes < 0 || c.AWNNodes > MaxAWNNodes {
		return c, fmt.Errorf("%w: %d ticket-awn nodes; want 0 to %d", ErrBadConfig, c.AWNNodes, MaxAWNNodes)
	}
	if c.Slots < 2 || c.Slots > 1<<20 || bits.OnesCount(uint(c.Slots)) != 1 {
		return c, fmt.Errorf("%w: %d waiting slots; want a power of two from 2 to %d", ErrBadConfig, c.Slots, 1<<20)
	}
	if c.Locks < 0 || c.Locks > MaxLocks {
		return c, fmt.Errorf("%w: %d locks; want 0 to %d", ErrBadConfig, c.Locks, MaxLocks)
	}
	return c, nil
}

func (c Config) locksStart() int {
	n := slotsStart + c.Slots*slotWords
	return (n + lineWords - 1) / lineWords * lineWords
}

// awnArrayWords is the size of one lock's array of node indices (32 bits
// each), in whole cache lines.
func (c Config) awnArrayWords() int {
	return (c.AWNWaiters*4 + 63) / 64 * lineWords
}

func (c Config) awnArraysStart() int { return c.locksStart() + c.Locks*lockWords }

func (c Config) awnNodesStart() int { return c.awnArraysStart() + c.Locks*c.awnArrayWords() }

// words is the size of an arena with these literal sizes.
func (c Config) words() int { return c.awnNodesStart() + c.AWNNodes*lineWords }

// Words is how many 64-bit words an arena with this configuration needs.
func (c Config) Words() (int, error) {
	c, err := c.normalized()
	if err != nil {
		return 0, err
	}
	return c.words(), nil
}

// Arena is the shared lock memory of one file: the hapax block allocator,
// the waiting array and the lock bodies. Its methods are safe for concurrent
// use; every access to the words is atomic.
type Arena struct {
	w     []uint64
	cfg   Config
	locks int // offset of lock 0
	mask  uint64

	hapaxCursors sync.Pool // *cursor: per-P blocks of hapax values
	tidexIDs     idPool
	awnNodes     nodePool

	// awnNodeHandovers counts ticket-awn acquisitions in this process that
	// were handed over through a waiting node rather than through egress.
	awnNodeHandovers atomic.Int64

	// Goroutines finishing the episodes of timed-out waiters; Close stops
	// them before the caller unmaps the words.
	closing     atomic.Bool
	mu          sync.Mutex
	idle        sync.Cond
	substitutes int
	// Cohort helpers waiting for a process-local lock (see
	// cohort.lockLocalUntil): Close waits for them only up to CloseWait,
	// since a holder may never unlock. finished: Close is done, and the
	// words may be gone; a helper that gets its lock later leaves them
	// alone.
	localWaiters int
	finished     bool
	cohorts      map[int]*cohortRecord // this process's half of cohort locks, by index

	journals   *journals // every process's episode journal; nil without SetJournals
	owner      uint32    // this process's journal slot + 1 (0 without journals): TTAS owner ids
	surrogates bool      // a goroutine is finishing adopted episodes (guarded by mu)
	// steps serializes the surrogate's steps with Reset: a step that has
	// seen a dead episode's turn come and then releases must not straddle
	// a Reset, or its release lands in the lock's new generation (on a
	// ticket lock, after a new holder: two holders).
	steps sync.Mutex
	// surrogateKicks counts startSurrogate calls (guarded by mu): the
	// surrogate stops only if none came since it last looked.
	surrogateKicks uint64

	alockBudgets [2]int32               // home, remote; zero means the defaults
	opened       map[int]string         // the algorithm this arena opened each lock with (Mutex)
	alockHomes   map[int]*alockLocal    // alock locks this arena is home of, by index
	turns        map[int][]*pendingTurn // timed-out waiters' turns substitutes wait out, by lock (turns.go)
	pendingTurns atomic.Int32           // how many turns there are: lockByTurn's look without mu
	alockHomeID  uint64                 // what an alock's home word holds when this arena is home (newALockHomeID)
}

// Close lets the goroutines that take the turns of timed-out waiters
// finish them, for up to CloseWait, then stops the rest and waits for them
// (at most one sleep, wait.MaxNap), so that the caller may unmap the words.
// A turn not taken by then stays in its lock's queue as if this process had
// died waiting: with journals (SetJournals) a survivor's Recover takes it
// once this process has left; without them the lock needs Reset before
// anyone behind it gets in. A cohort lock's helper that waits for the
// process-local lock for a timed-out LockTimeout is waited for up to
// CloseWait too, not longer: a holder may never unlock. Should it get the
// local lock after Close, it releases only that, and a global lock kept
// for it stays held, as does any lock held at Close (with journals, until
// a process that takes this one's journal slot finishes its episodes, as
// a dead process's: SetJournals, ReleaseInherited). Its nodes of the ticket-awn and alock table go back to the file
// for other processes. Locks must not be used after Close.
func (a *Arena) Close() {
	a.mu.Lock()
	if a.substitutes > 0 || a.localWaiters > 0 {
		t := time.AfterFunc(CloseWait, func() {
			a.closing.Store(true)
			a.mu.Lock()
			a.idle.Broadcast()
			a.mu.Unlock()
		})
		for (a.substitutes > 0 || a.localWaiters > 0) && !a.closing.Load() {
			a.idle.Wait()
		}
		t.Stop()
	}
	a.closing.Store(true)
	for a.substitutes > 0 {
		a.idle.Wait()
	}
	a.finished = true
	a.releaseALockHomes()
	a.mu.Unlock()
	a.awnNodes.returnAll()
}

// CloseWait bounds how long Close lets pending turns of timed-out waiters
// complete.
var CloseWait = time.Second

// substitute runs take in a goroutine that Close can stop: it finishes the
// episode of a waiter that gave up. take must return once waiter.await
// reports expired.
func (a *Arena) substitute(take func(w *waiter)) {
	a.spawn(func() {
		w := newWaiter(-1)
		w.stop = &a.closing
		take(&w)
	})
}

// enter counts the caller among the goroutines Close waits for, unless
// Close has begun (false); leave counts it out. A goroutine that must not
// touch the shared words after Close enters before it does.
func (a *Arena) enter() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing.Load() {
		return false
	}
	a.substitutes++
	return true
}

// waitLocal counts a cohort helper in as waiting for a local lock;
// gotLocal counts it out once it has the lock and, if it must release
// what it got (touch), counts it among the goroutines Close waits for
// (leave then) unless Close is finished (false: leave the words alone).
func (a *Arena) waitLocal() {
	a.mu.Lock()
	a.localWaiters++
	a.mu.Unlock()
}

func (a *Arena) gotLocal(touch bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.localWaiters--
	a.idle.Broadcast()
	if !touch || a.finished {
		return false
	}
	a.substitutes++
	return true
}

func (a *Arena) leave() {
	a.mu.Lock()
	a.substitutes--
	a.idle.Broadcast()
	a.mu.Unlock()
}

// spawn runs fn in a goroutine that Close waits for, unless Close has
// begun: then nothing runs. The check and the count are made under one
// lock (enter), so Close never misses a goroutine it must wait for.
func (a *Arena) spawn(fn func()) {
	if !a.enter() {
		return
	}
	go func() {
		defer a.leave()
		fn()
	}()
}

// Format writes an empty arena into words, which must be zero and exactly
// cfg.Words() long. Only the creator of the file calls it, before any other
// process can see the words.
func Format(words []uint64, cfg Config) error {
	cfg, err := cfg.normalized()
	if err != nil {
		return err
	}
	if n := cfg.words(); len(words) != n {
		return fmt.Errorf("%w: %d words handed, %d needed", ErrBadConfig, len(words), cfg.words())
	}
	for i := range words {
		if atomic.LoadUint64(&words[i]) != 0 {
			return fmt.Errorf("%w: word %d is not zero", ErrBadConfig, i)
		}
	}
	atomic.StoreUint64(&words[hSlots], uint64(cfg.Slots))
	atomic.StoreUint64(&words[hLocks], uint64(cfg.Locks))
	atomic.StoreUint64(&words[hAWNArrays], uint64(cfg.AWNWaiters))
	atomic.StoreUint64(&words[hAWNNodes], uint64(cfg.AWNNodes))
	atomic.StoreUint64(&words[hMagic], arenaMagic)
	return nil
}

// Attach returns the arena formatted in words.
func Attach(words []uint64) (*Arena, error) {
	cfg, n, err := Measure(words)
	if err != nil {
		return nil, err
	}
	if n != len(words) {
		return nil, fmt.Errorf("%w: header says %d words, %d handed", ErrNotArena, n, len(words))
	}
	a := &Arena{w: words, cfg: cfg, locks: cfg.locksStart(), mask: uint64(cfg.Slots - 1), alockHomeID: newALockHomeID()}
	a.hapaxCursors.New = func() any { return new(cursor) }
	a.idle.L = &a.mu
	a.tidexIDs.arena = a
	a.awnNodes.arena = a
	return a, nil
}

// Measure reads the configuration of the arena whose header starts
// words (which may run on past the arena) and returns it with the arena's
// size in words, as Attach would check them: for a file whose own header,
// which records the configuration, is lost. The configuration holds
// literal sizes: 0 ticket-awn waiters or nodes is none, as in the header.
func Measure(words []uint64) (Config, int, error) {
	if len(words) < slotsStart || atomic.LoadUint64(&words[hMagic]) != arenaMagic {
		return Config{}, 0, ErrNotArena
	}
	slots, locks := atomic.LoadUint64(&words[hSlots]), atomic.LoadUint64(&words[hLocks])
	awnWaiters, awnNodes := atomic.LoadUint64(&words[hAWNArrays]), atomic.LoadUint64(&words[hAWNNodes])
	if slots > 1<<20 || locks > MaxLocks || awnWaiters > MaxAWNWaiters || awnNodes > MaxAWNNodes {
		return Config{}, 0, fmt.Errorf("%w: header says %d slots, %d locks, %d ticket-awn waiters, %d nodes", ErrNotArena, slots, locks, awnWaiters, awnNodes)
	}
	// The header holds literal sizes: 0 ticket-awn waiters is an arena
	// without arrays (as in files from before ticket-awn), not the default.
	cfg, err := Config{Slots: int(slots), Locks: int(locks), AWNWaiters: int(awnWaiters), AWNNodes: int(awnNodes)}.validate()
	if err != nil {
		return Config{}, 0, fmt.Errorf("%w: %v", ErrNotArena, err)
	}
	return cfg, cfg.words(), nil
}

// MendHeader rewrites the words of an arena's header that its
// configuration determines (its magic and sizes) where they differ from
// what cfg says, and returns how many it rewrote. It is for a file whose
// arena Attach refuses while the file records the configuration elsewhere:
// Format writes those words once and only Attach reads them, so processes
// already attached are unaffected. The allocation counters, where any
// value is legal, are left alone. ErrBadConfig if cfg is not a valid
// configuration of exactly len(words) words.
func MendHeader(words []uint64, cfg Config) (int, error) {
	cfg, err := cfg.normalized()
	if err != nil {
		return 0, err
	}
	if n := cfg.words(); len(words) != n {
		return 0, fmt.Errorf("%w: %d words handed, %d needed", ErrBadConfig, len(words), n)
	}
	n := 0
	// Magic last, as Format writes it: an arena is attachable only whole.
	for _, w := range [...]struct {
		at int
		v  uint64
	}{{hSlots, uint64(cfg.Slots)}, {hLocks, uint64(cfg.Locks)}, {hAWNArrays, uint64(cfg.AWNWaiters)}, {hAWNNodes, uint64(cfg.AWNNodes)}, {hMagic, arenaMagic}} {
		if atomic.LoadUint64(&words[w.at]) != w.v {
			atomic.StoreUint64(&words[w.at], w.v)
			n++
		}
	}
	return n, nil
}

// Config returns the arena's configuration.
func (a *Arena) Config() Config { return a.cfg }

// hapaxBlocks is how many blocks of hapax values the file has handed out.
// It only grows, across every process and reopen.
func (a *Arena) hapaxBlocks() uint64 { return atomic.LoadUint64(&a.w[hHapax]) }

// lockBody returns the words of lock i.
func (a *Arena) lockBody(i int) []uint64 {
	off := a.locks + i*lockWords
	return a.w[off : off+lockWords : off+lockWords]
}

func (a *Arena) checkIndex(i int) error {
	if i < 0 || i >= a.cfg.Locks {
		return fmt.Errorf("%w: lock %d of %d", ErrBadConfig, i, a.cfg.Locks)
	}
	return nil
}

// slot is one element of the waiting array.
type slot struct {
	value    *uint64
	seq      *uint32 // bumped by a writer that finds sleepers; the futex word
	sleepers *uint32
}

func (a *Arena) slotAt(i uint64) slot {
	off := slotsStart + int(i)*slotWords
	seq, sleepers := wait.Halves(&a.w[off+1])
	return slot{value: &a.w[off], seq: seq, sleepers: sleepers}
}

// toSlot maps an episode value and a lock's salt to a waiting slot. Unlike
// the paper, which keeps a thread on one slot for a whole block, it mixes
// every bit of the value: Go has no thread-local cursor that lives from Lock
// to Unlock, so two goroutines of one process can draw consecutive values of
// one block and queue back to back on one lock, and they must not share a
// slot. The salt is the lock's index, never an address, so every process
// computes the same slot.
func (a *Arena) toSlot(salt int, v uint64) slot {
	x := (v + uint64(salt+1)*0x9e3779b97f4a7c15) * 0xbf58476d1ce4e5b9
	x ^= x >> 31
	return a.slotAt(x & a.mask)
}

// signal tells sleepers on (seq, sleepers) that the value they watch has
// changed. The caller has already stored the value; the sleepers count is
// read after it, so either a sleeper sees the value or we see the sleeper.
func signal(seq, sleepers *uint32) {
	if atomic.LoadUint32(sleepers) != 0 {
		atomic.AddUint32(seq, 1)
		wait.WakeAll(seq)
	}
}
