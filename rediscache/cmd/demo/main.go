// Command demo shows rediscache at work on one host, in one command:
//
//	cd rediscache && go run ./cmd/demo
//
// It starts a redis-server of its own on a loopback port (Debian's
// package: apt-get install redis-server), or uses the one at REDIS_ADDR
// (host:port, keys under a prefix of its own, deleted at the end), and
// runs several processes (itself again) that read the same keys through
// one shared map in a temporary directory. Every second it prints each
// process's hits, misses and stale refusals, the invalidations applied on
// the host and which process holds the tracking connection. Then it
// writes every key through a plain Redis client and shows the new values
// reach every process; SIGKILLs the tracker and shows a standby take over;
// writes again and shows the new tracker's invalidations reach the rest.
// Every read is checked against the guarantee (no value older than a
// write that completed more than MaxStaleness before the read began). It
// ends with a one-line verdict and exits 1 if anything went wrong.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/rueidis"
	"github.com/sharedmap/sharedmap/rediscache/internal/redistest"
)

// maxStaleness is the cache's MaxStaleness in every process (the
// package's default, written out because the checks use it).
const maxStaleness = 250 * time.Millisecond

// The environment of a worker process: its Redis, map and key prefix.
const (
	envWorker = "REDISCACHE_DEMO_WORKER"
	envAddr   = "REDISCACHE_DEMO_ADDR"
	envMap    = "REDISCACHE_DEMO_MAP"
	envPrefix = "REDISCACHE_DEMO_PREFIX"
	envKeys   = "REDISCACHE_DEMO_KEYS"
)

func main() {
	if os.Getenv(envWorker) != "" {
		keys, _ := strconv.Atoi(os.Getenv(envKeys))
		if err := worker(os.Getenv(envAddr), os.Getenv(envMap), os.Getenv(envPrefix), keys); err != nil {
			fmt.Fprintf(os.Stderr, "demo worker %d: %v\n", os.Getpid(), err)
			os.Exit(1)
		}
		return
	}
	procs := flag.Int("procs", 3, "processes sharing the map (at least 2: one is killed)")
	keys := flag.Int("keys", 50, "keys the processes read")
	steady := flag.Duration("steady", 2*time.Second, "how long to show the processes reading before the first write")
	flag.Parse()
	if *procs < 2 || *keys < 1 || *steady < 0 {
		fmt.Fprintln(os.Stderr, "demo: want -procs >= 2, -keys >= 1 and -steady >= 0")
		os.Exit(2)
	}
	d := &demo{out: os.Stdout, keys: *keys, procs: *procs, start: time.Now(), quit: make(chan struct{})}
	err := d.setup()
	if err == nil {
		stopOnSignal(d)
		err = d.run(*steady)
	}
	d.teardown()
	if err != nil {
		d.fail("%v", err)
	}
	fmt.Fprintln(d.out, d.verdict())
	if len(d.failures) > 0 {
		os.Exit(1)
	}
}

// stopOnSignal tears the demo down on SIGINT or SIGTERM.
func stopOnSignal(d *demo) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		d.teardown()
		os.Exit(130)
	}()
}

// demo is the parent process: Redis, the plain client, the workers and
// what went wrong.
type demo struct {
	out          io.Writer
	keys, procs  int
	start        time.Time
	server       *redistest.Server // nil when REDIS_ADDR is used
	addr, dir    string
	prefix       string
	client       rueidis.Client
	teardownOnce sync.Once
	quit         chan struct{} // closed by teardown: the printing stops

	mu        sync.Mutex
	workers   []*proc
	failures  []string
	reach     []time.Duration // how long each write took to reach every process
	takeover  time.Duration
	newTrack  int
	totalHits uint64
}

func (d *demo) say(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "%5.1fs  "+format+"\n", append([]any{time.Since(d.start).Seconds()}, args...)...)
}

func (d *demo) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.say("FAIL: %s", msg)
	d.mu.Lock()
	d.failures = append(d.failures, msg)
	d.mu.Unlock()
}

// setup finds or starts Redis, makes the map's directory and writes
// generation 0 of every key.
func (d *demo) setup() error {
	d.addr = os.Getenv("REDIS_ADDR")
	if d.addr == "" {
		s, err := redistest.New()
		if err != nil {
			return err
		}
		d.server, d.addr = s, s.Addr()
		d.say("started redis-server on %s", d.addr)
	} else {
		d.say("using Redis at REDIS_ADDR=%s", d.addr)
	}
	var err error
	if d.dir, err = os.MkdirTemp("", "rediscache-demo-"); err != nil {
		return err
	}
	d.prefix = fmt.Sprintf("rediscache-demo:%d:", os.Getpid())
	d.client, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{d.addr}, DisableCache: true})
	if err != nil {
		return fmt.Errorf("redis at %s: %w", d.addr, err)
	}
	_, err = d.write(0)
	return err
}

// teardown stops the workers, deletes the keys from Redis, and removes
// the map and the server this demo started.
func (d *demo) teardown() {
	d.teardownOnce.Do(func() {
		close(d.quit)
		d.mu.Lock()
		ws := d.workers
		d.mu.Unlock()
		for _, w := range ws {
			w.stop()
		}
		if d.client != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			cmds := make(rueidis.Commands, 0, d.keys)
			for k := range d.keys {
				cmds = append(cmds, d.client.B().Del().Key(keyName(d.prefix, k)).Build())
			}
			d.client.DoMulti(ctx, cmds...)
			cancel()
			d.client.Close()
		}
		if d.dir != "" {
			os.RemoveAll(d.dir)
		}
		if d.server != nil {
			d.server.Close()
		}
	})
}

