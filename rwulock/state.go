package rwulock

import (
	"fmt"
	"strings"
)

// State is a decoded snapshot of a lock word, for diagnostics and the CLI.
// It is stale as soon as it is read.
type State struct {
	Raw     uint64 // the whole 64-bit word
	Readers uint32 // read lock count
	Update  bool   // update lock flag
	Write   bool   // write lock flag
	Waiters uint32 // wait count: writers and upgraders waiting
}

// Decode splits a raw lock word into its fields.
func Decode(raw uint64) State {
	c := countWord(raw)
	return State{
		Raw:     raw,
		Readers: c & ReadCountMask,
		Update:  c&UpdateFlag != 0,
		Write:   c&WriteFlag != 0,
		Waiters: waitWord(raw),
	}
}

// Free reports whether nobody holds or waits for the lock.
func (s State) Free() bool { return s.Raw == 0 }

// String renders the state on one line, e.g.
// "readers=2 update write=no waiters=1 (0x0000000140000002)".
func (s State) String() string {
	var b strings.Builder
	if s.Free() {
		return fmt.Sprintf("free (0x%016x)", s.Raw)
	}
	parts := make([]string, 0, 4)
	if s.Write {
		parts = append(parts, "write")
	}
	if s.Update {
		parts = append(parts, "update")
	}
	if s.Readers > 0 {
		parts = append(parts, fmt.Sprintf("readers=%d", s.Readers))
	}
	if s.Waiters > 0 {
		parts = append(parts, fmt.Sprintf("waiters=%d", s.Waiters))
	}
	b.WriteString(strings.Join(parts, " "))
	fmt.Fprintf(&b, " (0x%016x)", s.Raw)
	return b.String()
}
