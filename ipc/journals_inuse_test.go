//go:build linux

package ipc

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestJournalsPastInUseAreNotRead: with SetJournalsInUse, a journal past
// the count in use is neither named by Parties nor touched by Recover,
// though it holds an episode of a dead process on a lock; once the count
// covers it, both see it.
func TestJournalsPastInUseAreNotRead(t *testing.T) {
	cfg := Config{Slots: 64, Locks: 2}
	n, err := cfg.Words()
	if err != nil {
		t.Fatal(err)
	}
	words := make([]uint64, n)
	if err := Format(words, cfg); err != nil {
		t.Fatal(err)
	}
	journals := [][]uint64{bytesToJournal(nil), bytesToJournal(nil), bytesToJournal(nil)}
	// An arrival of a process in slot 2 on lock 1, left by its death.
	state := packState(jArriving, kindHapax, 1)
	journals[2][0] = state
	var inUse atomic.Int64
	inUse.Store(2)
	a, err := Attach(words)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, a, 5*time.Second)
	if err := a.SetJournalsInUse(journals, 0, func() int { return int(inUse.Load()) }); err != nil {
		t.Fatal(err)
	}
	dead := func(slot int) bool { return slot == 0 }
	if p := a.Parties("hapax", 1, nil); len(p) != 0 {
		t.Fatalf("Parties past the journals in use: %v", p)
	}
	if _, err := a.Recover("hapax", dead); err != nil {
		t.Fatal(err)
	}
	if atomic.LoadUint64(&journals[2][0]) != state {
		t.Fatal("Recover changed a journal past those in use")
	}
	inUse.Store(3)
	if p := a.Parties("hapax", 1, nil); len(p) != 1 || p[0] != 2 {
		t.Fatalf("Parties with every journal in use: %v, want [2]", p)
	}
	if _, err := a.Recover("hapax", dead); err != nil {
		t.Fatal(err)
	}
	if atomic.LoadUint64(&journals[2][0]) == state {
		t.Fatal("Recover left a dead process's episode in a journal in use")
	}
}
