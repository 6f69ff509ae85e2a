package hashmap

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

// TestDeleteFuncJudgesAKeyOnceAcrossSplits: DeleteFunc's fn sees each key
// present throughout once, though a writer's inserts split segments that
// DeleteFunc has passed, moving keys it judged into segments it visits
// later.
func TestDeleteFuncJudgesAKeyOnceAcrossSplits(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 2_000, AverageKeySize: 12, AverageValueSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const base = 2000
	for i := range base {
		if err := m.Put(fmt.Appendf(nil, "base-%06d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	before := m.Stats().Segments
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 20000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Appendf(nil, "new-%07d", i)
			if xxhash.Sum64(k)&1 != 0 {
				continue // keys of segment 0 alone, which DeleteFunc passes first
			}
			_ = m.Put(k, []byte("v"))
		}
	}()
	calls := map[string]int{}
	_, err = m.DeleteFunc(func(k, v []byte) bool {
		calls[string(k)]++
		time.Sleep(20 * time.Microsecond)
		return false
	})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	after := m.Stats().Segments
	twice, missed := 0, 0
	for i := range base {
		switch calls[fmt.Sprintf("base-%06d", i)] {
		case 0:
			missed++
		case 1:
		default:
			twice++
		}
	}
	t.Logf("segments %d -> %d during DeleteFunc", before, after)
	if twice > 0 || missed > 0 {
		t.Errorf("of %d keys present throughout, fn judged %d more than once and %d never", base, twice, missed)
	}
	if after == before {
		t.Errorf("no split during DeleteFunc (%d segments): the test tests nothing", after)
	}
}
