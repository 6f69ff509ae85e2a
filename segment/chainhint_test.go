//go:build linux

package segment

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
)

// TestChainHintIsOnlyAHint: a lookup finds every key of a long chain
// whatever the chain hint says (missing, stale, naming another segment's
// tiers, longer than the chain), and learns the chain as it is.
func TestChainHintIsOnlyAHint(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 400, AverageKeySize: 8, AverageValueSize: 24, MaxBloatFactor: 8, Segments: 2})
	var keys [][]byte
	for i := range 2000 {
		k := fmt.Appendf(nil, "key-%04d", i)
		if _, err := tb.For(hashOf(k)).put(hashOf(k), k, bytes.Repeat(k, 3), Replace); err != nil {
			break
		}
		keys = append(keys, k)
	}
	s := tb.Segment(0)
	if s.Tiers() < 4 {
		t.Fatalf("segment 0 chains %d tiers, the test needs 4", s.Tiers())
	}
	getAll := func(when string) {
		t.Helper()
		for _, k := range keys {
			v, found, err := tb.For(hashOf(k)).GetChecked(hashOf(k), k, nil)
			if err != nil || !found || !bytes.Equal(v, bytes.Repeat(k, 3)) {
				t.Fatalf("%s: Get %s = %q, %v, %v", when, k, v, found, err)
			}
		}
	}
	getAll("no hint")
	truth := tb.learnChain(0)
	if int64(len(truth)) != s.Tiers()-1 {
		t.Fatalf("learned %v for a chain of %d tiers", truth, s.Tiers())
	}
	other := tb.learnChain(1)
	for name, hint := range map[string][]int64{
		"reversed":       reversed(truth),
		"another chain":  other,
		"one tier short": truth[:len(truth)-1],
		"past the chain": append(slices.Clone(truth), other...),
	} {
		tb.chainHints[0].Store(&hint)
		getAll(name)
		if got := *tb.chainHints[0].Load(); !slices.Equal(got, truth) && name != "past the chain" {
			t.Errorf("%s: after the lookups the hint is %v, the chain %v", name, got, truth)
		}
	}
}

func reversed(s []int64) []int64 {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}
