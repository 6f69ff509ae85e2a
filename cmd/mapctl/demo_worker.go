package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

var demoWorkerCmd = &command{
	name:    "demo-worker",
	args:    "PATH ID GOROUTINES OPS",
	summary: "one worker process of mapctl demo (internal)",
	help: `Internal: mapctl demo starts its worker processes with this command. Opens
the map PATH, runs GOROUTINES goroutines of OPS operations each as described
in "mapctl demo --help", and prints its counts as one JSON line.

Example:
  mapctl demo-worker /tmp/demo.map 0 4 20000`,
	hidden: true,
	run:    runDemoWorker,
}

func runDemoWorker(e *env, c *command, _ any, args []string) int {
	if !e.wantArgs(c, args, 4) {
		return exitUsage
	}
	var n [3]int
	for i, a := range args[1:] {
		v, err := strconv.Atoi(a)
		if err != nil || v < 0 {
			return e.usageError(c, fmt.Sprintf("%q is not a count", a))
		}
		n[i] = v
	}
	id, goroutines, ops := n[0], n[1], n[2]
	if goroutines > maxDemoGoroutines {
		return e.usageError(c, fmt.Sprintf("GOROUTINES must be at most %d", maxDemoGoroutines))
	}
	m, err := openExistingWith(args[0], &hashmap.Options{QueueWritersLocally: os.Getenv(demoQueueWritersEnv) == "1"})
	if err != nil {
		return e.fail(c, err)
	}
	defer m.Close()
	rep := demoWork(m, id, goroutines, ops)
	if err := writeJSONLine(e.stdout, rep); err != nil {
		return e.fail(c, err)
	}
	if rep.Err != "" {
		return exitError
	}
	return exitOK
}

func writeJSONLine(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

// demoWork runs the worker's goroutines and sums up what they did.
func demoWork(m *hashmap.Map, id, goroutines, ops int) workerReport {
	rep := workerReport{ID: id, PutsPerG: make([]int, goroutines)}
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(id)+1, uint64(g)+uint64(time.Now().UnixNano())))
			var incs [demoCounters]uint64
			puts, gets, bad := 0, 0, 0
			buf := make([]byte, 0, 64)
			var firstErr error
			note := func(err error) {
				if firstErr == nil {
					firstErr = err
				}
			}
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
					if err != nil {
						note(fmt.Errorf("compute %s: %w", counterKey(c), err))
						continue
					}
					incs[c]++
				case r < 6:
					k := ownKey(id, g, puts)
					if err := m.Put(k, ownValue(k)); err != nil {
						note(fmt.Errorf("put %s: %w", k, err))
						continue
					}
					puts++
				default:
					gets++
					if puts == 0 {
						continue
					}
					k := ownKey(id, g, rng.IntN(puts))
					v, err := m.GetInto(buf[:0], k)
					if err != nil || !bytes.Equal(v, ownValue(k)) {
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
	rep.Seconds = time.Since(start).Seconds()
	return rep
}

// indenter prefixes every line written through it with two spaces.
type indenter struct {
	w   io.Writer
	mid bool // inside a line
}

// Write implements io.Writer, indenting each line it starts.
func (in *indenter) Write(p []byte) (int, error) {
	var out []byte
	for _, b := range p {
		if !in.mid {
			out = append(out, ' ', ' ')
		}
		out = append(out, b)
		in.mid = b != '\n'
	}
	_, err := in.w.Write(out)
	return len(p), err
}
