package rwulock

import (
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// ReadLock acquires the read lock, waiting at most timeout (0 means one
// attempt). It fails with ErrTimeout, or at once with ErrReadCountOverflow
// when 2^30 - 1 readers hold the lock.
func (l *Lock) ReadLock(timeout time.Duration) error {
	if l.TryReadLock() {
		return nil
	}
	return l.acquireShared(timeout, false)
}

// UpdateLock acquires the update lock, waiting at most timeout (0 means one
// attempt).
func (l *Lock) UpdateLock(timeout time.Duration) error {
	if l.TryUpdateLock() {
		return nil
	}
	return l.acquireShared(timeout, true)
}

// WriteLock acquires the write lock, waiting at most timeout; while it
// waits, its registered wait keeps new readers and updaters out. On timeout
// the wait is removed and the lock is unchanged.
func (l *Lock) WriteLock(timeout time.Duration) error {
	// After one failed attempt it registers a wait, so new readers and
	// updaters stay out while it waits for the present ones to leave; it
	// then takes the lock and removes its wait with one 64-bit CAS. On
	// timeout the wait is removed and the lock is unchanged.
	if l.TryWriteLock() {
		return nil
	}
	return l.acquireWithWait(timeout, 0)
}

// UpgradeUpdateToWrite turns the held update lock into the write lock,
// waiting at most timeout for readers to leave, with the same wait protocol
// as WriteLock. On failure the caller still holds the update lock.
func (l *Lock) UpgradeUpdateToWrite(timeout time.Duration) error {
	if l.TryUpgradeUpdateToWrite() {
		return nil
	}
	if c := countWord(l.load()); c&UpdateFlag == 0 || c&WriteFlag != 0 {
		return ErrNotHeld
	}
	return l.acquireWithWait(timeout, updateLocked)
}

// sharedBlock tells whether a read (update=false) or update acquisition is
// shut out of state s, and which half of the word to sleep on: the half
// whose change could let it in. A waiter kept out only by the wait count
// sleeps on the wait half, which the last deregistration changes.
func sharedBlock(s uint64, update bool) (blocked bool, half int) {
	c := countWord(s)
	held := WriteFlag
	if update {
		held |= UpdateFlag
	}
	switch {
	case c&held != 0:
		return true, countHalf
	case waitWord(s) != 0:
		return true, waitHalf
	case !update && c&ReadCountMask == MaxReadCount:
		return true, countHalf
	}
	return false, 0
}

const (
	countHalf = iota // sleep on bits 0..31
	waitHalf         // sleep on bits 32..63
)

// acquireShared is the spec's time-limited read or update acquisition: the
// try procedure repeated until it succeeds or the time is up, pausing
// politely between attempts. A CAS lost to another acquirer while the lock
// is open is retried at once.
func (l *Lock) acquireShared(timeout time.Duration, update bool) error {
	deadline := time.Now().Add(timeout)
	var p wait.Policy
	for {
		s := l.load()
		c := countWord(s)
		if blocked, _ := sharedBlock(s, update); !blocked {
			next := c + 1
			if update {
				next = c | UpdateFlag
			}
			if l.casCountNoted(c, next) {
				return nil
			}
			if !update && l.ledgerFull(true, false) {
				return ErrReadCountOverflow // this process's share of the count
			}
			continue
		}
		if !update && c&ReadCountMask == MaxReadCount {
			return ErrReadCountOverflow
		}
		if !l.pause(&p, deadline, func(s uint64) (bool, int) { return sharedBlock(s, update) }) {
			return ErrTimeout
		}
	}
}

// acquireWithWait is the spec's time-limited write acquisition (from = 0)
// or update-to-write upgrade (from = the update flag), steps 2 to 7.
func (l *Lock) acquireWithWait(timeout time.Duration, from uint32) error {
	if err := l.RegisterWait(); err != nil { // step 2
		return err
	}
	deadline := time.Now().Add(timeout)
	var p wait.Policy
	for {
		s := l.load()             // step 3
		if countWord(s) == from { // step 4
			w := waitWord(s)
			if w == 0 { // step 5: our wait is gone; someone reset the word
				l.forgetWait()
				return ErrWaitCountUnderflow
			}
			if l.casWordNoted(s, makeState(writeLocked, w-1)) { // step 6
				return nil
			}
			continue // the word changed under us; look again at once
		}
		// step 7
		if !l.pause(&p, deadline, func(s uint64) (bool, int) { return countWord(s) != from, countHalf }) {
			_ = l.DeregisterWait() // the spec: its result does not matter
			return ErrTimeout
		}
	}
}

// pause waits politely before the next attempt and reports false once the
// deadline has passed. It spins, then yields, then sleeps on the half of the
// word that blocked says to watch, for a bounded time. Before sleeping it
// announces itself in the sleeper word and re-reads the lock: a release
// either happened before that read (and the waiter sees it and does not
// sleep) or it reads the sleeper count after the announcement (and wakes the
// waiter); the futex compare closes the gap in between.
func (l *Lock) pause(p *wait.Policy, deadline time.Time, blocked func(uint64) (bool, int)) bool {
	if !time.Now().Before(deadline) {
		return false
	}
	if p.Pause() {
		return true
	}
	nap := p.Nap(deadline)
	if nap == 0 {
		return false
	}
	if l.sleepers == nil {
		if nap > napCapNoSleepers {
			nap = napCapNoSleepers
		}
	} else {
		atomicAdd(l.sleepers, 1)
		defer atomicAdd(l.sleepers, ^uint32(0))
	}
	s := l.load()
	still, half := blocked(s)
	if !still {
		return true
	}
	if half == waitHalf {
		wait.Sleep(l.wait, waitWord(s), nap)
	} else {
		wait.Sleep(l.count, countWord(s), nap)
	}
	return true
}
