package hashmap

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Helper processes re-execute this test binary; they report to the parent
// with lines "@ key value...".
func helperCmd(role, path string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "HASHMAP_HELPER="+role, "HASHMAP_FILE="+path, "HASHMAP_ARGS="+strings.Join(args, ","))
	cmd.Stderr = os.Stderr
	return cmd
}

func runAll(t *testing.T, cmds []*exec.Cmd) [][]string {
	t.Helper()
	var mu sync.Mutex
	var lines [][]string
	var wg sync.WaitGroup
	for _, c := range cmds {
		out, _ := c.StdoutPipe()
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if f := strings.Fields(sc.Text()); len(f) > 1 && f[0] == "@" {
					mu.Lock()
					lines = append(lines, f[1:])
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("helper failed: %v", err)
		}
	}
	return lines
}

var helperOpts = &Options{Entries: 20000, AverageKeySize: 16, AverageValueSize: 64, Segments: 8}

func TestHelperProcess(t *testing.T) {
	role := os.Getenv("HASHMAP_HELPER")
	if role == "" {
		t.Skip("only runs as a helper process")
	}
	m, err := Open(os.Getenv("HASHMAP_FILE"), helperOpts)
	if err != nil {
		fmt.Printf("@ error %v\n", err)
		return
	}
	defer m.Close()
	args := strings.Split(os.Getenv("HASHMAP_ARGS"), ",")
	n := func(i int) int { v, _ := strconv.Atoi(args[i]); return v }
	switch role {
	case "increment": // goroutines, increments each, over 4 counters
		var wg sync.WaitGroup
		for g := range n(0) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n(1) {
					key := []byte(fmt.Sprintf("counter-%d", (g+i)%4))
					err := m.Compute(key, func(old []byte, found bool) ([]byte, bool) {
						var v uint64
						if found {
							v = binary.LittleEndian.Uint64(old)
						}
						return binary.LittleEndian.AppendUint64(nil, v+1), true
					})
					if err != nil {
						fmt.Printf("@ error %v\n", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		fmt.Println("@ done")
	case "putrange": // first, count
		for i := n(0); i < n(0)+n(1); i++ {
			k := fmt.Sprintf("key-%07d", i)
			if err := m.Put([]byte(k), []byte(strings.Repeat(k, 1+i%5))); err != nil {
				fmt.Printf("@ error %v\n", err)
				return
			}
		}
		fmt.Println("@ done")
	case "rewrite": // rewrite key "torn" with uniform values of varying sizes for ms milliseconds
		stop := time.Now().Add(time.Duration(n(0)) * time.Millisecond)
		for i := 0; time.Now().Before(stop); i++ {
			v := bytes.Repeat([]byte{byte('a' + i%26)}, 1+(i*7)%200)
			if err := m.Put([]byte("torn"), v); err != nil {
				fmt.Printf("@ error %v\n", err)
				return
			}
		}
		fmt.Println("@ done")
	case "readtorn": // read key "torn" for ms milliseconds; every value must be uniform
		stop := time.Now().Add(time.Duration(n(0)) * time.Millisecond)
		buf := make([]byte, 0, 256)
		reads, torn := 0, 0
		for time.Now().Before(stop) {
			v, err := m.GetInto(buf[:0], []byte("torn"))
			if err != nil {
				continue
			}
			reads++
			if len(v) == 0 || bytes.Count(v, v[:1]) != len(v) {
				torn++
			}
		}
		fmt.Printf("@ reads %d torn %d\n", reads, torn)
	}
}

func errorsIn(t *testing.T, lines [][]string) {
	t.Helper()
	for _, l := range lines {
		if l[0] == "error" {
			t.Fatalf("helper: %v", l)
		}
	}
}

// 4 processes x 4 goroutines increment 4 shared counters with Compute: the
// totals are exact, so no read-modify-write was lost across processes.
func TestCrossProcessCompute(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	const procs, goroutines, each = 4, 4, 1000
	var cmds []*exec.Cmd
	for range procs {
		cmds = append(cmds, helperCmd("increment", path, strconv.Itoa(goroutines), strconv.Itoa(each)))
	}
	errorsIn(t, runAll(t, cmds))
	m, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var total uint64
	for c := range 4 {
		v, err := m.Get([]byte(fmt.Sprintf("counter-%d", c)))
		if err != nil {
			t.Fatal(err)
		}
		total += binary.LittleEndian.Uint64(v)
	}
	if total != procs*goroutines*each {
		t.Fatalf("counters sum to %d, want %d", total, procs*goroutines*each)
	}
}

// Processes putting disjoint ranges lose nothing, and it survives reopen.
func TestCrossProcessDisjointPuts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	const procs, per = 4, 3000
	var cmds []*exec.Cmd
	for p := range procs {
		cmds = append(cmds, helperCmd("putrange", path, strconv.Itoa(p*per), strconv.Itoa(per)))
	}
	errorsIn(t, runAll(t, cmds))
	m, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Len() != procs*per {
		t.Fatalf("Len %d, want %d", m.Len(), procs*per)
	}
	for i := range procs * per {
		k := fmt.Sprintf("key-%07d", i)
		v, err := m.Get([]byte(k))
		if err != nil || string(v) != strings.Repeat(k, 1+i%5) {
			t.Fatalf("%s = %q, %v", k, v, err)
		}
	}
}

// A reader process never sees a torn value while a writer process rewrites
// the value in place and by relocation.
func TestCrossProcessNoTornReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, helperOpts)
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Put([]byte("torn"), []byte("a"))
	m.Close()
	lines := runAll(t, []*exec.Cmd{
		helperCmd("rewrite", path, "1500"),
		helperCmd("readtorn", path, "1500"),
		helperCmd("readtorn", path, "1500"),
	})
	errorsIn(t, lines)
	reads := 0
	for _, l := range lines {
		if l[0] == "reads" {
			r, _ := strconv.Atoi(l[1])
			reads += r
			if l[3] != "0" {
				t.Fatalf("a reader saw %s torn values in %s reads", l[3], l[1])
			}
		}
	}
	if reads == 0 {
		t.Fatal("readers read nothing")
	}
	t.Logf("%d reads, none torn", reads)
}
