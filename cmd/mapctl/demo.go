package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

var demoOpts struct {
	procs, goroutines, ops int
	keep                   bool
}

func setupDemo(fs *flag.FlagSet) {
	fs.IntVar(&demoOpts.procs, "procs", 4, "worker processes")
	fs.IntVar(&demoOpts.goroutines, "goroutines", 4, "goroutines per worker")
	fs.IntVar(&demoOpts.ops, "ops", 20000, "operations per goroutine")
	fs.BoolVar(&demoOpts.keep, "keep", false, "keep the map file afterwards")
}

const demoCounters = 16

// workerReport is what each worker prints, as one JSON line.
type workerReport struct {
	ID         int                  `json:"id"`
	Increments [demoCounters]uint64 `json:"increments"`
	Puts       int                  `json:"puts"`
	PutsPerG   []int                `json:"puts_per_goroutine"`
	Gets       int                  `json:"gets"`
	BadReads   int                  `json:"bad_reads"`
	Err        string               `json:"error,omitempty"`
}

func ownKey(id, g, i int) []byte { return []byte(fmt.Sprintf("w%d-g%d-%d", id, g, i)) }
func ownValue(key []byte) []byte { return append([]byte("value-of-"), key...) }
func counterKey(c int) []byte    { return []byte(fmt.Sprintf("counter-%02d", c)) }
func demoMapOptions() *hashmap.Options {
	return &hashmap.Options{Entries: 200_000, AverageKeySize: 16, AverageValueSize: 32}
}

// runDemo is the README's main job: a fresh map in a temp directory, worker
// processes hammering it at once, and a check of the final state.
func runDemo(fs *flag.FlagSet, args []string) int {
	dir, err := os.MkdirTemp("", "sharedmap-demo-")
	if err != nil {
		return fail("demo", err)
	}
	if !demoOpts.keep {
		defer os.RemoveAll(dir)
	}
	path := filepath.Join(dir, "demo.map")
	m, err := hashmap.Open(path, demoMapOptions())
	if err != nil {
		return fail("demo", err)
	}
	defer m.Close()
	self, err := os.Executable()
	if err != nil {
		return fail("demo", err)
	}
	fmt.Fprintf(stdout, "map %s: %d worker processes x %d goroutines x %d ops (Compute increments, Puts, Gets)\n",
		path, demoOpts.procs, demoOpts.goroutines, demoOpts.ops)
	start := time.Now()
	reports := make([]workerReport, demoOpts.procs)
	var wg sync.WaitGroup
	var failed atomic.Bool
	for p := range demoOpts.procs {
		cmd := exec.Command(self, "demo-worker", path, strconv.Itoa(p), strconv.Itoa(demoOpts.goroutines), strconv.Itoa(demoOpts.ops))
		cmd.Env = append(os.Environ(), "MAPCTL_DEMO_WORKER=1")
		cmd.Stderr = stderr
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			return fail("demo", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if json.Unmarshal(sc.Bytes(), &reports[p]) == nil {
					break
				}
			}
			for sc.Scan() {
			}
			if err := cmd.Wait(); err != nil {
				failed.Store(true)
				fmt.Fprintf(stderr, "mapctl: demo: worker %d: %v\n", p, err)
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	problems := 0
	problem := func(format string, a ...any) { problems++; fmt.Fprintf(stdout, "FAIL: "+format+"\n", a...) }
	if failed.Load() {
		problem("a worker process failed")
	}
	var want [demoCounters]uint64
	total := 0
	for _, r := range reports {
		if r.Err != "" {
			problem("worker %d: %s", r.ID, r.Err)
		}
		if r.BadReads > 0 {
			problem("worker %d read %d wrong values", r.ID, r.BadReads)
		}
		for c := range want {
			want[c] += r.Increments[c]
			total += int(r.Increments[c])
		}
		total += r.Puts + r.Gets
		fmt.Fprintf(stdout, "  worker %d: %d puts, %d gets, %d increments\n", r.ID, r.Puts, r.Gets, sum(r.Increments[:]))
	}
	for c := range want {
		v, err := m.Get(counterKey(c))
		var got uint64
		if err == nil && len(v) == 8 {
			got = binary.LittleEndian.Uint64(v)
		}
		if got != want[c] {
			problem("counter %d is %d, workers made %d increments", c, got, want[c])
		}
	}
	stored := 0
	for p, r := range reports {
		for g, n := range r.PutsPerG {
			for i := range n {
				k := ownKey(p, g, i)
				if v, err := m.Get(k); err != nil || string(v) != string(ownValue(k)) {
					problem("%s = %q, %v", k, v, err)
					break
				}
				stored++
			}
		}
	}
	if m.Len() != stored+demoCounters {
		problem("the map holds %d entries, expected %d puts + %d counters", m.Len(), stored, demoCounters)
	}
	fmt.Fprintf(stdout, "%d operations in %v across %d processes: %.0f ops/s\n", total, wall.Round(time.Millisecond), demoOpts.procs, float64(total)/wall.Seconds())
	printStats(m.Stats())
	if problems > 0 {
		fmt.Fprintf(stdout, "demo FAILED: %d problems\n", problems)
		return exitError
	}
	fmt.Fprintln(stdout, "demo OK: every counter exact, every put readable, no bad read")
	return exitOK
}

func sum(xs []uint64) (s uint64) {
	for _, x := range xs {
		s += x
	}
	return s
}

// demoWorker is one worker process of the demo: PATH ID GOROUTINES OPS.
func demoWorker(args []string) int {
	if len(args) != 4 {
		return exitUsage
	}
	id, _ := strconv.Atoi(args[1])
	goroutines, _ := strconv.Atoi(args[2])
	ops, _ := strconv.Atoi(args[3])
	rep := workerReport{ID: id, PutsPerG: make([]int, goroutines)}
	m, err := hashmap.Open(args[0], nil)
	if err != nil {
		rep.Err = err.Error()
		_ = json.NewEncoder(os.Stdout).Encode(rep)
		return exitError
	}
	defer m.Close()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(id), uint64(g)))
			var incs [demoCounters]uint64
			puts, gets, bad := 0, 0, 0
			buf := make([]byte, 0, 64)
			var firstErr error
			for range ops {
				switch r := rng.IntN(10); {
				case r < 3:
					c := rng.IntN(demoCounters)
					err := m.Compute(counterKey(c), func(old []byte, found bool) ([]byte, bool) {
						var v uint64
						if found && len(old) == 8 {
							v = binary.LittleEndian.Uint64(old)
						}
						return binary.LittleEndian.AppendUint64(nil, v+1), true
					})
					if err == nil {
						incs[c]++
					} else if firstErr == nil {
						firstErr = err
					}
				case r < 6:
					k := ownKey(id, g, puts)
					if err := m.Put(k, ownValue(k)); err == nil {
						puts++
					} else if firstErr == nil {
						firstErr = err
					}
				default:
					gets++
					if puts == 0 {
						continue
					}
					k := ownKey(id, g, rng.IntN(puts))
					v, err := m.GetInto(buf[:0], k)
					if err != nil || string(v) != string(ownValue(k)) {
						bad++
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for c := range incs {
				rep.Increments[c] += incs[c]
			}
			rep.PutsPerG[g] = puts
			rep.Puts += puts
			rep.Gets += gets
			rep.BadReads += bad
			if firstErr != nil && rep.Err == "" {
				rep.Err = firstErr.Error()
			}
		}()
	}
	wg.Wait()
	_ = json.NewEncoder(os.Stdout).Encode(rep)
	return exitOK
}
