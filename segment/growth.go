package segment

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/offheap"
)

// A file that grows (Layout.Grows) holds Tiers tiers when it is created and
// up to MaxTiers later. Its length says how many it holds: growing is one
// ftruncate, which a process killed at any point has either done or not,
// and a file of either length opens with every entry. Every process maps
// MaxTiers' worth of address space from the start, so growing maps nothing
// anew; but a tier past the file's end must never be touched (it faults,
// SIGBUS), so every link is checked against the tiers this process knows
// the file holds (present), and a link past them makes it read the
// file's length again (refreshTiers) before it calls the link damage. A
// writer links a tier only after the file holds it, so a reader that sees
// the link and then reads the length sees a length that holds it.

// growth is how a table reads and lengthens its file.
type growth struct {
	length func() (int64, error) // reads the file's length again
	grow   func(n int64) error   // lengthens the file to n bytes
}

// Global state words of the growth log (files that grow): a count of
// steps, then one pair of words per step, the tiers the file held after it
// and when it was taken (Unix ns). Kept for inspection only: the file's
// length is what says how many tiers it holds.
const (
	gGrowthSteps    = 8
	gGrowthLog      = 16
	growthStepBytes = 16
	maxGrowthSteps  = (globalSize - gGrowthLog) / growthStepBytes
)

// SetGrowth gives a table whose file grows the mapping of the tiers past
// Tiers (from file byte End on, up to MaxEnd), the means to read and
// lengthen the file, and its length now. Set it before the table is used;
// a table of a file that does not grow ignores it. A tier in that mapping
// may be touched only once the file is known to hold it (present).
func (tb *Table) SetGrowth(pool *offheap.Region, length int64, read func() (int64, error), grow func(n int64) error) error {
	l := &tb.layout
	if !l.Grows {
		return nil
	}
	if n := (l.MaxTiers - l.Tiers) * l.TierSize; pool == nil || pool.Len() < n {
		return fmt.Errorf("%w: the growth mapping does not hold the %d tiers the file may grow by", ErrBadLayout, l.MaxTiers-l.Tiers)
	}
	n := (l.MaxTiers - l.Tiers) * l.TierSize
	tb.poolBytes, tb.poolWords = pool.Bytes(0, n), pool.Uint64s(0, n/8)
	tb.growth = growth{length: read, grow: grow}
	tb.seeTiers(l.tiersIn(length))
	return nil
}

// SalvagedTiers says what a salvaged file holds of its tiers (see
// SalvageGrowth).
type SalvagedTiers struct {
	Whole   int64 // tiers the file holds whole
	Partial int64 // bytes the file holds of the tier after them (0: none)
	// HandedOut is the tiers in use as the global state counts them: the
	// first tiers and the overflow tiers the pool has handed out.
	HandedOut int64
}

// SalvageGrowth readies a table that a salvage reads, over a file length
// bytes long whose mappings read everywhere, zeros past the file's end
// (offheap.OpenSalvage): every tier the file holds whole or in part, and
// every tier the pool has handed out, is read (a tier the pool handed out
// past the file's end reads as an empty one, ending its chain), rather
// than only the tiers the file's length holds whole. pool maps the tiers
// past Tiers, as for SetGrowth; a file that does not grow needs none. The
// table never grows the file. It returns what the file holds of its tiers.
func (tb *Table) SalvageGrowth(pool *offheap.Region, length int64) (SalvagedTiers, error) {
	l := &tb.layout
	var st SalvagedTiers
	if length > l.TiersOff {
		st.Whole, st.Partial = (length-l.TiersOff)/l.TierSize, (length-l.TiersOff)%l.TierSize
	}
	st.HandedOut = l.MaxSegments + tb.ExtraTiersInUse()
	if !l.Grows {
		return st, nil
	}
	if err := tb.SetGrowth(pool, l.TiersOff+l.Tiers*l.TierSize, nil, nil); err != nil {
		return st, err
	}
	read := st.Whole
	if st.Partial > 0 {
		read++
	}
	tb.seeTiers(min(max(read, st.HandedOut), l.MaxTiers))
	return st, nil
}

// area returns the mapped bytes and words that hold tier t, and where t
// starts in them: the file's first mapping for tiers below Tiers, the
// growth mapping past them.
func (tb *Table) area(t int64) ([]byte, []uint64, int64) {
	l := &tb.layout
	if t < l.Tiers {
		return tb.tierBytes, tb.tierWords, t * l.TierSize
	}
	return tb.poolBytes, tb.poolWords, (t - l.Tiers) * l.TierSize
}

// tierWordsOf returns the words of the whole of tier t, in whichever
// mapping holds it.
func (tb *Table) tierWordsOf(t int64) []uint64 {
	_, words, base := tb.area(t)
	return words[base/8 : (base+tb.layout.TierSize)/8]
}

// bytesAt returns the mapped bytes that hold byte off of the tiers area
// (off counted from TiersOff, as if every tier were mapped in one run),
// and off's place in them. Nothing spans two tiers, so a range of one
// entry is in one.
func (tb *Table) bytesAt(off int64) ([]byte, int64) {
	l := &tb.layout
	if end := l.Tiers * l.TierSize; off >= end {
		return tb.poolBytes, off - end
	}
	return tb.tierBytes, off
}

