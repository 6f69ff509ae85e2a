//go:build linux

package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testhook"
)

// TestSegmentForMatchesSplits: the address of a key with n segments in use
// is the segment the splits in order would have put it in, for every n:
// split k (of segment k - m, m the largest power of two up to k) moves the
// keys of that segment whose hash has bit m set to segment k.
func TestSegmentForMatchesSplits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, segments := range []uint64{1, 2, 16} {
		for range 2000 {
			h := rng.Uint64()
			want := h & (segments - 1)
			for n := segments; n <= 1<<12; n++ {
				if got := segmentFor(h, n); got != want || got >= n {
					t.Fatalf("segmentFor(%#x, %d) = %d; splits from %d segments put it in %d", h, n, got, segments, want)
				}
				m := uint64(1)
				for m*2 <= n {
					m *= 2
				}
				if want == n-m && h&m != 0 {
					want = n
				}
			}
		}
	}
}

// splitParams is a small map that splits: 4 segments of 64 entries that
// may split into 64.
func splitParams() Params {
	return Params{Entries: 256, AverageKeySize: 10, AverageValueSize: 20, MaxBloatFactor: 2, Segments: 4, MaxSize: 1 << 30, MaxSegments: 64}
}

// TestTagsDoNotDependOnSegments: a map that splits takes its tags from the
// hash's high half, which no segment count touches; one that does not
// split, from the bits above its segment's.
func TestTagsDoNotDependOnSegments(t *testing.T) {
	l, err := NewLayout(splitParams(), 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Splits || l.MaxSegments != 64 || l.tagShift != 32 {
		t.Fatalf("layout splits %v to %d segments, tags from bit %d; want splits to 64, tags from bit 32", l.Splits, l.MaxSegments, l.tagShift)
	}
	p := splitParams()
	p.MaxSegments = -1
	if l, err = NewLayout(p, 4096, true); err != nil || l.Splits || l.tagShift != 2 || l.MaxSegments != 4 {
		t.Fatalf("MaxSegments -1: splits %v, tags from bit %d, MaxSegments %d, %v; want no splits, bit 2, 4", l.Splits, l.tagShift, l.MaxSegments, err)
	}
	sl := mustLayout(t, splitParams())
	back, err := DecodeLayout(sl.Encode(), 4096, 1<<40)
	if err != nil || back.MaxSegments != 64 || !back.Splits {
		t.Fatalf("decoded: MaxSegments %d, splits %v, %v", back.MaxSegments, back.Splits, err)
	}
}

// TestSplitsKeepTheRecordLength: MaxSegments rides in the flags word,
// so a record that splits is as long as one that only grows (the header's
// room was measured for that), and a damaged count is refused.
func TestSplitsKeepTheRecordLength(t *testing.T) {
	sl := mustLayout(t, splitParams())
	p := splitParams()
	p.MaxSegments = -1
	gl := mustLayout(t, p)
	if !gl.Grows || gl.Splits {
		t.Fatalf("MaxSegments -1: grows %v, splits %v; want a map that grows without splits", gl.Grows, gl.Splits)
	}
	rec := sl.Encode()
	if len(rec) != len(gl.Encode()) || RecordLen(rec) != len(rec) {
		t.Fatalf("a record that splits is %d bytes (RecordLen %d), one that only grows %d", len(rec), RecordLen(rec), len(gl.Encode()))
	}
	if m, ok := RecordMaxSegments(rec); !ok || m != 64 {
		t.Fatalf("RecordMaxSegments = %d, %v; want 64", m, ok)
	}
	const flagsOff = len(layoutMagic) + 8*2
	for _, tc := range []struct {
		name string
		log  uint64 // log2(MaxSegments) written into the flags word
		drop bool   // clear flag splits
	}{
		{"not above Segments", 2, false}, {"beyond the format's", 21, false}, {"without the flag", 6, true}, {"flag without a count", 0, false},
	} {
		b := append([]byte(nil), rec...)
		flags := binary.LittleEndian.Uint64(b[flagsOff:])&^splitBitsMask | tc.log<<splitBitsShift
		if tc.drop {
			flags &^= flagSplits
		}
		binary.LittleEndian.PutUint64(b[flagsOff:], flags)
		if _, err := DecodeLayout(b, 4096, 1<<40); !errors.Is(err, ErrBadLayout) {
			t.Errorf("%s: DecodeLayout = %v, want ErrBadLayout", tc.name, err)
		}
	}
}

func mustLayout(t *testing.T, p Params) Layout {
	t.Helper()
	l, err := NewLayout(p, 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// splitKey is key i of the split tests, and its value.
func splitKey(i int) ([]byte, []byte) {
	k := []byte(fmt.Sprintf("key-%07d", i))
	return k, bytes.Repeat([]byte{byte('a' + i%26)}, 5+i%30)
}

// checkSplitKeys fails unless keys 0..n-1 read back through Get and the
// locked read, and every segment in use checks clean.
func checkSplitKeys(t *testing.T, tb *Table, n int) {
	t.Helper()
	for i := range n {
		k, v := splitKey(i)
		got, found, err := tb.Get(hashOf(k), k, nil)
		if err != nil || !found || !bytes.Equal(got, v) {
			t.Fatalf("key %d: %q, %v, %v; want %q", i, got, found, err, v)
		}
		got, found, err = tb.Segment(0).getConsistent(hashOf(k), k, nil) // a handle of another segment goes to the key's
		if err != nil || !found || !bytes.Equal(got, v) {
			t.Fatalf("key %d, read under a stale segment handle: %q, %v, %v", i, got, found, err)
		}
	}
	checkClean(t, tb)
	if got := tb.Len(); got != int64(n) {
		t.Fatalf("Len %d, want %d", got, n)
	}
}

// TestSplitsKeepEveryKey: a map created for 256 entries takes 6,000; its
// inserts split its segments, every key reads back, each segment checks
// clean, and chains stay short.
func TestSplitsKeepEveryKey(t *testing.T) {
	tb, _ := newTable(t, splitParams())
	const n = 6000
	for i := range n {
		k, v := splitKey(i)
		if _, err := tb.For(hashOf(k)).put(hashOf(k), k, v, Replace); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	checkSplitKeys(t, tb, n)
	if got := tb.Segments(); got != 64 {
		t.Errorf("%d segments in use after %d inserts into a map of 4 that splits to 64", got, n)
	}
	if tb.Len() != n {
		t.Errorf("Len %d, want %d", tb.Len(), n)
	}
	var tiers int64
	for i := range tb.Segments() {
		tiers += tb.Segment(int(i)).Tiers()
	}
	t.Logf("%d segments, %.2f tiers per segment", tb.Segments(), float64(tiers)/float64(tb.Segments()))
	// Deletes and overwrites under the new addressing.
	for i := 0; i < n; i += 3 {
		k, _ := splitKey(i)
		if found, err := tb.For(hashOf(k)).Delete(hashOf(k), k); err != nil || !found {
			t.Fatalf("delete %d: %v, %v", i, found, err)
		}
	}
	for i := range n {
		k, v := splitKey(i)
		_, found, err := tb.Get(hashOf(k), k, nil)
		if err != nil || found != (i%3 != 0) {
			t.Fatalf("key %d after deletes: found %v, %v", i, found, err)
		}
		_ = v
	}
}

// noLive is Recover's view of a process that is the only one left: every
// lock hold it does not account for is a dead process's.
func noLive(dst []uint64) []uint64 { return dst }

// TestSplitDiesAtEveryStep: a split stopped at each of its steps (a panic
// there, which leaves its locks as a death would) loses no key once the
// two segments are recovered, Check finds them clean, and splits go on.
func TestSplitDiesAtEveryStep(t *testing.T) {
	for _, step := range []string{"claimed", "locked", "emptied", "copied", "committed", "moved"} {
		t.Run(step, func(t *testing.T) {
			tb, _ := newTable(t, splitParams())
			n := 0
			put := func(upto int) {
				for ; n < upto; n++ {
					k, v := splitKey(n)
					if _, err := tb.For(hashOf(k)).put(hashOf(k), k, v, Replace); err != nil {
						t.Fatalf("put %d: %v", n, err)
					}
				}
			}
			put(400)
			before := tb.Segments()
			testhook.OnSplitStep = func(s string) {
				if s == step {
					panic("die at " + s)
				}
			}
			died := func() (r any) {
				defer func() { r = recover() }()
				tb.TrySplit()
				return nil
			}()
			testhook.OnSplitStep = nil
			if died == nil {
				t.Fatalf("the split never reached step %s", step)
			}
			after := tb.Segments()
			if want := before; step == "committed" || step == "moved" {
				if after != want+1 {
					t.Fatalf("segments %d after a death past the commit, want %d", after, want+1)
				}
			} else if after != want {
				t.Fatalf("segments %d after a death before the commit, want %d", after, want)
			}
			// The recovery of a dead splitter's claim looks only at the
			// segments SplitHeld names: every lock the split left must be
			// among them.
			held := tb.SplitHeld()
			for i := range tb.SegmentsTouched() {
				if atomic.LoadUint64(tb.Segment(int(i)).lock.Word()) != 0 && !slices.Contains(held, i) {
					t.Fatalf("segment %d left locked by a death at %q; SplitHeld names %v", i, step, held)
				}
			}
			for _, i := range held {
				if _, err := tb.Segment(int(i)).Recover(noLive, time.Now().Add(time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			checkSplitKeys(t, tb, n)
			if !tb.TrySplit() {
				t.Fatalf("no split after the recovery")
			}
			put(n + 2000)
			checkSplitKeys(t, tb, n)
		})
	}
}

// TestPausedSplitsDoNotRun: while PauseSplits holds the claim, inserts past
// the split threshold split nothing, a second pause of the process shares
// it, and once the last resumes, the next insert splits again.
func TestPausedSplitsDoNotRun(t *testing.T) {
	tb, _ := newTable(t, splitParams())
	resume, err := tb.PauseSplits(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	again, err := tb.PauseSplits(time.Second)
	if err != nil {
		t.Fatalf("a second pause of the same process: %v", err)
	}
	const n = 600 // past the split threshold, within what the table holds unsplit
	for i := range n {
		k, v := splitKey(i)
		if _, err := tb.For(hashOf(k)).put(hashOf(k), k, v, Replace); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if got := tb.Segments(); got != tb.Layout().Segments {
		t.Fatalf("%d segments in use while splits were paused, want %d", got, tb.Layout().Segments)
	}
	again()
	if tb.TrySplit() {
		t.Fatal("a split ran while one pause still held the claim")
	}
	resume()
	if tb.SplitClaim() != 0 {
		t.Fatalf("claim %#x left after the last resume", tb.SplitClaim())
	}
	if !tb.TrySplit() {
		t.Fatal("no split after the pauses ended")
	}
	checkSplitKeys(t, tb, n)
}

// TestDamagedSegmentCountKeepsEveryKey: a flipped bit in either copy of N,
// the count that finds every key's segment in a map that split, costs no
// key: readers take the copy that verifies, CheckGlobal names the damage,
// and MendSegmentCount puts it right, from the stamps of the segments'
// first tiers when both copies are damaged.
func TestDamagedSegmentCountKeepsEveryKey(t *testing.T) {
	const n = 3000
	for _, c := range []struct {
		name       string
		first, cpy bool
	}{{"first", true, false}, {"second", false, true}, {"both", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			tb, _ := newTable(t, splitParams())
			for i := range n {
				k, v := splitKey(i)
				if _, err := tb.For(hashOf(k)).put(hashOf(k), k, v, Replace); err != nil {
					t.Fatalf("put %d: %v", i, err)
				}
			}
			want := tb.Segments()
			if want <= tb.Layout().Segments {
				t.Fatalf("no split (%d segments): the test tests nothing", want)
			}
			if c.first {
				atomic.AddUint64(tb.active, 1<<3) // N off by 8, its check now wrong
			}
			if c.cpy {
				atomic.AddUint64(tb.activeCopy, 1<<40) // the check wrong
			}
			if !c.first {
				checkSplitKeys(t, tb, n) // the first copy still verifies
			} else if !c.cpy {
				checkSplitKeys(t, tb, n) // read through the second copy
			}
			var problems []error
			tb.CheckGlobal(func(err error) { problems = append(problems, err) })
			if len(problems) == 0 {
				t.Fatal("CheckGlobal found nothing wrong with a damaged count of segments")
			}
			if _, to, mended := tb.MendSegmentCount(); !mended || int64(to) != want {
				t.Fatalf("MendSegmentCount: %d, %v; want %d", to, mended, want)
			}
			problems = problems[:0]
			tb.CheckGlobal(func(err error) { problems = append(problems, err) })
			if len(problems) != 0 {
				t.Fatalf("after MendSegmentCount: %v", problems)
			}
			checkSplitKeys(t, tb, n)
		})
	}
}

// TestFailedSplitWaitsForNOrItsDelay: a split that fails for want of room
// (here the disk refuses the block of the segment it would split into) is
// tried once, not by every crowded insert after it; a split of another
// process, which changes N, or the end of the delay ends the wait.
func TestFailedSplitWaitsForNOrItsDelay(t *testing.T) {
	tb, path := newTable(t, splitParams())
	l := tb.Layout()
	firstTiersToSplitInto := func(off int64) bool {
		return off >= l.TiersOff+l.Segments*l.TierSize && off < l.TiersOff+l.MaxSegments*l.TierSize
	}
	refused := 0
	tb.allocate = func(off, n int64) error {
		if firstTiersToSplitInto(off) {
			refused++
			return errors.New("no space left on device")
		}
		return nil
	}
	claims := 0
	testhook.OnSplitStep = func(step string) {
		if step == "claimed" {
			claims++
		}
	}
	defer func() { testhook.OnSplitStep = nil }()
	const n = 600 // past the split threshold, within what the table holds unsplit
	for i := range n {
		k, v := splitKey(i)
		if _, err := tb.For(hashOf(k)).put(hashOf(k), k, v, Replace); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if claims != 1 || refused != 1 || tb.Segments() != l.Segments {
		t.Fatalf("%d inserts past the threshold with no room to split: %d splits tried, %d blocks asked for, %d segments; want 1, 1, %d",
			n, claims, refused, tb.Segments(), l.Segments)
	}

	// Another process splits (its disk had room): N changed, so this one
	// tries again at once.
	other := openTable(t, path, *l, false)
	if !other.TrySplit() {
		t.Fatal("the other process's split failed")
	}
	claims-- // the other's: the hook is the test binary's
	tb.TrySplit()
	if claims != 2 || refused != 2 {
		t.Fatalf("after N changed: %d splits tried, %d blocks asked for; want 2, 2", claims, refused)
	}

	// Room again, but within the delay: no try; after it, the split runs.
	tb.allocate = func(int64, int64) error { return nil }
	if tb.TrySplit() || claims != 2 {
		t.Fatalf("a split tried within the delay after a failure (%d tries)", claims)
	}
	now := tb.now
	tb.now = func() int64 { return now() + int64(2*splitRetryDelay) }
	if !tb.TrySplit() || claims != 3 {
		t.Fatalf("no split after the delay (%d tries)", claims)
	}
	checkSplitKeys(t, tb, n)
}

// TestTakenOverClaimHoldsOffSplits: the claim of a dead splitter passes to
// the process that recovers it, not to nobody: while that process mends
// N and recovers the segments the split held, another process's split
// must not run (its commit could be overwritten by the mending of N), and
// once released, splits go on.
func TestTakenOverClaimHoldsOffSplits(t *testing.T) {
	tb, path := newTable(t, splitParams())
	for i := range 400 {
		k, v := splitKey(i)
		if _, err := tb.For(hashOf(k)).put(hashOf(k), k, v, Replace); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	const dead, self = 77, 5
	gone := func(id uint64) bool { return id == dead }
	tb.SetSplitter(self, gone, nil, nil)
	other := openTable(t, path, *tb.Layout(), false)
	other.SetSplitter(9, gone, nil, nil)
	atomic.StoreUint64(tb.split.claim, dead)
	if _, ok := tb.TakeOverSplitClaim(func(uint64) bool { return false }); ok {
		t.Fatal("took over the claim of a live process")
	}
	release, ok := tb.TakeOverSplitClaim(gone)
	if !ok {
		t.Fatal("did not take over a dead process's claim")
	}
	if got := tb.SplitClaim(); got != self {
		t.Fatalf("claim %#x while taken over, want the recovering process's %#x", got, self)
	}
	before := tb.Segments()
	if other.TrySplit() || tb.Segments() != before {
		t.Fatal("another process split while the dead splitter's claim was being recovered")
	}
	if _, again := tb.TakeOverSplitClaim(gone); again {
		t.Fatal("took over a claim it holds")
	}
	release()
	if !other.TrySplit() || tb.Segments() != before+1 {
		t.Fatalf("no split after the claim was released (%d segments, %d before)", tb.Segments(), before)
	}
	checkSplitKeys(t, tb, 400)
}
