package segment

import "testing"

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
