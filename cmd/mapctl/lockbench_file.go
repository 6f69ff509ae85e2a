package main

import (
	"os"

	"github.com/sharedmap/sharedmap/ipc"
	"github.com/sharedmap/sharedmap/offheap"
)

// The bench file is an ipc arena with one lock, then these words.
const (
	benchReady   = 0 // goroutines ready to start
	benchStart   = 1 // set to 1 by the parent to start everyone
	benchStop    = 2 // set to 1 by the parent to stop
	benchPRNG    = 8 // the shared PRNG, advanced only inside the critical section
	benchCounts  = 16
	benchWorkers = 4096 // the most procs x goroutines
)

// benchFile is a mapped lock file.
type benchFile struct {
	file   *os.File
	region *offheap.Region
	arena  *ipc.Arena
	words  []uint64 // the bench words after the arena
}

// createBenchFile makes a new bench file at path, its arena formatted for
// one lock and slots waiting slots, and opens it.
func createBenchFile(path string, slots int) (*benchFile, error) {
	cfg := ipc.Config{Slots: slots, Locks: 1}
	n, err := cfg.Words()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(int64(n+benchCounts+benchWorkers) * 8); err != nil {
		f.Close()
		return nil, err
	}
	b, err := mapBenchFile(f, n, false)
	if err != nil {
		return nil, err
	}
	if err := ipc.Format(b.region.Uint64s(0, int64(n)), cfg); err != nil {
		b.close()
		return nil, err
	}
	b.close()
	return openBenchFile(path)
}

// openBenchFile maps the bench file at path and attaches to its arena.
func openBenchFile(path string) (*benchFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return mapBenchFile(f, int(st.Size()/8)-benchCounts-benchWorkers, true)
}

// mapBenchFile maps f, whose arena is arenaWords long, attaching to the
// arena if attach; it closes f if it fails.
func mapBenchFile(f *os.File, arenaWords int, attach bool) (*benchFile, error) {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	r, err := offheap.MapRegion(f, st.Size(), true)
	if err != nil {
		f.Close()
		return nil, err
	}
	b := &benchFile{file: f, region: r, words: r.Uint64s(int64(arenaWords)*8, benchCounts+benchWorkers)}
	if attach {
		if b.arena, err = ipc.Attach(r.Uint64s(0, int64(arenaWords))); err != nil {
			b.close()
			return nil, err
		}
	}
	return b, nil
}

func (b *benchFile) close() {
	b.region.Unmap()
	b.file.Close()
}
