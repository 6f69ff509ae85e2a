//go:build linux

package registry

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/offheap"
	"golang.org/x/sys/unix"
)

// benchRegistry makes a registry of slots slots whose first claimed slots
// were claimed (the high-water mark; without one, highWater false, every
// slot is scanned), their locks held by another open file description
// when held is set, and returns a Registry attached to it and the layout.
// Ledgers are those of a map of 64 segments with fast ledgers and
// counters.
func benchRegistry(b *testing.B, slots, claimed int, highWater, held bool) (*Registry, Layout) {
	b.Helper()
	l := Layout{Off: offheap.HeaderSize, Slots: slots, Ledgers: 128, Counters: 128, HighWater: highWater}
	path := filepath.Join(b.TempDir(), "reg")
	open := func() *offheap.File { return openLayout(b, path, l) }
	f := open()
	if highWater {
		atomic.StoreUint64(f.Uint64(l.Off+hHighWater), uint64(claimed))
	}
	for i := range claimed {
		atomic.StoreUint64(f.Uint64(l.slotOff(i)+sState), stateInUse)
		atomic.StoreUint64(f.Uint64(l.slotOff(i)+sPID), 1)
	}
	if held {
		other := open()
		fd, err := other.LockFile()
		if err != nil {
			b.Fatal(err)
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Start: lockFileSlot0, Len: int64(claimed)}
		if err := unix.FcntlFlock(fd, unix.F_OFD_SETLK, &lk); err != nil {
			b.Fatal(err)
		}
	}
	r, err := Attach(f, l)
	if err != nil {
		b.Fatal(err)
	}
	return r, l
}

// BenchmarkLive is one liveness scan (Live) of a registry of slots slots
// of which claimed were ever claimed, all still held: with a high-water
// mark, and without one (every slot scanned, as in files from before it).
func BenchmarkLive(b *testing.B) {
	for _, slots := range []int{64, 1024, 4096} {
		for _, claimed := range []int{64, 1024, 4096} {
			if claimed > slots {
				continue
			}
			for _, hw := range []bool{true, false} {
				if !hw && claimed != slots {
					continue // without a mark the scan is of every slot
				}
				name := fmt.Sprintf("slots=%d/claimed=%d/mark=%v", slots, claimed, hw)
				b.Run(name, func(b *testing.B) {
					r, _ := benchRegistry(b, slots, claimed, hw, true)
					var live []int
					for b.Loop() {
						var err error
						if live, err = r.Live(live[:0]); err != nil || len(live) != claimed {
							b.Fatalf("Live: %d, %v", len(live), err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(claimed), "ns/slot")
				})
			}
		}
	}
}

// BenchmarkJoin is a Join that finds the claimed slots below the mark all
// held by live processes and claims the one past it, then a Leave (the
// mark put back, so that every Join does the same): the worst case of a
// Join in a registry of slots slots.
func BenchmarkJoin(b *testing.B) {
	for _, slots := range []int{64, 1024, 4096} {
		for _, claimed := range []int{63, 1023, 4095} {
			if claimed >= slots {
				continue
			}
			b.Run(fmt.Sprintf("slots=%d/claimed=%d", slots, claimed), func(b *testing.B) {
				r, l := benchRegistry(b, slots, claimed, true, true)
				for b.Loop() {
					i, err := r.Join(time.Second)
					if err != nil || i != claimed {
						b.Fatalf("Join = %d, %v", i, err)
					}
					if err := r.Leave(); err != nil {
						b.Fatal(err)
					}
					atomic.StoreUint64(r.file.Uint64(l.Off+hHighWater), uint64(claimed))
				}
			})
		}
	}
}
