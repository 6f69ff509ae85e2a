package inflight

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCloseWaitsForCalls: Close returns only after every call that
// entered has left, no call enters after Close has begun, and a second
// Close reports false at once.
func TestCloseWaitsForCalls(t *testing.T) {
	for round := range 50 {
		var g Gate
		var inside, leftAfterClose atomic.Int64
		var closed atomic.Bool
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := uint64(0); ; i++ {
					c := g.Enter(i*0x9E3779B97F4A7C15 + uint64(w))
					if c == nil {
						return
					}
					inside.Add(1)
					if closed.Load() {
						leftAfterClose.Add(1) // entered, and Close already returned
					}
					if i%64 == 0 {
						time.Sleep(10 * time.Microsecond)
					}
					inside.Add(-1)
					c.Leave()
				}
			}()
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		if !g.Close() {
			t.Fatal("first Close reported the gate closed already")
		}
		closed.Store(true)
		if n := inside.Load(); n != 0 {
			t.Fatalf("round %d: Close returned with %d calls inside", round, n)
		}
		if g.Close() {
			t.Fatal("second Close reported it closed the gate")
		}
		if g.Enter(0) != nil || !g.Closed() {
			t.Fatal("Enter succeeded after Close")
		}
		wg.Wait()
		if n := leftAfterClose.Load(); n != 0 {
			t.Fatalf("round %d: %d calls entered after Close returned", round, n)
		}
	}
}
