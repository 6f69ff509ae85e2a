package ipc

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// ticketAWNConfigs cover every way a ticket-awn waiter can wait: on its node
// (default), on egress because the array is full (4 entries leave room for
// 2 nodes) or the node table is used up (2 nodes), and with no arrays at all
// (a plain ticket lock, as in arenas from before ticket-awn).
var ticketAWNConfigs = []Config{
	{Locks: 1},
	{Locks: 1, AWNWaiters: 4, AWNNodes: 2},
	{Locks: 1, AWNWaiters: 2},
	{Locks: 1, AWNWaiters: -1, AWNNodes: -1},
}

// TestTicketAWNInProcess: exclusion and progress for each configuration,
// with critical sections long enough that queues form and nodes are used.
func TestTicketAWNInProcess(t *testing.T) {
	for _, cfg := range ticketAWNConfigs {
		t.Run(fmt.Sprintf("waiters=%d/nodes=%d", cfg.AWNWaiters, cfg.AWNNodes), func(t *testing.T) {
			tf := openTestFile(t, createTestFile(t, cfg))
			defer tf.close()
			const goroutines = 8
			iters := 2000
			if testing.Short() {
				iters = 600
			}
			var wg sync.WaitGroup
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					m := tf.mutex(t, "ticket-awn", 0)
					for i := range iters {
						if i%5 == 0 && m.TryLock() {
						} else {
							m.Lock()
						}
						criticalSection(tf.scratch)
						if i%16 == 0 {
							time.Sleep(20 * time.Microsecond) // let a queue build behind us
						}
						if err := m.Unlock(); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			n := tf.scratch[scratchCounter]
			if n != uint64(goroutines*iters) || tf.scratch[scratchPRNG] != replay(n) {
				t.Fatalf("%d critical sections, PRNG replays: %v; want %d: exclusion failed", n, tf.scratch[scratchPRNG] == replay(n), goroutines*iters)
			}
			handovers := tf.arena.AWNNodeHandovers.Load()
			t.Logf("%d of %d acquisitions handed over through a node", handovers, n)
			withNodes := cfg.AWNWaiters >= 0 && cfg.AWNWaiters != 2
			if withNodes && handovers == 0 {
				t.Fatal("no acquisition went through a waiting node: the test did not exercise AWN")
			}
			if !withNodes && handovers != 0 {
				t.Fatalf("%d handovers through nodes in an arena that cannot have any", handovers)
			}
			if m := tf.mutex(t, "ticket-awn", 0); !m.TryLock() {
				t.Fatal("lock not free after every goroutine unlocked")
			} else if err := m.Unlock(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTicketAWNAcrossProcesses: 4 processes x 3 goroutines, nodes from one
// table drawn by every process, array wrap-around with a short array.
func TestTicketAWNAcrossProcesses(t *testing.T) {
	const procs, goroutines = 4, 3
	iters := 3000
	if testing.Short() {
		iters = 1000
	}
	for _, cfg := range ticketAWNConfigs[:2] {
		t.Run(fmt.Sprintf("waiters=%d/nodes=%d", cfg.AWNWaiters, cfg.AWNNodes), func(t *testing.T) {
			path := createTestFile(t, cfg)
			cmds := testutil.Commands("exclusion", procs, "LOCKS_PATH="+path, "LOCKS_ALGO=ticket-awn",
				"LOCKS_GOROUTINES="+strconv.Itoa(goroutines), "LOCKS_ITERS="+strconv.Itoa(iters), "LOCKS_HOLD_EVERY=50")
			if reports := testutil.Run(t, cmds...); len(reports) != procs {
				t.Fatalf("%d of %d helpers reported", len(reports), procs)
			}
			tf := openTestFile(t, path)
			defer tf.close()
			want := uint64(procs * goroutines * iters)
			if got := tf.scratch[scratchCounter]; got != want || tf.scratch[scratchPRNG] != replay(want) {
				t.Fatalf("counter %d (want %d), PRNG replays %v: exclusion failed", got, want, tf.scratch[scratchPRNG] == replay(want))
			}
			if drawn := tf.arena.w[hAWNCursor]; cfg.AWNNodes == 0 && drawn == 0 {
				t.Fatal("no process drew a node from the table")
			}
		})
	}
}

// TestTicketAWNAttachesOldArena: an arena whose header has no ticket-awn
// sizes (written before ticket-awn existed) attaches, and ticket-awn runs
// on it as a ticket lock.
func TestTicketAWNAttachesOldArena(t *testing.T) {
	n, _ := Config{Slots: 2, Locks: 1, AWNWaiters: -1, AWNNodes: -1}.Words()
	old, _ := Config{Slots: 2, Locks: 1}.Words()
	if n >= old {
		t.Fatalf("an arena without arrays (%d words) should be smaller than one with (%d)", n, old)
	}
	w := make([]uint64, n)
	if err := Format(w, Config{Slots: 2, Locks: 1, AWNWaiters: -1, AWNNodes: -1}); err != nil {
		t.Fatal(err)
	}
	if w[hAWNArrays] != 0 || w[hAWNNodes] != 0 {
		t.Fatal("an arena without arrays must leave the header words zero, as old files have them")
	}
	a, err := Attach(w)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := a.Mutex("ticket-awn", 0)
	m.Lock()
	if m.TryLock() {
		t.Fatal("TryLock succeeded on a held lock")
	}
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(); err == nil {
		t.Fatal("double unlock not reported")
	}
}
