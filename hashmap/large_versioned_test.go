//go:build linux

package hashmap

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

// sameSegmentKeys is n keys other than key that land in key's segment.
func sameSegmentKeys(m *Map, key []byte, n int) [][]byte {
	seg := m.table.For(xxhash.Sum64(key))
	var keys [][]byte
	for i := 0; len(keys) < n; i++ {
		k := fmt.Appendf(nil, "neighbour-%d", i)
		if m.table.For(xxhash.Sum64(k)) == seg {
			keys = append(keys, k)
		}
	}
	return keys
}

// GetVersioned of a large value returns while a writer keeps changing
// another key of its segment: after a few reads that the segment's
// sequence moved under, it reads under the segment's read lock, and the
// version it returns is current once the writer stops.
func TestLargeGetVersionedWhileItsSegmentChanges(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 1000, AverageKeySize: 16, AverageValueSize: 100})
	key := []byte("large")
	big := largeValue(32<<20, 11)
	if err := m.Put(key, big); err != nil {
		t.Fatal(err)
	}
	others := sameSegmentKeys(m, key, 2)
	other := others[0]
	seg := m.table.For(xxhash.Sum64(key))
	before := seg.Seq()
	if err := m.Put(other, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := m.Put(other, []byte("w")); err != nil {
		t.Fatal(err)
	}
	if seg.Seq() == before {
		t.Fatal("writes of another key leave the segment's sequence as it was: the test lost its point")
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Two writers, so that the segment's sequence moves even while the
	// OS has one of them off its core.
	for _, k := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := m.Put(k, fmt.Appendf(nil, "value-%d", i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	reads := 10
	if testing.Short() {
		reads = 3
	}
	done := make(chan error, 1)
	go func() {
		for range reads {
			got, _, err := m.GetVersioned(nil, key)
			if err == nil && !bytes.Equal(got, big) {
				err = fmt.Errorf("GetVersioned = %d bytes, not the %d put", len(got), len(big))
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	// A livelock detector, not a timing: each read takes milliseconds.
	select {
	case err := <-done:
		close(stop)
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		close(stop) // lets the reader through, so the test ends
		<-done
		t.Fatalf("%d GetVersioned of a large value did not return in a minute while another key of its segment was written", reads)
	}
	wg.Wait()
	got, v, err := m.GetVersioned(nil, key)
	if err != nil || !bytes.Equal(got, big) || !m.Unchanged(v) {
		t.Fatalf("GetVersioned once the writer stopped = %d bytes, %v, unchanged %v", len(got), err, m.Unchanged(v))
	}
}
