//go:build linux

package ipc

import (
	"slices"
	"testing"
	"time"
)

// TestPartiesNameTheLocksHoldersAndWaiters: three arenas on one set of
// words stand for three processes. Parties names the slot of the one that
// holds a lock and of the one that waits for it (ttas: the holder, which
// its word names; its waiters keep no record), for that lock only, and no
// slot once both are done; after a Recover that takes the slot of a holder
// for dead, it names that slot no more, so that a look for dead parties
// after the pass finds none and runs no second pass.
func TestPartiesNameTheLocksHoldersAndWaiters(t *testing.T) {
	for _, algo := range []string{"hapax-cr", "hapax", "hapax-vw", "tidex", "ticket-awn", "ttas"} {
		t.Run(algo, func(t *testing.T) {
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
			p := make([]*Arena, 3)
			locks := make([]Mutex, 3)
			for i := range p {
				if p[i], err = Attach(words); err != nil {
					t.Fatal(err)
				}
				if err := p[i].SetJournals(journals, i); err != nil {
					t.Fatal(err)
				}
				if locks[i], err = p[i].Mutex(algo, 1); err != nil {
					t.Fatal(err)
				}
				defer closeWithin(t, p[i], 5*time.Second)
			}
			if _, err := p[0].Mutex(algo, 0); err != nil {
				t.Fatal(err)
			}
			parties := func(lock int) []int {
				s := p[0].Parties(algo, lock, nil)
				slices.Sort(s)
				return s
			}
			want := func(lock int, slots ...int) {
				t.Helper()
				deadline := time.Now().Add(5 * time.Second)
				for !slices.Equal(parties(lock), slots) {
					if time.Now().After(deadline) {
						t.Fatalf("parties to lock %d: %v, want %v", lock, parties(lock), slots)
					}
					time.Sleep(time.Millisecond)
				}
			}
			want(1)
			locks[1].Lock()
			want(1, 1)
			want(0)
			done := make(chan error, 1)
			go func() {
				err := locks[2].LockTimeout(5 * time.Second)
				if err == nil {
					err = locks[2].Unlock()
				}
				done <- err
			}()
			if algo != "ttas" {
				want(1, 1, 2)
			}
			if err := locks[1].Unlock(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			want(1)

			locks[1].Lock() // and "dies" holding it
			want(1, 1)
			if _, err := p[0].Recover(algo, func(slot int) bool { return slot != 1 }); err != nil {
				t.Fatal(err)
			}
			want(1)
			if err := locks[0].LockTimeout(5 * time.Second); err != nil {
				t.Fatalf("the dead holder's lock after Recover: %v", err)
			}
			if err := locks[0].Unlock(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
