package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/sharedmap/sharedmap/hashmap"
	"github.com/sharedmap/sharedmap/rediscache"
)

// status is what a worker reports on stdout, a JSON line every
// statusEvery.
type status struct {
	PID                       int
	Hits, Misses, Stale       uint64
	Invalidations, EpochBumps uint64
	Epoch                     uint64
	TrackerPID                int
	Tracking                  bool
	Lag                       time.Duration
	Gen                       int   // the oldest generation the last full pass over the keys read
	GenAt                     int64 // unix ns when a pass first read generation Gen or newer from every key
	Violations                int   // reads that returned a generation older than one written more than MaxStaleness before them
	Errors                    int   // reads that failed
	Last                      string
}

const statusEvery = 100 * time.Millisecond

// expectation is the newest generation written and when its write
// completed, which the parent sends on the worker's stdin as
// "gen N UNIXNANO".
type expectation struct {
	gen  int
	done int64
}

// worker reads the demo's keys through the shared cache in a loop until
// its stdin closes, checking each value against the guarantee: a read that
// began more than MaxStaleness after a write completed returns that
// write's generation or a newer one.
func worker(addr, path, prefix string, keys int) error {
	ctx := context.Background()
	c, err := rediscache.Open(ctx, rediscache.Options{
		Path:         path,
		Map:          &hashmap.Options{Entries: 4 * keys, AverageKeySize: len(prefix) + 4, AverageValueSize: 32},
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true},
		Prefixes:     []string{prefix},
		MaxStaleness: maxStaleness,
	})
	if err != nil {
		return err
	}
	defer c.Close()

	var exp atomic.Pointer[expectation]
	exp.Store(&expectation{})
	stop := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			var e expectation
			if _, err := fmt.Sscanf(sc.Text(), "gen %d %d", &e.gen, &e.done); err == nil {
				exp.Store(&e)
			}
		}
		close(stop)
	}()

	var mu sync.Mutex
	st := status{PID: os.Getpid()}
	go func() {
		enc := json.NewEncoder(os.Stdout)
		for range time.Tick(statusEvery) {
			s := c.Stats()
			mu.Lock()
			st.Hits, st.Misses, st.Stale = s.Hits, s.Misses, s.StaleRefusals
			st.Invalidations, st.EpochBumps, st.Epoch = s.InvalidationsApplied, s.EpochBumps, s.Epoch
			st.TrackerPID, st.Tracking, st.Lag = s.TrackerPID, s.Tracking, s.Lag
			_ = enc.Encode(st)
			mu.Unlock()
		}
	}()

	for {
		select {
		case <-stop:
			return nil
		default:
		}
		oldest, stale, errs, last := pass(ctx, c, prefix, keys, exp.Load())
		mu.Lock()
		if oldest > st.Gen || st.GenAt == 0 {
			st.GenAt = time.Now().UnixNano()
		}
		st.Gen = oldest
		st.Violations += stale
		st.Errors += errs
		if last != "" {
			st.Last = last
		}
		mu.Unlock()
		time.Sleep(time.Millisecond)
	}
}

// pass reads every key once and returns the oldest generation read, the
// reads that broke the guarantee, the reads that failed, and the last
// problem seen.
func pass(ctx context.Context, c *rediscache.Cache, prefix string, keys int, e *expectation) (oldest, stale, errs int, last string) {
	oldest = int(^uint(0) >> 1)
	buf := make([]byte, 0, 64)
	for k := range keys {
		key := keyName(prefix, k)
		began := time.Now().UnixNano()
		v, err := c.GetInto(ctx, buf[:0], key)
		if err != nil {
			errs++
			last = fmt.Sprintf("%s: %v", key, err)
			continue
		}
		g, err := parseValue(v)
		if err != nil {
			errs++
			last = fmt.Sprintf("%s: %v", key, err)
			continue
		}
		oldest = min(oldest, g)
		if g < e.gen && began > e.done+int64(maxStaleness) {
			stale++
			last = fmt.Sprintf("%s: generation %d, %v after generation %d was written", key, g, time.Duration(began-e.done), e.gen)
		}
	}
	return oldest, stale, errs, last
}

func keyName(prefix string, k int) string { return prefix + "k" + strconv.Itoa(k) }

// value is the value of every key at generation gen.
func value(gen int) string { return "gen " + strconv.Itoa(gen) }

func parseValue(v []byte) (int, error) {
	s, ok := strings.CutPrefix(string(v), "gen ")
	if !ok {
		return 0, fmt.Errorf("unexpected value %q", v)
	}
	return strconv.Atoi(s)
}
