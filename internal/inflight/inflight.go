// Package inflight lets Close wait for the calls in progress on an object
// whose resources Close takes away (a mapped file, a cache with goroutines
// of its own): calls count themselves in and out, Close marks the object
// closed and waits for the counts to reach zero.
//
// The counts are striped over lines of their own, so that goroutines on
// different cores rarely count on the same line. Each call still pays two
// locked instructions; read paths too hot for that stay out and must
// tolerate Close by other means (see hashmap's GetInto).
package inflight

import (
	"runtime"
	"sync/atomic"
	"time"
)

const stripeBits = 4

// Gate counts the calls in progress on one object. The zero Gate is open.
type Gate struct {
	_      [128]byte // keeps the counts off the lines of the fields before the Gate
	counts [1 << stripeBits]Count
	closed atomic.Bool
}

// Count is the stripe a call was counted in on; Leave counts it out.
type Count struct {
	n atomic.Int64
	_ [120]byte // a line pair of its own: the adjacent-line prefetcher pairs lines
}

// Leave counts the call out.
func (c *Count) Leave() { c.n.Add(-1) }

// Closed reports whether Close has begun.
func (g *Gate) Closed() bool { return g.closed.Load() }

// Enter counts a call in, on the stripe picked by the top bits of spread
// (a key's hash, or anything else that varies between calls), or returns
// nil once Close has begun. The caller must Leave the Count it gets when it
// has stopped using what Close takes away.
func (g *Gate) Enter(spread uint64) *Count {
	if g.closed.Load() {
		return nil
	}
	c := &g.counts[spread>>(64-stripeBits)]
	c.n.Add(1)
	// Close stores closed and then reads the counts; this adds and then
	// reads closed. Both are sequentially consistent, so either Close sees
	// this count or this sees closed.
	if g.closed.Load() {
		c.Leave()
		return nil
	}
	return c
}

// Close marks the gate closed, so that Enter fails from then on, and
// waits until every call counted in has left. It reports false, at once,
// if the gate was closed already.
func (g *Gate) Close() bool {
	if g.closed.Swap(true) {
		return false
	}
	for round := 0; ; round++ {
		busy := false
		for i := range g.counts {
			if g.counts[i].n.Load() != 0 {
				busy = true
				break
			}
		}
		if !busy {
			return true
		}
		// Calls are mostly short: yield at first, then sleep, up to a
		// millisecond at a time, for the long ones (lock waits, functions
		// run under a lock).
		if round < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(min(time.Duration(round)*10*time.Microsecond, time.Millisecond))
		}
	}
}
