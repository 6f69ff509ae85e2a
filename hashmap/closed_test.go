//go:build linux

package hashmap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/ipc"
)

// Every method of a closed map answers (ErrClosed, or a zero value where
// the method has no error) instead of touching the unmapped file; so does
// a Range whose body closes the map.
func TestClosedMapAnswers(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000, Segments: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := m.Put([]byte{byte(i)}, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	var rerr error
	seen := 0
	for range m.Range(&rerr) {
		if seen++; seen == 1 {
			m.Close()
		}
	}
	if !errors.Is(rerr, ErrClosed) || seen > 100 {
		t.Fatalf("Range closed by its body: %d entries, error %v", seen, rerr)
	}
	if n := m.Len(); n != 0 {
		t.Errorf("Len after Close = %d", n)
	}
	if st := m.Stats(); st != (Stats{}) {
		t.Errorf("Stats after Close = %+v", st)
	}
	if s := m.Segments(); s != nil {
		t.Errorf("Segments after Close = %v", s)
	}
	if ms := m.Metrics(); ms != nil {
		t.Errorf("Metrics after Close = %v", ms)
	}
	if err := m.WritePrometheus(new(nopWriter), "m"); err != nil {
		t.Errorf("WritePrometheus after Close: %v", err)
	}
	if _, err := m.Get([]byte{1}); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// A TTL too long for the clock's range used to wrap to an expiry in the
// past: Put succeeded and the entry was gone at once.
func TestHugeTTLDoesNotExpire(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000, Cache: true, DefaultTTL: math.MaxInt64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.PutWithTTL([]byte("a"), []byte("1"), 2_500_000*time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := m.Put([]byte("b"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := m.Get([]byte(k)); err != nil {
			t.Errorf("Get(%q) after a Put with a huge TTL: %v", k, err)
		}
	}
}

// DefaultTTL without Cache is refused before a new file is made, so the
// corrected Open (with Cache) can create the map.
func TestDefaultTTLWithoutCacheLeavesNoFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m")
	if _, err := Open(p, &Options{DefaultTTL: time.Hour}); !errors.Is(err, ErrNotCache) {
		t.Fatalf("Open with DefaultTTL and no Cache: %v", err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused Open left a file: %v", err)
	}
	m, err := Open(p, &Options{DefaultTTL: time.Hour, Cache: true})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}

// TestCloseWhileCallsRun closes the map while goroutines are in every
// kind of call. Before Close counted calls in and out, it unmapped the
// file under them and the process died with SIGSEGV (the first round
// did it). Now every call
// answers correctly or with ErrClosed (a Get is never answered from what
// Close leaves behind), Close returns promptly, and the file reopens
// sound: every Compute that returned nil is in it, none that did not.
func TestCloseWhileCallsRun(t *testing.T) {
	// With Close unmapping the file (and calls counted), 2 runs in 3
	// crashed at 30 rounds.
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	path := filepath.Join(t.TempDir(), "m")
	for round := range rounds {
		closeDuringCalls(t, path, round)
		if t.Failed() {
			return
		}
	}
}

const (
	closeTestKeys     = 256
	closeTestCounters = 8
)

// The keys and values are made once: a goroutine is preempted mostly in
// calls that grow its stack or allocate, and those should be in the map's
// code, not in the test's.
var closeTestKeyValues = func() (kv [closeTestKeys][2][]byte) {
	for i := range kv {
		kv[i][0] = fmt.Appendf(nil, "k%04d", i)
		kv[i][1] = fmt.Appendf(nil, "value of k%04d %s", i, strings.Repeat("x", i%97))
	}
	return kv
}()

func closeTestKey(i int) []byte   { return closeTestKeyValues[i][0] }
func closeTestValue(i int) []byte { return closeTestKeyValues[i][1] }

// closeTestCounter reads counter j (0 if no Compute has made it).
func closeTestCounter(m *Map, j int) (int64, error) {
	v, err := m.Get(fmt.Appendf(nil, "c%d", j))
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	case len(v) != 8:
		return 0, fmt.Errorf("counter %d is %q", j, v)
	}
	return int64(binary.LittleEndian.Uint64(v)), nil
}

func closeDuringCalls(t *testing.T, path string, round int) {
	opts := &Options{Entries: 4096, Segments: 8, Locks: 2, LockTimeout: 100 * time.Millisecond}
	m, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	if round == 0 {
		for i := range closeTestKeys {
			if err := m.Put(closeTestKey(i), closeTestValue(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var computed [closeTestCounters]atomic.Int64
	for j := range closeTestCounters {
		n, err := closeTestCounter(m, j)
		if err != nil {
			t.Fatal(err)
		}
		computed[j].Store(n)
	}
	// Every other round, the goroutines only read without locks, which
	// Close does not wait for. Running goroutines see closed within a Get,
	// long before Close lets the file go; but with many more goroutines
	// than cores, running long enough for the scheduler to preempt them,
	// some wait for their turn in the middle of a Get meanwhile.
	lockFreeOnly := round%2 == 1
	workers, runFor := 6, time.Duration(rand.IntN(3000))*time.Microsecond
	if lockFreeOnly {
		workers, runFor = 16, 30*time.Millisecond
	}
	var (
		mu       sync.Mutex
		problems []string
		calls    atomic.Int64
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}
	// answered checks an error: nil, ErrClosed (stop), or a failure.
	answered := func(op string, err error) (stop bool) {
		switch {
		case err == nil:
			return false
		case errors.Is(err, ErrClosed):
			return true
		}
		fail("%s: %v", op, err)
		return true
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
			buf := make([]byte, 0, 256)
			keys, values, stored := make([][]byte, 20), make([][]byte, 20), make([][]byte, 20)
			for {
				calls.Add(1)
				i := rng.IntN(closeTestKeys)
				var err error
				op := rng.IntN(12)
				if lockFreeOnly {
					op = 0
					if rng.IntN(8) == 0 {
						op = 8
					}
				}
				switch op {
				case 0:
					buf, err = m.GetInto(buf[:0], closeTestKey(i))
					if err == nil && !bytes.Equal(buf, closeTestValue(i)) {
						fail("GetInto(k%04d) = %q", i, buf)
					}
				case 1:
					err = m.Put(closeTestKey(i), closeTestValue(i))
				case 2, 3:
					j := rng.IntN(closeTestCounters)
					err = m.Compute(fmt.Appendf(nil, "c%d", j), func(old []byte, found bool) ([]byte, bool) {
						n := uint64(0)
						if found {
							n = binary.LittleEndian.Uint64(old)
						}
						return binary.LittleEndian.AppendUint64(nil, n+1), true
					})
					if err == nil {
						computed[j].Add(1)
					}
				case 4:
					for k := range keys {
						keys[k] = closeTestKey((i + k) % closeTestKeys)
					}
					if err = m.GetMany(keys, values); err == nil {
						for k, v := range values {
							if want := closeTestValue((i + k) % closeTestKeys); !bytes.Equal(v, want) {
								fail("GetMany: %q = %q", keys[k], v)
							}
						}
					}
				case 5:
					for k := range keys {
						keys[k], stored[k] = closeTestKey((i+k)%closeTestKeys), closeTestValue((i+k)%closeTestKeys)
					}
					_, err = m.PutMany(keys, stored) // not values: GetMany writes into those
				case 6:
					for k, v := range m.RangeView(&err) {
						if k[0] == 'k' {
							n, _ := strconv.Atoi(string(k[1:]))
							if !bytes.Equal(v, closeTestValue(n)) {
								fail("Range: %q = %q", k, v)
							}
						}
					}
				case 7:
					_ = m.Len()
					_ = m.Stats()
					_ = m.Segments()
				case 8:
					var v Version
					buf, v, err = m.GetVersioned(buf[:0], closeTestKey(i))
					if err == nil && !bytes.Equal(buf, closeTestValue(i)) {
						fail("GetVersioned(k%04d) = %q", i, buf)
					}
					_ = m.Unchanged(v)
				case 9:
					var found bool
					if found, err = m.Contains(closeTestKey(i)); err == nil && !found {
						fail("Contains(k%04d) = false", i)
					}
				case 10:
					// Lock 1 is taken and given back; Close may come between.
					if err = m.Locks().Lock(1); err == nil {
						err = m.Locks().Unlock(1)
					}
				case 11:
					scratch := fmt.Appendf(nil, "s%d", w)
					if _, err = m.PutIfAbsent(scratch, []byte("s")); err == nil {
						_, err = m.Delete(scratch)
					}
				}
				if answered(fmt.Sprint("op ", op), err) {
					return
				}
			}
		}()
	}
	time.Sleep(runFor)
	start := time.Now()
	if err := m.Close(); err != nil {
		t.Fatalf("round %d: Close: %v", round, err)
	}
	took := time.Since(start)
	wg.Wait()
	for _, p := range problems {
		t.Errorf("round %d: %s", round, p)
	}
	if took > 10*time.Second { // calls end within a LockTimeout or ipc.CloseWait; the margin is for a loaded machine
		t.Errorf("round %d: Close took %v", round, took)
	}
	if _, err := m.Get(closeTestKey(0)); !errors.Is(err, ErrClosed) {
		t.Errorf("round %d: Get after Close: %v", round, err)
	}

	m, err = Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// A Close between Lock and Unlock leaves lock 1 held, as any lock
	// held at Close stays held in the file.
	_ = m.Locks().Unlock(1)
	if problems, err := m.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("round %d: Check after Close: %v %v", round, problems, err)
	}
	for j := range closeTestCounters {
		if got, err := closeTestCounter(m, j); err != nil || got != computed[j].Load() {
			t.Fatalf("round %d: counter %d = %d (%v), %d Computes returned nil", round, j, got, err, computed[j].Load())
		}
	}
	for i := range closeTestKeys {
		if v, err := m.Get(closeTestKey(i)); err != nil || !bytes.Equal(v, closeTestValue(i)) {
			t.Fatalf("round %d: k%04d = %q, %v", round, i, v, err)
		}
	}
	t.Logf("round %d: %d calls, Close took %v", round, calls.Load(), took)
}

// A LockTable.Lock, and a LockTimeout of an hour, waiting for a lock
// another goroutine holds give up when the map is closed, within
// LockTimeout, so Close does not wait for the holder; with every lock
// algorithm.
func TestCloseEndsLockWait(t *testing.T) {
	for _, alg := range ipc.Algorithms() {
		t.Run(alg.Name, func(t *testing.T) {
			t.Parallel()
			m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 100, Locks: 1, LockAlgorithm: alg.Name, LockTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Locks().Lock(0); err != nil {
				t.Fatal(err)
			}
			waited := make(chan error, 2)
			go func() { waited <- m.Locks().Lock(0) }()
			go func() { waited <- m.Locks().LockTimeout(0, time.Hour) }()
			time.Sleep(50 * time.Millisecond) // let it wait
			start := time.Now()
			closed := make(chan error)
			go func() { closed <- m.Close() }()
			select {
			case err := <-closed:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Close still waits for the Lock after 10s")
			}
			took := time.Since(start)
			for range 2 {
				if err := <-waited; !errors.Is(err, ErrClosed) {
					t.Errorf("a waiting Lock or LockTimeout returned %v", err)
				}
			}
			// One LockTimeout for the wait, and up to ipc.CloseWait (1s) for
			// the goroutine its FIFO turn is left to: about 1.2 s, with a
			// margin for nine algorithms at once on a loaded machine.
			if took > 5*time.Second {
				t.Errorf("Close took %v", took)
			}
			t.Logf("Close took %v", took)
		})
	}
}
