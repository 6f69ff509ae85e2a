//go:build linux

package offheap

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestAddExclusiveUnderLock: adds made by one writer at a time, as the lock
// in the file guarantees, are all counted, and a reader loading the word
// atomically meanwhile never sees it go backwards. The word is in a mapped
// file, as every word AddExclusive is for (the race detector sees no
// access to mapped memory; on the Go heap it would report the plain add
// against the atomic load). This checks the arithmetic only: the ordering
// against the stores between a sequence's steps is what
// hashmap.TestCrossProcessNoTornReads checks, and it fails when the odd
// step is left out.
func TestAddExclusiveUnderLock(t *testing.T) {
	word := mapTemp(t, 4096).Uint64(64)
	var mu sync.Mutex
	var wg sync.WaitGroup
	const writers, adds = 4, 10_000
	done := make(chan struct{})
	var backwards atomic.Bool
	var reader sync.WaitGroup
	reader.Add(1)
	go func() {
		defer reader.Done()
		last := uint64(0)
		for {
			select {
			case <-done:
				return
			default:
			}
			v := atomic.LoadUint64(word)
			if v < last {
				backwards.Store(true)
			}
			last = v
		}
	}()
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range adds {
				mu.Lock()
				AddExclusive(word, 1)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(done)
	reader.Wait() // before the region is unmapped
	if got := atomic.LoadUint64(word); got != writers*adds {
		t.Fatalf("word is %d after %d adds", got, writers*adds)
	}
	if backwards.Load() {
		t.Fatal("a reader saw the word go backwards")
	}
}

// TestLoadAfterLoads: the closing read of a sequence lock returns the
// word's value (its ordering is the architecture's: seqread.go; .ci/arm64
// runs this on the arm64 version).
func TestLoadAfterLoads(t *testing.T) {
	words := []uint64{0, 1, 1 << 63, ^uint64(0)}
	for i := range words {
		if got := LoadAfterLoads(&words[i]); got != words[i] {
			t.Fatalf("LoadAfterLoads of %#x gave %#x", words[i], got)
		}
	}
}
