package ipc

import "testing"

// TestEntryStateLayout holds the journal state word's bit layout, which is
// part of the file format (docs/FORMAT.md, "Journal entry"): packState and
// entryState's methods must agree with it and with each other.
func TestEntryStateLayout(t *testing.T) {
	w := packState(jSeatHold|adopted, kindCR, 0xabcdef) | registered
	if want := uint64(1)<<40 | 0xabcdef<<16 | kindCR<<8 | 0x80 | jSeatHold; w != want {
		t.Fatalf("packState: %#x, want %#x", w, want)
	}
	s := entryState(w)
	if s.phase() != jSeatHold || !s.adopted() || s.kind() != kindCR || s.lock() != 0xabcdef || !s.registered() {
		t.Fatalf("decoded %#x as phase %d adopted %v kind %d lock %#x registered %v",
			w, s.phase(), s.adopted(), s.kind(), s.lock(), s.registered())
	}
	if !s.seat() || !s.on(kindCR, 0xabcdef) || s.bare() || s.stray() {
		t.Fatalf("%#x: seat %v on %v bare %v stray %v", w, s.seat(), s.on(kindCR, 0xabcdef), s.bare(), s.stray())
	}
	if got := entryState(s.withPhase(jFree)); got.phase() != jFree || !got.adopted() || got.lock() != 0xabcdef {
		t.Fatalf("withPhase(jFree) of %#x: %#x", w, uint64(got))
	}
	if !entryState(jFree|adopted).bare() || !entryState(1<<41).stray() {
		t.Fatal("bare or stray misread")
	}
}
