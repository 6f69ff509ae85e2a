package ipc

import (
	"os"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// ticketAWN is Ticket AWN, negative egress (Ramalhete and Correia): a
// ticket lock (ingress, egress) in which a waiter that is far back in the
// queue publishes a waiting node in the lock's array at its ticket modulo
// the array length, and waits on that node alone, so a handover disturbs
// one waiter, not all of them. The releaser of ticket t looks at slot t+1:
// if it finds a node it writes egress = -(t+1) and then the node's
// lockIsMine; otherwise egress = t+1. The sign tells the next waiter
// whether to trust egress or wait for its node, so the releaser's last
// write always lands before the node can be reused.
//
// Across processes, nodes are 1-based indices into a node table in the
// file (0 is no node); lockIsMine is the low half of the node's first word,
// so that a waiter can sleep on it with a futex, and the high half counts
// sleepers. A waiter resets lockIsMine before publishing its index, and
// returns the node to its process's pool only after it has seen 1 (or has
// seen egress turn positive for it, which means the releaser never looked).
// A node's second word is its owner (see nodePool).
//
// Lock body words: lArrive is ingress, lDepart is egress (two's complement),
// lHolder is the owner's ticket + 1 (for Unlock), lDepartQ lets waiters on
// egress sleep, lGen is bumped by Reset.
type ticketAWN struct {
	body
	waiters awnArray
}

func openTicketAWN(a *Arena, index int) Mutex {
	return &ticketAWN{body: newBody(a, index), waiters: a.awnArray(index)}
}

// awnArray is one lock's array of 32-bit node indices, two to a word.
type awnArray struct {
	words []uint64
	n     int64 // entries; 0 in arenas without arrays
}

func (a *Arena) awnArray(i int) awnArray {
	if a.cfg.AWNWaiters == 0 {
		return awnArray{}
	}
	off := a.cfg.awnArraysStart() + i*a.cfg.awnArrayWords()
	return awnArray{words: a.w[off : off+a.cfg.awnArrayWords()], n: int64(a.cfg.AWNWaiters)}
}

// at is the entry for ticket t. Tickets come from lock words that damage
// may have set to anything (negative, or in a lock without arrays), so any
// t gives an entry: one of the array's, or, without an array, a word that
// names no node.
func (w awnArray) at(t int64) *uint32 {
	if w.n <= 0 {
		return new(uint32)
	}
	i := int64(uint64(t) % uint64(w.n))
	lo, hi := wait.Halves(&w.words[i/2])
	if i%2 == 0 {
		return lo
	}
	return hi
}

// clear empties every entry (Reset).
func (w awnArray) clear() {
	for i := range w.words {
		atomic.StoreUint64(&w.words[i], 0)
	}
}

// awnNode is one node of the table: lockIsMine (futex word), its sleepers,
// and the pid of the process that drew it, for whoever recovers after a
// crash.
type awnNode struct {
	mine, sleepers *uint32
	owner          *uint64
}

// Words of a node of the table. Word 0 is ticket-awn's lockIsMine and
// sleepers, or alock's budget and sleepers; word 2 is alock's link.
const (
	nodeOwner = 1 // see nodePool
	nodeGen   = 3 // the generation of the queue it waits in (alock: its era)
	nodeLock  = 4 // the index + 1 of the lock it waits on (0: not known), and nodeInArray
)

// nodeInArray, or'ed into a node's lock word, marks a ticket-awn node its
// waiter may have published in the lock's array and that nobody has found
// safe to reuse since: its waiter, granted, or the surrogate that released
// its turn after the flag store landed (or the releaser chose egress),
// clears it. A node can leave the array without that (a Reset's clear
// erases the node of a waiter of the new generation, whose releaser may
// have read it before; a surrogate that gave up waiting for the flag),
// and then a releaser may still set its flag: Recover's sweep keeps it.
const nodeInArray = uint64(1) << 32

func (a *Arena) markNodeInArray(n uint32, in bool) {
	w := &a.w[a.nodeOffset(n)+nodeLock]
	v := atomic.LoadUint64(w) &^ nodeInArray
	if in {
		v |= nodeInArray
	}
	atomic.StoreUint64(w, v)
}

func (a *Arena) awnNode(n uint32) awnNode {
	off := a.nodeOffset(n)
	mine, sleepers := wait.Halves(&a.w[off])
	return awnNode{mine: mine, sleepers: sleepers, owner: &a.w[off+nodeOwner]}
}

func (a *Arena) nodeOffset(n uint32) int { return a.cfg.awnNodesStart() + int(n-1)*lineWords }

// stampNode records, before a waiter makes node n findable, the lock and
// generation whose queue it is to wait in. Recover's sweep gives back a
// node that its dead owner never made findable, but only if that queue has
// not been reset since: a reset leaves releasers of the old queue that may
// still write to the nodes they saw in it.
func (a *Arena) stampNode(n uint32, index int, gen uint64) {
	off := a.nodeOffset(n)
	atomic.StoreUint64(&a.w[off+nodeLock], uint64(index)+1)
	atomic.StoreUint64(&a.w[off+nodeGen], gen)
}

// testHookUnfindable, set only by tests, runs as a ticket-awn or alock
// waiter holds node n, stamped but not yet findable by recovery (not in
// the lock's array, not in the waiter's journal entry).
var testHookUnfindable func(n uint32)

// nodePool hands this process's ticket-awn and alock nodes to waiters.
// Nodes come from the file's table and then circulate within the process,
// so a process's nodes are only ever as many as its waiters at one time.
//
// A node's owner word says whose it is: the pid of the process that drew
// it; that pid with idleNode set while the node waits in its process's
// pool, named by no queue or array; or returnedNode once given back to the
// table. Close gives the pool's nodes back (returnAll). A process that
// dies without Close leaves its pooled nodes idle under its pid, and a
// process that finds the table drawn out takes them (get). Every change
// of an idle node's owner is a CAS from the idle value, so the process
// taking a node from its pool and one reclaiming it cannot both win, even
// when the reclaimer misjudged the owner dead (a pid from another pid
// namespace, say): the loser only loses the node.
type nodePool struct {
	arena *Arena
	freeList[uint32]
}

const (
	// returnedNode in a node's owner word marks a node given back to the
	// table. (0 cannot serve: a node just drawn by its cursor has owner 0
	// until its process writes its pid.)
	returnedNode = ^uint64(0)
	// idleNode, or'ed into the owner's pid, marks a node in its process's
	// pool. Pids fit in 22 bits.
	idleNode = uint64(1) << 62
	// voidedNode, or'ed into a dead owner's pid, marks a node that a
	// releaser may still write to although no array names it any more (a
	// surrogate gave up waiting for that store): it is never given back.
	voidedNode = uint64(1) << 61
)

// get returns a node, or 0 when the table is used up.
func (p *nodePool) get() uint32 {
	a := p.arena
	pid := uint64(os.Getpid())
	for {
		node, ok := p.pop()
		if !ok {
			break
		}
		if atomic.CompareAndSwapUint64(a.awnNode(node).owner, pid|idleNode, pid) {
			return node
		}
		// Reclaimed by a process that judged us dead: no longer ours.
	}
	limit := uint64(a.cfg.AWNNodes)
	cursor := &a.w[hAWNCursor]
	for {
		c := atomic.LoadUint64(cursor)
		if c >= limit {
			break
		}
		if atomic.CompareAndSwapUint64(cursor, c, c+1) {
			node := uint32(c + 1)
			atomic.StoreUint64(a.awnNode(node).owner, pid)
			return node
		}
	}
	// Every node has been drawn: take one a closed process gave back, or
	// one a dead process left idle. Each owner is asked after once per
	// scan: idle nodes belong to a few processes, and a system call per
	// node made a scan of 128 Ki nodes take 1.5 s, past any lock timeout.
	gone := map[uint64]bool{}
	for node := uint32(1); uint64(node) <= limit; node++ {
		owner := a.awnNode(node).owner
		o := atomic.LoadUint64(owner)
		if o != returnedNode && o&idleNode == 0 {
			continue
		}
		if o != returnedNode {
			dead, asked := gone[o]
			if !asked {
				if testHookAskedGone != nil {
					testHookAskedGone(o &^ idleNode)
				}
				dead = processGone(o &^ idleNode)
				gone[o] = dead
			}
			if !dead {
				continue
			}
		}
		if atomic.CompareAndSwapUint64(owner, o, pid) {
			return node
		}
	}
	return 0
}

// testHookAskedGone, set only by tests, runs as a scan of the node table
// asks whether a node's owner is gone.
var testHookAskedGone func(pid uint64)

// put pools a node its waiter is done with: named by no queue or array
// any more (a waiter pools its node once its turn came, and drops it when
// recovery reset the lock).
func (p *nodePool) put(node uint32) {
	atomic.StoreUint64(p.arena.awnNode(node).owner, uint64(os.Getpid())|idleNode)
	p.push(node, 0)
}

// returnAll gives the pool's nodes back to the table, for another process
// to take at once.
func (p *nodePool) returnAll() {
	p.mu.Lock()
	nodes := p.free
	p.free = nil
	p.mu.Unlock()
	idle := uint64(os.Getpid()) | idleNode
	for _, node := range nodes {
		atomic.CompareAndSwapUint64(p.arena.awnNode(node).owner, idle, returnedNode)
	}
}

func (l *ticketAWN) egress() int64 { return int64(atomic.LoadUint64(l.depart)) }

func pos(e int64) int64 {
	if e < 0 {
		return -e
	}
	return e
}

func (l *ticketAWN) Lock() { _ = l.LockTimeout(-1) }

func (l *ticketAWN) LockTimeout(d time.Duration) error { return l.lockWaiting(newWaiter(d)) }

func (l *ticketAWN) lockWaiting(w waiter) error {
	if took, err := l.a.lockByTurn(l.index, &w); took {
		return err
	}
	if !l.a.reserveFor(1, &w) {
		return ErrTimeout
	}
	e := l.a.claim()
	for {
		gen := atomic.LoadUint64(l.gen)
		e.set(jArriving, kindTicket, l.index, 0, 0, gen)
		t := int64(atomic.AddUint64(l.arrive, 1) - 1)
		if l.arrived != nil {
			l.arrived()
		}
		e.ticketed(uint64(t))
		var node uint32
		switch l.wait(t, gen, &node, &w) {
		case granted:
			l.acquired(t, node)
			return nil
		case timedOut:
			node := node // the closure's own copy: the fast path keeps its node off the heap
			l.a.substituteTurn(l.index, gen, func(w *waiter, turn *pendingTurn) {
				switch l.wait(t, gen, &node, w) {
				case granted:
					if l.a.handOver(turn, func() { l.acquired(t, node) }) {
						return
					}
					l.acquired(t, node)
					e.phase(jReleasing)
					l.release()
					l.a.free(e)
				case reset:
					l.a.free(e)
				}
				// Stopped by Close: the entry stays for recovery to finish
				// once this process is gone.
			})
			return ErrTimeout
		}
		// Reset by recovery: the node may still be named in an array that
		// Reset cleared after we looked, so it is dropped, not reused.
	}
}

func (l *ticketAWN) acquired(t int64, node uint32) {
	if node != 0 {
		// Withdraw the node from the array before it can be reused: an
		// array entry naming a node then means its waiter has not been
		// handed the lock, which recovery relies on to finish a release
		// whose process died between its two stores. Granted, no releaser
		// writes the node any more.
		l.a.markNodeInArray(node, false)
		atomic.CompareAndSwapUint32(l.waiters.at(t), node, 0)
		l.a.awnNodes.put(node)
	}
	atomic.StoreUint64(l.holder, uint64(t)+1)
}

// wait runs the seed's lock procedure for ticket t from wherever *node says
// it got to (0: not published), so that a substitute can resume it.
func (l *ticketAWN) wait(t int64, gen uint64, node *uint32, w *waiter) outcome {
	if *node != 0 {
		return l.waitDecision(t, gen, *node, w)
	}
	// A waiter with no node is handed the lock through egress alone, and
	// takes -t (a node handover) as its turn too, as the seed does: the
	// node the releaser saw at its array index is then not its own, and
	// only a damaged or stale entry can be such a node.
	mine := func(e int64) bool { return pos(e) == t }
	n := l.waiters.n
	// Near the front, or no arrays: wait on egress like a ticket lock.
	if n == 0 || pos(l.egress()) >= t-1 {
		return l.waitEgress(t, gen, w, mine)
	}
	// Far back: wait for room in the array, so that no two live waiters
	// share an index modulo n.
	if o := l.waitEgress(t, gen, w, func(e int64) bool { return t-pos(e) < n-1 }); o != granted {
		return o
	}
	if pos(l.egress()) >= t-1 {
		return l.waitEgress(t, gen, w, mine)
	}
	nd := l.a.awnNodes.get()
	if nd == 0 {
		return l.waitEgress(t, gen, w, mine) // table used up
	}
	l.a.stampNode(nd, l.index, gen)
	if testHookUnfindable != nil {
		testHookUnfindable(nd)
	}
	atomic.StoreUint32(l.a.awnNode(nd).mine, 0)
	l.a.markNodeInArray(nd, true)
	atomic.StoreUint32(l.waiters.at(t), nd)
	*node = nd
	if atomic.LoadUint64(l.gen) != gen {
		// A Reset cleared the array, perhaps just before our store: take
		// the entry back, or a releaser 16 tickets on would hand the
		// lock to this node, which nobody waits on, instead of through
		// egress to the ticket's waiter. (Reset's clear follows its
		// generation step, so an entry stored after the clear is seen here.)
		atomic.CompareAndSwapUint32(l.waiters.at(t), nd, 0)
		return reset
	}
	return l.waitDecision(t, gen, nd, w)
}

// waitDecision waits, with node nd published for ticket t, for the
// releaser of t-1 to hand the lock over through the node (egress -t, then
// waitNode) or through egress (t: it did not see the node, and never will
// touch it). It resumes from any point: a substitute calls it again.
func (l *ticketAWN) waitDecision(t int64, gen uint64, nd uint32, w *waiter) outcome {
	for {
		e := l.egress()
		if pos(e) < t-1 || e == -t {
			return l.waitNode(t, gen, nd, w) // the releaser of t-1 will see the node, or has
		}
		if e == t {
			return granted
		}
		// egress is ±(t-1): we are next and the releaser has not decided.
		if atomic.LoadUint64(l.gen) != gen {
			return reset
		}
		if w.await(l.dseq, l.dsleepers, func() bool { return l.egress() != e }) == expired {
			return timedOut
		}
	}
}

// waitEgress waits until ready(egress) holds.
func (l *ticketAWN) waitEgress(t int64, gen uint64, w *waiter, ready func(int64) bool) outcome {
	for !ready(l.egress()) {
		if atomic.LoadUint64(l.gen) != gen {
			return reset
		}
		l.paceTicket(w, t)
		if w.await(l.dseq, l.dsleepers, func() bool { return ready(l.egress()) }) == expired {
			return timedOut
		}
	}
	return granted
}

// waitNode waits for the releaser of t-1 to set the node's lockIsMine, or
// to hand over through egress (+t): a Reset clears the array after it has
// freed the lock, and may so erase the node of a waiter of the new
// generation after it was published, which its releaser then does not
// see. (egress +t is never the releaser's choice of a node handover, so
// the node is not written after.) That releaser does not wake the node:
// the waiter sees egress on its next nap.
func (l *ticketAWN) waitNode(t int64, gen uint64, node uint32, w *waiter) outcome {
	nd := l.a.awnNode(node)
	for atomic.LoadUint32(nd.mine) == 0 {
		if l.egress() == t {
			return granted
		}
		if atomic.LoadUint64(l.gen) != gen {
			return reset
		}
		l.paceTicket(w, t)
		if w.await(nd.mine, nd.sleepers, func() bool { return atomic.LoadUint32(nd.mine) != 0 || l.egress() == t }) == expired {
			return timedOut
		}
	}
	l.a.awnNodeHandovers.Add(1)
	return granted
}

// paceTicket: only the waiter whose predecessor holds the lock spins; the
// rest sleep at once (see body.pace).
func (l *ticketAWN) paceTicket(w *waiter, t int64) {
	w.setNext(pos(l.egress()) >= t-1)
}

// TryLock takes a ticket only if it would be served at once: egress equals
// ingress (a negative egress never does). 64-bit tickets do not wrap, so
// the CAS cannot succeed on a recurring value.
func (l *ticketAWN) TryLock() bool {
	e := atomic.LoadUint64(l.depart)
	i := atomic.LoadUint64(l.arrive)
	if e != i || !l.a.reserve(1, time.Time{}) {
		return false
	}
	j := l.a.claim()
	j.set(jArriving, kindTicket, l.index, 0, 0, atomic.LoadUint64(l.gen))
	if !atomic.CompareAndSwapUint64(l.arrive, i, i+1) {
		l.a.free(j)
		return false
	}
	j.ticketed(i)
	atomic.StoreUint64(l.holder, i+1)
	return true
}

func (l *ticketAWN) Unlock() error {
	h := atomic.SwapUint64(l.holder, 0)
	if h == 0 || pos(l.egress()) != int64(h-1) {
		if h != 0 {
			atomic.StoreUint64(l.holder, h)
		}
		return ErrNotLocked
	}
	e, own := l.a.findEpisode(l.index, kindTicket, h-1)
	e.phase(jReleasing)
	l.release()
	l.a.endEpisode(e, own)
	return nil
}

// release is the seed's unlock: clear our array entry, look at the next
// ticket's, and hand over through its node or through egress.
func (l *ticketAWN) release() {
	t := pos(l.egress())
	n := l.waiters.n
	if n == 0 {
		atomic.StoreUint64(l.depart, uint64(t+1))
		if testHookBetweenStores != nil {
			testHookBetweenStores()
		}
		signal(l.dseq, l.dsleepers)
		return
	}
	atomic.StoreUint32(l.waiters.at(t), 0)
	if next := atomic.LoadUint32(l.waiters.at(t + 1)); next != 0 && next <= uint32(l.a.cfg.AWNNodes) {
		nd := l.a.awnNode(next)
		atomic.StoreUint64(l.depart, uint64(-(t + 1)))
		if testHookBetweenStores != nil {
			testHookBetweenStores()
		}
		atomic.StoreUint32(nd.mine, 1)
		if atomic.LoadUint32(nd.sleepers) != 0 {
			wait.WakeAll(nd.mine)
		}
	} else {
		atomic.StoreUint64(l.depart, uint64(t+1))
		if testHookBetweenStores != nil {
			testHookBetweenStores()
		}
	}
	signal(l.dseq, l.dsleepers) // waiters for room in the array, and the next one if it watches egress
}