// seeTiers raises present to n and returns present.
func (tb *Table) seeTiers(n int64) int64 {
	for {
		cur := tb.present.Load()
		if n <= cur || tb.present.CompareAndSwap(cur, n) {
			return max(n, cur)
		}
	}
}

// Present is how many tiers the file holds, as far as this process has
// seen: Tiers, or more in a file that has grown.
func (tb *Table) Present() int64 { return tb.present.Load() }

// Refresh reads the file's length again, for a caller about to report
// how large the file is (another process may have grown it), and returns
// the tiers it holds.
func (tb *Table) Refresh() int64 { return tb.refreshTiers() }

// refreshTiers reads the file's length again and returns the tiers it
// holds.
func (tb *Table) refreshTiers() int64 {
	if tb.growth.length == nil {
		return tb.present.Load()
	}
	n, err := tb.growth.length()
	if err != nil {
		return tb.present.Load()
	}
	return tb.seeTiers(tb.layout.tiersIn(n))
}

// overflowLink returns the tier a chain's next word names (its index + 1)
// when that is an overflow tier the file holds: false for 0 (the chain's
// end) and for a link out of range, which only damage makes.
func (tb *Table) overflowLink(next uint64) (int64, bool) {
	idx := int64(next) - 1
	switch {
	case next == 0 || next > uint64(tb.layout.MaxTiers) || idx < tb.layout.MaxSegments:
		return 0, false
	case idx < tb.present.Load():
		return idx, true
	}
	return idx, idx < tb.refreshTiers() // another process grew the file
}

// growPool lengthens the file by as many tiers as it holds (to MaxTiers at
// most) when the overflow pool is used up: used tiers of it handed out.
// The caller holds the admin lock, which serializes growth between
// processes. ErrFull when the file is at MaxTiers already, or cannot grow.
func (tb *Table) growPool(used uint64) error {
	l := &tb.layout
	if !l.Grows || tb.growth.grow == nil {
		return ErrFull
	}
	have := tb.refreshTiers() // another process may have grown it since this one looked
	if used < uint64(have-l.MaxSegments) {
		return nil
	}
	if have >= l.MaxTiers {
		return fmt.Errorf("%w: the file has grown to the %d tiers it may hold (MaxSize %d bytes); a map created with a larger MaxSize holds more", ErrFull, l.MaxTiers, l.MaxEnd())
	}
	want := min(2*have, l.MaxTiers)
	testGrowStep("before")
	if err := tb.growth.grow(l.TiersOff + want*l.TierSize); err != nil {
		return fmt.Errorf("%w: cannot grow the file to %d tiers: %v", ErrFull, want, err)
	}
	testGrowStep("grown")
	tb.seeTiers(want)
	tb.logGrowth(want)
	testGrowStep("logged")
	return nil
}

// testGrowStep marks the steps of growPool, for tests that kill a writer
// after each.
func testGrowStep(step string) { testhook.GrowStep(step) }

// logGrowth appends a step to the growth log, under the admin lock. A full
// log keeps its first steps.
func (tb *Table) logGrowth(tiers int64) {
	l := &tb.layout
	count := tb.region.Uint64(l.GlobalOff + gGrowthSteps)
	n := atomic.LoadUint64(count)
	if n >= maxGrowthStepsOf(l) {
		return
	}
	step := tb.region.Uint64s(l.GlobalOff+gGrowthLog+int64(n)*growthStepBytes, 2)
	atomic.StoreUint64(&step[0], uint64(tiers))
	atomic.StoreUint64(&step[1], uint64(time.Now().UnixNano()))
	atomic.StoreUint64(count, n+1)
}

// growthLogNote says, for a person, what the growth log in the global
// state of the map in r laid out as l says, when the layout was found from
// the file (InferLayout): the length of a file whose header is lost says
// how many tiers it holds, not how many it was created with, and a layout
// of that many tiers reads the tiers of one that grew to them alike. ""
// when the log is empty: the file never grew.
func growthLogNote(r *offheap.Region, l *Layout) string {
	words := r.Uint64s(l.GlobalOff+gGrowthSteps, (globalSize-gGrowthSteps)/8)
	n := atomic.LoadUint64(&words[0])
	if n == 0 {
		return ""
	}
	if n > maxGrowthStepsOf(l) {
		return fmt.Sprintf("the global state's growth log counts %d steps, more than it holds: whether the file grew is not known; its %d tiers are read all the same", n, l.Tiers)
	}
	prev := uint64(0)
	for i := range n {
		tiers := atomic.LoadUint64(&words[1+2*i])
		if tiers <= prev || tiers > uint64(l.Tiers) {
			return fmt.Sprintf("the global state's growth log does not read as one (step %d of %d says %d tiers, after %d, in a file of %d): whether the file grew is not known; its %d tiers are read all the same", i+1, n, tiers, prev, l.Tiers, l.Tiers)
		}
		prev = tiers
	}
	return fmt.Sprintf("the global state's growth log says the file grew %d times, the last to %d tiers: it is read as a map created with the %d tiers it holds, which reads the tiers of one that grew to them alike", n, prev, l.Tiers)
}

