package typed

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// TestCloseWhileGetsRun closes a near-cached Map, and then the hashmap.Map
// under it, while goroutines Get and GetMany through it. ristretto's Close
// must not run under its Set (a send on a closed channel panics), so Close
// waits for the near-cache's users; Gets after it read the map directly,
// and after the map's Close answer hashmap.ErrClosed.
func TestCloseWhileGetsRun(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	for round := range rounds {
		raw := openRaw(t, 4096)
		m, err := NewCached(raw, String(), Int64(), 64) // small: Sets all the time
		if err != nil {
			t.Fatal(err)
		}
		keys := make([]string, 512)
		for i := range keys {
			keys[i] = fmt.Sprint("k", i)
			if err := m.Put(keys[i], int64(i)); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				vals, found := make([]int64, 4), make([]bool, 4)
				for i := w; ; i += 7 {
					var err error
					if i%5 == 0 {
						j := i % (len(keys) - 4)
						if err = m.GetMany(keys[j:j+4], vals, found); err == nil && (vals[3] != int64(j+3) || !found[3]) {
							err = fmt.Errorf("GetMany %v = %v %v", keys[j:j+4], vals, found)
						}
					} else {
						var v int64
						if v, err = m.Get(keys[i%len(keys)]); err == nil && v != int64(i%len(keys)) {
							err = fmt.Errorf("Get(%s) = %d", keys[i%len(keys)], v)
						}
					}
					if errors.Is(err, hashmap.ErrClosed) {
						return
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		time.Sleep(time.Duration(round%4) * time.Millisecond)
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
		if err := raw.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}
