//go:build linux

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

// heldDecoder is Int64 whose Decode, once armed is closed, waits for
// release: a slow decoder (JSON of a large value, say) held still, so that
// a Get stays inside the near-cache while Close runs.
type heldDecoder struct{ armed, release chan struct{} }

func (c heldDecoder) Append(dst []byte, v int64) ([]byte, error) { return Int64().Append(dst, v) }
func (c heldDecoder) Decode(b []byte) (int64, error) {
	select {
	case <-c.armed:
		<-c.release
	default:
	}
	return Int64().Decode(b)
}

// TestNearStatsNeverGoBackAtClose: while Close waits for a Get inside the
// near-cache, NearStats keeps counting from where it was (it read 0, 0
// once: the counts were stored only when Close ended), and a second Close
// returns only once the first has, with the final counts readable.
func TestNearStatsNeverGoBackAtClose(t *testing.T) {
	codec := heldDecoder{armed: make(chan struct{}), release: make(chan struct{})}
	m, err := NewCached(openRaw(t, 100), String(), Codec[int64](codec), 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k", "j"} {
		if err := m.Put(k, 7); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for hits, _ := m.NearStats(); hits == 0; hits, _ = m.NearStats() { // ristretto's Set is buffered
		if time.Now().After(deadline) {
			t.Fatal("the near-cache never served k")
		}
		_, _ = m.Get("k")
		time.Sleep(time.Millisecond)
	}
	hits0, misses0 := m.NearStats()
	close(codec.armed)
	got := make(chan error, 1)
	go func() { _, err := m.Get("j"); got <- err }() // a miss: it decodes inside the near-cache
	waitFor(t, func() bool { _, misses := m.NearStats(); return misses == misses0+1 })
	closed := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	go func() { _ = m.Close(); close(closed[0]) }()
	waitFor(t, func() bool { return m.near.Load() == nil })
	go func() { _ = m.Close(); close(closed[1]) }()
	time.Sleep(20 * time.Millisecond) // time for a second Close to return early
	for i, c := range closed {
		select {
		case <-c:
			t.Errorf("Close %d returned while a Get was still inside the near-cache", i+1)
		default:
		}
	}
	if hits, misses := m.NearStats(); hits != hits0 || misses != misses0+1 {
		t.Errorf("NearStats while Close waits = %d, %d; want %d, %d", hits, misses, hits0, misses0+1)
	}
	close(codec.release)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	<-closed[0]
	<-closed[1]
	if hits, misses := m.NearStats(); hits != hits0 || misses != misses0+1 {
		t.Errorf("NearStats after Close = %d, %d; want %d, %d", hits, misses, hits0, misses0+1)
	}
	if v, err := m.Get("j"); err != nil || v != 7 {
		t.Errorf("Get after Close = %d, %v; want 7 from the map", v, err)
	}
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}