// GrowthStep is one lengthening of a file that grows.
type GrowthStep struct {
	Tiers int64     // tiers the file held after it
	At    time.Time // when
}

// GrowthSteps lists the file's growth log, oldest first (nil for a file
// that does not grow). A log damage made unreadable gives an error.
func (tb *Table) GrowthSteps() ([]GrowthStep, error) {
	l := &tb.layout
	if !l.Grows {
		return nil, nil
	}
	n := atomic.LoadUint64(tb.region.Uint64(l.GlobalOff + gGrowthSteps))
	if n > maxGrowthStepsOf(l) {
		return nil, fmt.Errorf("%w: the growth log counts %d steps, it holds %d", ErrCorrupt, n, maxGrowthStepsOf(l))
	}
	steps := make([]GrowthStep, n)
	words := tb.region.Uint64s(l.GlobalOff+gGrowthLog, int64(n)*growthStepBytes/8)
	for i := range steps {
		steps[i] = GrowthStep{Tiers: int64(atomic.LoadUint64(&words[2*i])), At: time.Unix(0, int64(atomic.LoadUint64(&words[2*i+1])))}
	}
	return steps, nil
}

// checkGrowth verifies the growth log: steps that only grow, within what
// the file holds. (A step missing from the log, after a writer died
// between growing the file and logging it, is no damage: the length
// says how many tiers the file holds.)
func (tb *Table) checkGrowth(problem func(error)) {
	steps, err := tb.GrowthSteps()
	if err != nil {
		problem(err)
		return
	}
	prev := tb.layout.Tiers
	for i, st := range steps {
		if st.Tiers <= prev || st.Tiers > tb.present.Load() {
			problem(fmt.Errorf("%w: growth step %d says %d tiers, after %d, in a file of %d", ErrCorrupt, i+1, st.Tiers, prev, tb.present.Load()))
			return
		}
		prev = st.Tiers
	}
}

// MendGrowthLog cuts the growth log back to its steps that make sense
// (each more tiers than the one before, within what the file holds), when
// damage made its count or a step wrong, zeroing the words past them, and
// returns the count before and after. Part of repairing a damaged file:
// the log is for inspection only, so what is cut loses nothing.
func (tb *Table) MendGrowthLog() (from, to uint64, mended bool) {
	l := &tb.layout
	if !l.Grows {
		return 0, 0, false
	}
	if tb.admin != nil {
		tb.admin.Lock()
		defer func() { _ = tb.admin.Unlock() }()
	}
	tb.refreshTiers()
	count := tb.region.Uint64(l.GlobalOff + gGrowthSteps)
	from = atomic.LoadUint64(count)
	words := tb.region.Uint64s(l.GlobalOff+gGrowthLog, int64(maxGrowthStepsOf(l))*growthStepBytes/8)
	prev := uint64(l.Tiers)
	for to < min(from, maxGrowthStepsOf(l)) {
		tiers := atomic.LoadUint64(&words[2*to])
		if tiers <= prev || tiers > uint64(tb.present.Load()) {
			break
		}
		prev = tiers
		to++
	}
	if to == from {
		return from, to, false
	}
	atomic.StoreUint64(count, to)
	for i := 2 * to; i < uint64(len(words)); i++ {
		atomic.StoreUint64(&words[i], 0)
	}
	return from, to, true
}

// requestChain starts fetching, for a lookup whose home slot is home, the
// header and home slot lines of each overflow tier segment seg's chain had
// when this process last walked past it, and returns those tiers. A chain
// is a list: each tier's next link is read from the tier before, so a
// lookup that walks k tiers would otherwise wait for memory k times, one
// after the other; with the lines requested together it waits about
// once. The list is a hint: find follows the links it reads, and learns
// the chain again where they differ (learnChain). Segments of one tier,
// most of a map sized for its data, have no list and pay one load.
func (tb *Table) requestChain(seg, home int64) []int64 {
	p := tb.chainHints[seg].Load()
	if p == nil {
		return nil
	}
	for _, t := range *p {
		bytes, _, base := tb.area(t)
		offheap.PrefetchForRead(bytes[base : base+1])
		at := base + tierHeaderSize + home*slotSize
		offheap.PrefetchForRead(bytes[at : at+1])
	}
	return *p
}

// maxChainHint bounds the tiers a chain hint lists: more lines than that
// requested at once wait on each other anyway, and a cycle that damage
// made must not grow the list.
const maxChainHint = 64

// learnChain reads segment seg's chain of overflow tiers again (no lock:
// a torn list is only a poorer hint) and keeps it for requestChain.
func (tb *Table) learnChain(seg int64) []int64 {
	var chain []int64
	t := tb.tier(seg)
	for range min(tb.Present(), maxChainHint) {
		idx, ok := tb.overflowLink(t.next())
		if !ok {
			break
		}
		chain = append(chain, idx)
		t = tb.tier(idx)
	}
	tb.chainHints[seg].Store(&chain)
	return chain
}
