package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/sharedmap/sharedmap/rediscache"
)

// The kinds of process the memory figure starts: each holds every key of
// the run in its kind of cache, then reports ready and waits for its
// stdin to close.
const (
	kindRediscache = "rediscache" // one shared map for all of them
	kindDoCache    = "docache"    // rueidis client-side cache, per process
	kindBaseline   = "baseline"   // a rueidis client, nothing cached
)

// smaps is a process's memory from /proc/PID/smaps_rollup, in kB. Pss
// charges each page to the processes that map it in equal shares, so the
// Pss of all processes sharing a map counts the map once.
type smaps struct{ rss, pss, pssAnon, pssFile, pssShmem int64 }

func readSmaps(pid int) (smaps, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return smaps{}, err
	}
	defer f.Close()
	var s smaps
	fields := map[string]*int64{"Rss:": &s.rss, "Pss:": &s.pss, "Pss_Anon:": &s.pssAnon,
		"Pss_File:": &s.pssFile, "Pss_Shmem:": &s.pssShmem}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 {
			if p, ok := fields[fs[0]]; ok {
				*p, _ = strconv.ParseInt(fs[1], 10, 64)
			}
		}
	}
	if s.pss == 0 {
		return s, fmt.Errorf("/proc/%d/smaps_rollup: no Pss", pid)
	}
	return s, sc.Err()
}

func (s *smaps) add(o smaps) {
	s.rss += o.rss
	s.pss += o.pss
	s.pssAnon += o.pssAnon
	s.pssFile += o.pssFile
	s.pssShmem += o.pssShmem
}

// processes starts n processes of kind (this program again, with -child),
// waits until each holds every key, and returns the sum of their memory.
func processes(kind string, n int, args []string) (smaps, error) {
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		ready chan error
	}
	exe, err := os.Executable()
	if err != nil {
		return smaps{}, err
	}
	children := make([]*child, 0, n)
	defer func() {
		for _, c := range children {
			c.stdin.Close() // the child exits when its stdin closes
		}
		for _, c := range children {
			done := make(chan struct{})
			go func() { c.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				c.cmd.Process.Kill()
				<-done
			}
		}
	}()
	for range n {
		cmd := exec.Command(exe, append([]string{"-child", kind}, args...)...)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return smaps{}, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return smaps{}, err
		}
		if err := cmd.Start(); err != nil {
			return smaps{}, err
		}
		c := &child{cmd: cmd, stdin: stdin, ready: make(chan error, 1)}
		children = append(children, c)
		go func() {
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err == nil && !strings.HasPrefix(line, "ready") {
				err = fmt.Errorf("unexpected %q", line)
			}
			c.ready <- err
			io.Copy(io.Discard, stdout)
		}()
	}
	var total smaps
	for _, c := range children {
		select {
		case err := <-c.ready:
			if err != nil {
				return smaps{}, fmt.Errorf("%s process %d: %w", kind, c.cmd.Process.Pid, err)
			}
		case <-time.After(5 * time.Minute):
			return smaps{}, fmt.Errorf("%s process %d: not ready after 5 minutes", kind, c.cmd.Process.Pid)
		}
	}
	// All are ready, so a shared map's pages have all their sharers now.
	for _, c := range children {
		s, err := readSmaps(c.cmd.Process.Pid)
		if err != nil {
			return smaps{}, err
		}
		total.add(s)
	}
	return total, nil
}

// childMain is one process of the memory figure: it fills its cache with
// every key, checks that a second pass hits every one, returns its
// garbage to the system, says "ready" and waits for stdin to close.
func childMain(kind string, cfg config) error {
	ctx := context.Background()
	ks := newKeyset(cfg.prefix, cfg.keys, cfg.valueSize, cfg.zipfS)
	client, err := rueidis.NewClient(clientOption(cfg.redisSocket))
	if err != nil {
		return err
	}
	defer client.Close()
	var hits int
	switch kind {
	case kindBaseline:
		if err := client.Do(ctx, client.B().Ping().Build()).Error(); err != nil {
			return err
		}
	case kindDoCache:
		if hits, err = fillDoCache(ctx, client, ks); err != nil {
			return err
		}
	case kindRediscache:
		c, err := openCache(ctx, cfg, client, false)
		if err != nil {
			return err
		}
		defer c.Close()
		if hits, err = fillRediscache(ctx, c, ks); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown -child %q", kind)
	}
	ks = nil
	runtime.GC()
	debug.FreeOSMemory()
	fmt.Printf("ready %d\n", hits)
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}

// docacheTTL is how long rueidis may keep a key client-side: longer than
// any run, so that only memory is measured.
const docacheTTL = time.Hour

// fillDoCache reads every key through the client-side cache, then reads
// them again and counts the cache hits, which must be all.
func fillDoCache(ctx context.Context, c rueidis.Client, ks *keyset) (int, error) {
	const batch = 1000
	for lo := 0; lo < len(ks.keys); lo += batch {
		cmds := make([]rueidis.CacheableTTL, 0, batch)
		for _, k := range ks.keys[lo:min(lo+batch, len(ks.keys))] {
			cmds = append(cmds, rueidis.CT(c.B().Get().Key(k).Cache(), docacheTTL))
		}
		for _, r := range c.DoMultiCache(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return 0, err
			}
		}
	}
	hits := 0
	for _, k := range ks.keys {
		r := c.DoCache(ctx, c.B().Get().Key(k).Cache(), docacheTTL)
		if v, err := r.AsBytes(); err != nil || len(v) != ks.valueSize {
			return hits, fmt.Errorf("DoCache %s: %d bytes, %v", k, len(v), err)
		}
		if r.IsCacheHit() {
			hits++
		}
	}
	if hits != len(ks.keys) {
		return hits, fmt.Errorf("DoCache: %d of %d keys hit on the second pass", hits, len(ks.keys))
	}
	return hits, nil
}

// fillRediscache reads every key through the shared map (the processes
// share the fills), then reads them again and counts the hits, which
// must be all.
func fillRediscache(ctx context.Context, c *rediscache.Cache, ks *keyset) (int, error) {
	if err := waitFresh(ctx, c); err != nil {
		return 0, err
	}
	for _, k := range ks.keys {
		if v, err := c.Get(ctx, k); err != nil || len(v) != ks.valueSize {
			return 0, fmt.Errorf("rediscache Get %s: %d bytes, %v", k, len(v), err)
		}
	}
	before := c.Stats().Hits
	buf := make([]byte, 0, ks.valueSize)
	for _, k := range ks.keys {
		if _, err := c.GetInto(ctx, buf[:0], k); err != nil {
			return 0, err
		}
	}
	if hits := int(c.Stats().Hits - before); hits != len(ks.keys) {
		return hits, fmt.Errorf("rediscache: %d of %d keys hit on the second pass (%+v)", hits, len(ks.keys), c.Stats())
	}
	return len(ks.keys), nil
}

// waitFresh waits until a tracker serves the map, so that reads are hits
// rather than stale refusals.
func waitFresh(ctx context.Context, c *rediscache.Cache) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := c.Stats()
		if s.TrackerPID != 0 && s.Lag >= 0 && s.Lag < maxStaleness/2 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("rediscache: no tracker made the map fresh within 20 s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