// write sets every key to generation gen through the plain client (not
// through the package: the invalidations are Redis's) and tells the
// workers when it completed.
func (d *demo) write(gen int) (time.Time, error) {
	cmds := make(rueidis.Commands, 0, d.keys)
	for k := range d.keys {
		cmds = append(cmds, d.client.B().Set().Key(keyName(d.prefix, k)).Value(value(gen)).Build())
	}
	for _, r := range d.client.DoMulti(context.Background(), cmds...) {
		if err := r.Error(); err != nil {
			return time.Time{}, fmt.Errorf("write generation %d: %w", gen, err)
		}
	}
	done := time.Now()
	d.mu.Lock()
	for _, w := range d.workers {
		w.tell(fmt.Sprintf("gen %d %d\n", gen, done.UnixNano()))
	}
	d.mu.Unlock()
	return done, nil
}

// run is the demo's script.
func (d *demo) run(steady time.Duration) error {
	for range d.procs {
		if err := d.startWorker(); err != nil {
			return err
		}
	}
	go d.printEverySecond()
	if !d.waitFor(10*time.Second, d.allFresh) {
		return errors.New("the processes did not elect a tracker and read their keys within 10 s")
	}
	d.say("%d processes read %d keys through one map; tracker is pid %d", d.procs, d.keys, d.snapshot()[0].st.TrackerPID)
	time.Sleep(steady)
	if err := d.writeAndReach(1); err != nil {
		return err
	}
	if err := d.killTracker(); err != nil {
		return err
	}
	if err := d.writeAndReach(2); err != nil {
		return err
	}
	time.Sleep(time.Second) // the survivors refill and read on under the new tracker
	d.printStatus()
	d.checkWorkers()
	return nil
}

// writeAndReach writes generation gen and waits until every live process
// has read it from every key. How long that takes is shown, not judged: a
// process the machine leaves unscheduled for a while reads late without
// breaking anything. What the guarantee forbids (a read that began more
// than MaxStaleness after the write returning an older value) each worker
// checks on every read.
func (d *demo) writeAndReach(gen int) error {
	before := d.hostStatus().Invalidations
	d.say("» SET %d keys to %q through a plain Redis client", d.keys, value(gen))
	done, err := d.write(gen)
	if err != nil {
		return err
	}
	reached := func() bool {
		for _, w := range d.snapshot() {
			if !w.dead && (w.st.Gen < gen || w.st.GenAt == 0) {
				return false
			}
		}
		return true
	}
	if !d.waitFor(maxStaleness+2*time.Second, reached) {
		return fmt.Errorf("generation %d did not reach every process within %v", gen, maxStaleness+2*time.Second)
	}
	var worst time.Duration
	for _, w := range d.snapshot() {
		if !w.dead {
			worst = max(worst, time.Duration(w.st.GenAt-done.UnixNano()))
		}
	}
	d.mu.Lock()
	d.reach = append(d.reach, worst)
	d.mu.Unlock()
	d.say("» every process reads %q from every key %v after the write (invalidations applied on the host: %d → %d)",
		value(gen), worst.Round(time.Millisecond), before, d.hostStatus().Invalidations)
	return nil
}

// killTracker SIGKILLs the process holding the tracking connection and
// waits for another to take over.
func (d *demo) killTracker() error {
	old := d.hostStatus().TrackerPID
	var victim *proc
	for _, w := range d.snapshot() {
		if w.pid == old && !w.dead {
			victim = w.p
		}
	}
	if victim == nil {
		return fmt.Errorf("the tracker pid %d is none of the demo's processes", old)
	}
	bumps := d.hostStatus().EpochBumps
	d.say("» SIGKILL the tracker, pid %d", old)
	killed := time.Now()
	victim.kill()
	var next int
	tookOver := func() bool {
		for _, w := range d.snapshot() {
			if !w.dead && w.st.Tracking && w.st.TrackerPID == w.pid && w.pid != old && w.st.Lag < maxStaleness {
				next = w.pid
				return true
			}
		}
		return false
	}
	if !d.waitFor(5*time.Second, tookOver) {
		return fmt.Errorf("no standby took over within 5 s of killing the tracker pid %d", old)
	}
	took := time.Since(killed)
	d.mu.Lock()
	d.takeover, d.newTrack = took, next
	d.mu.Unlock()
	d.say("» pid %d took over as tracker, fresh again %v after the kill (epoch bumps %d → %d: what was cached before is a miss)",
		next, took.Round(time.Millisecond), bumps, d.hostStatus().EpochBumps)
	return nil
}

// verdict is the last line: OK and the figures, or FAILED and why.
func (d *demo) verdict() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.failures) > 0 {
		return "verdict: FAILED: " + strings.Join(d.failures, "; ")
	}
	reach := make([]string, len(d.reach))
	for i, r := range d.reach {
		reach[i] = r.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("verdict: OK: %d processes, %d hits, no stale read; writes reached every process in %s; pid %d took over %v after the tracker was killed",
		d.procs, d.totalHits, strings.Join(reach, " and "), d.newTrack, d.takeover.Round(time.Millisecond))
}

// waitFor polls cond until it holds or timeout passes.
func (d *demo) waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// mapPath is the shared map's file.
func (d *demo) mapPath() string { return filepath.Join(d.dir, "demo.map") }
