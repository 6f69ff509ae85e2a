//go:build linux

package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// addressSpace is this process's address space in KiB (VmSize). Linux
// always has /proc/self/status: a test that cannot read it fails.
func addressSpace(t *testing.T) int64 {
	t.Helper()
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "VmSize:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(v, "kB")), 10, 64)
			if err == nil {
				return kib
			}
		}
	}
	t.Fatal("no VmSize in /proc/self/status")
	return 0
}

// TestOpenAndCloseInALoopKeepsTheAddressSpace: a default map opened,
// read and closed hundreds of times, read-only every third time, leaves
// the process's address space about as it was. Close keeps the mapping's
// addresses reserved for lock-free readers still running; before the next
// Open of the same file was mapped over them, each cycle kept hundreds of
// megabytes of address space and a kernel mapping for good, and a process
// that did this long enough failed to open any map (ENOMEM).
func TestOpenAndCloseInALoopKeepsTheAddressSpace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, &Options{Entries: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	region := m.file.Len() >> 10
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	const cycles = 300
	before := addressSpace(t)
	at := map[*byte]bool{}
	for i := range cycles {
		m, err := Open(path, &Options{ReadOnly: i%3 == 0})
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		at[&m.file.Bytes(0, 1)[0]] = true
		if v, err := m.Get([]byte("k")); err != nil || string(v) != "v" {
			t.Fatalf("cycle %d: Get = %q, %v", i, v, err)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// A tenth of what each cycle kept before: room for what an emulator
	// (qemu-user) keeps of the growth mappings that Close unmaps.
	if grew := addressSpace(t) - before; len(at) > 2 || grew > cycles*region/10 {
		t.Fatalf("%d cycles of Open and Close of a map mapped in %d KiB: mapped at %d addresses, the address space grew by %d KiB",
			cycles, region, len(at), grew)
	}
}

// TestCloseAndReopenUnderGets: goroutines Get from whichever map is
// current while it is closed and the file opened again, hundreds of times:
// Gets still running at a Close read the addresses that the next Open maps
// the file over. Every Get gives the key's value or ErrClosed, and nothing
// faults.
func TestCloseAndReopenUnderGets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	opts := &Options{Entries: 4096, Segments: 8}
	m, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	const keys = 256
	value := func(i int) []byte { return fmt.Appendf(nil, "value %d %s", i, strings.Repeat("v", i%50)) }
	for i := range keys {
		if err := m.Put(fmt.Appendf(nil, "k%d", i), value(i)); err != nil {
			t.Fatal(err)
		}
	}
	var current atomic.Pointer[Map]
	current.Store(m)
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		mu       sync.Mutex
		problems []string
		closed   atomic.Int64
	)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 128)
			for n := g; !stop.Load(); n++ {
				i := n % keys
				v, err := current.Load().GetInto(buf[:0], fmt.Appendf(nil, "k%d", i))
				switch {
				case errors.Is(err, ErrClosed):
					closed.Add(1)
				case err != nil || !bytes.Equal(v, value(i)):
					mu.Lock()
					problems = append(problems, fmt.Sprintf("Get(k%d) = %q, %v", i, v, err))
					mu.Unlock()
				}
			}
		}()
	}
	rounds := 300
	if testing.Short() {
		rounds = 100
	}
	for round := range rounds {
		old := current.Load()
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}
		next, err := Open(path, &Options{ReadOnly: round%4 == 3})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		current.Store(next)
	}
	stop.Store(true)
	wg.Wait()
	current.Load().Close()
	if len(problems) > 0 {
		t.Fatalf("%d wrong answers, the first: %v", len(problems), problems[:min(5, len(problems))])
	}
	if closed.Load() == 0 {
		t.Error("no Get met a closed map")
	}
}
