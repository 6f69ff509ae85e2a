//go:build linux

package hashmap

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// tierEntriesOff is the offset in a tier of its count of entries.
const tierEntriesOff = 8

// CheckWith finds the same problems, in the same order (by segment),
// whether one goroutine checks the segments or several do, and as Check
// does; Progress is told done of total segments, done never falling, never
// by two goroutines at once, and last with every segment done.
func TestCheckWithWorkersAndProgress(t *testing.T) {
	const segments = 64
	m, path := openTemp(t, &Options{Entries: segments * 64, Segments: segments, AverageKeySize: 8, AverageValueSize: 16})
	for i := range 2000 {
		if err := m.Put(fmt.Appendf(nil, "key-%d", i), []byte("value")); err != nil {
			t.Fatal(err)
		}
	}
	l := *m.layout
	damaged := []int64{3, 17, 18, 40, 63}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for _, seg := range damaged {
		writeWord(t, path, l.TiersOff+seg*l.TierSize+tierEntriesOff, 999)
	}
	m, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	list := func(problems []Problem, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		s := ""
		for _, p := range problems {
			s += fmt.Sprintf("%d: %v\n", p.Segment, p.Err)
		}
		return s
	}
	want := list(m.Check())
	for _, seg := range damaged {
		if s := fmt.Sprintf("%d: ", seg); !strings.Contains("\n"+want, "\n"+s) {
			t.Fatalf("Check names no problem of segment %d:\n%s", seg, want)
		}
	}
	for _, workers := range []int{1, 2, 4, 100} {
		var mu sync.Mutex
		var calls []int
		progress := func(done, total int) {
			if !mu.TryLock() {
				t.Errorf("workers=%d: Progress called by two goroutines at once", workers)
				return
			}
			defer mu.Unlock()
			if total != segments || done < 0 || done > total || len(calls) > 0 && done < calls[len(calls)-1] {
				t.Errorf("workers=%d: Progress(%d, %d) after %v", workers, done, total, calls)
			}
			calls = append(calls, done)
		}
		got := list(m.CheckWith(CheckOptions{Workers: workers, Progress: progress}))
		if got != want {
			t.Errorf("workers=%d: CheckWith found\n%s\nCheck found\n%s", workers, got, want)
		}
		if len(calls) == 0 || calls[len(calls)-1] != segments {
			t.Errorf("workers=%d: Progress calls %v, want the last with done = %d", workers, calls, segments)
		}
	}
}
