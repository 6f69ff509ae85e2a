package hashmap

import (
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"
)

// Close unmaps the file, and a call still running in it would fault: the
// process would die with SIGSEGV, not a panic. So calls that lock or write
// anything in the file count themselves in and out (enter, leave), and
// Close marks the map closed, waits for every count to reach zero, and
// only then lets the file go.
//
// The lock-free read paths (GetInto's fast path, Unchanged) do not count
// themselves: the two locked instructions made a random Get 20% slower in
// BenchmarkMap (474 -> 574 ns a GetInto, 4 alternating runs), since a
// locked instruction keeps the next lookup's loads from overlapping this
// one's. They check closed after reading instead, and Close leaves
// zero-filled memory where the file was mapped (offheap.File.Retire): a
// reader still running reads zeros, not an unmapped page, and its answer
// is replaced by ErrClosed.

// inFlightBits: the counts are spread over 1<<inFlightBits lines of
// their own, so that goroutines on different cores rarely count on the
// same line.
const inFlightBits = 4

// inFlight counts the calls in progress, striped.
type inFlight [1 << inFlightBits]inCount

// inCount is one stripe of inFlight.
type inCount struct {
	n atomic.Int64
	_ [120]byte // a line pair of its own: the adjacent-line prefetcher pairs lines
}

// leave counts a call out.
func (c *inCount) leave() { c.n.Add(-1) }

// enter counts a call in, on the stripe picked by the top bits of spread
// (a key's hash, or anything that varies between calls), or returns
// ErrClosed, or ErrReadOnly for a write to a read-only map. The caller
// must leave the count it gets once it has stopped touching the file.
func (m *Map) enter(spread uint64, write bool) (*inCount, error) {
	if m.closed.Load() {
		return nil, ErrClosed
	}
	if write && m.readOnly {
		return nil, ErrReadOnly
	}
	c := &m.inFlight[spread>>(64-inFlightBits)]
	c.n.Add(1)
	// Close stores closed and then reads the counts; this adds and then
	// reads closed. Both are sequentially consistent, so either Close sees
	// this count or this sees closed.
	if m.closed.Load() {
		c.leave()
		return nil, ErrClosed
	}
	return c, nil
}

// enterAny is enter for calls without a key to spread by.
func (m *Map) enterAny(write bool) (*inCount, error) {
	return m.enter(rand.Uint64(), write)
}

// drain waits until no call is counted in. Callers set closed first, so
// the counts only fall, apart from calls that count in, see closed and
// leave at once.
func (f *inFlight) drain() {
	for round := 0; ; round++ {
		busy := false
		for i := range f {
			if f[i].n.Load() != 0 {
				busy = true
				break
			}
		}
		if !busy {
			return
		}
		if round < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(min(time.Duration(round)*10*time.Microsecond, time.Millisecond))
		}
	}
}
