//go:build linux

package segment

import (
	"fmt"
	"strings"
	"testing"
)

// A Checker finds a key seen twice in a segment by its hash, and tells
// apart distinct keys that share a hash; reset forgets a segment's keys,
// so a Checker reused for the next segment starts clean.
func TestCheckerSeen(t *testing.T) {
	var c Checker
	c.reset()
	steps := []struct {
		key  string
		hash uint64
		want bool
	}{
		{"a", 1, false},
		{"b", 1, false}, // another key of the same hash
		{"c", 2, false},
		{"a", 1, true},
		{"b", 1, true},
		{"c", 2, true},
		{"d", 1, false},
	}
	for _, s := range steps {
		if got := c.seen([]byte(s.key), s.hash); got != s.want {
			t.Errorf("seen(%q, %d) = %v, want %v", s.key, s.hash, got, s.want)
		}
	}
	c.reset()
	if c.seen([]byte("b"), 1) || c.seen([]byte("a"), 1) {
		t.Error("a key of the segment checked before is seen after reset")
	}
}

// CheckGlobal skips the overflow tiers whose header the file's dataAt
// says lies in a hole, and reads every header that data reaches: one
// whose first bytes only are data, and one whose tier's data begins past
// its header, which it skips without looping. A stray owner word (damage:
// the pool has handed out no tier) in a header with data is reported.
func TestCheckGlobalSkipsHoles(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 8, Segments: 2})
	l := &tb.layout
	if l.Tiers-l.Segments < 6 {
		t.Fatalf("a pool of %d tiers; want 6 or more", l.Tiers-l.Segments)
	}
	hdr := func(idx int64) int64 { return l.TiersOff + idx*l.TierSize }
	stray := l.Segments + 4
	tb.tier(stray).header[thOwner/8] = 1 // segment 0's
	// Data: inside the body of the pool's second tier (its header is in
	// the hole before), and the first 8 bytes of the stray's header.
	data := [][2]int64{{hdr(l.Segments+1) + 100, hdr(l.Segments+1) + 200}, {hdr(stray) - 8, hdr(stray) + 8}}
	var asked int
	tb.SetDataAt(func(off int64) (start, end int64, ok bool) {
		asked++
		for _, d := range data {
			if off < d[1] {
				return max(off, d[0]), d[1], true
			}
		}
		return l.End, l.End, true
	})
	var problems []string
	tb.CheckGlobal(func(err error) { problems = append(problems, err.Error()) })
	if want := fmt.Sprintf("overflow tier %d is not zero", stray); len(problems) != 1 || !strings.Contains(problems[0], want) {
		t.Errorf("CheckGlobal found %q; want only %q", problems, want)
	}
	if asked == 0 || asked > 8 { // two passes over the pool, of 4 questions each
		t.Errorf("dataAt asked %d times", asked)
	}
}
