package main

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// proc is one worker process and the last status it reported.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when the process has been reaped

	mu       sync.Mutex
	st       status
	have     bool // a status arrived
	dead     bool
	expected bool // killed or stopped by the demo
	exitErr  error
}

// startWorker starts this program again as a worker reading the map.
func (d *demo) startWorker() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envWorker+"=1", envAddr+"="+d.addr, envMap+"="+d.mapPath(),
		envPrefix+"="+d.prefix, envKeys+"="+strconv.Itoa(d.keys))
	cmd.Stderr = os.Stderr
	p := &proc{cmd: cmd, done: make(chan struct{})}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	d.mu.Lock()
	d.workers = append(d.workers, p)
	d.mu.Unlock()
	go func() {
		dec := json.NewDecoder(stdout)
		for {
			var st status
			if err := dec.Decode(&st); err != nil {
				break
			}
			p.mu.Lock()
			p.st, p.have = st, true
			p.mu.Unlock()
		}
		err := cmd.Wait() // reaps it at once: a dead tracker's pid is then gone
		p.mu.Lock()
		p.dead, p.exitErr = true, err
		expected := p.expected
		p.mu.Unlock()
		close(p.done)
		if !expected {
			d.fail("worker pid %d exited by itself: %v", cmd.Process.Pid, err)
		}
	}()
	return nil
}

// tell sends the worker a line on its stdin.
func (p *proc) tell(line string) { _, _ = io.WriteString(p.stdin, line) }

// kill SIGKILLs the worker and waits until it is reaped.
func (p *proc) kill() {
	p.mu.Lock()
	p.expected = true
	p.mu.Unlock()
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop closes the worker's stdin, which ends it, and kills it if it has
// not ended within 5 s.
func (p *proc) stop() {
	p.mu.Lock()
	p.expected = true
	p.mu.Unlock()
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// view is a copy of a worker's state.
type view struct {
	p    *proc
	pid  int
	st   status
	have bool
	dead bool
}

func (d *demo) snapshot() []view {
	d.mu.Lock()
	ws := append([]*proc(nil), d.workers...)
	d.mu.Unlock()
	vs := make([]view, len(ws))
	for i, p := range ws {
		p.mu.Lock()
		vs[i] = view{p: p, pid: p.cmd.Process.Pid, st: p.st, have: p.have, dead: p.dead}
		p.mu.Unlock()
	}
	return vs
}

// hostStatus is the host-wide part of the newest status of a live worker
// (invalidations, epoch and tracker come from the map's control record,
// the same for all).
func (d *demo) hostStatus() status {
	var h status
	for _, w := range d.snapshot() {
		if !w.dead && w.have && w.st.Invalidations >= h.Invalidations {
			h = w.st
		}
	}
	return h
}

// allFresh says whether every worker has a tracker, a fresh watermark and
// hits.
func (d *demo) allFresh() bool {
	for _, w := range d.snapshot() {
		if w.dead || !w.have || w.st.TrackerPID == 0 || w.st.Lag >= maxStaleness || w.st.GenAt == 0 || w.st.Hits == 0 {
			return false
		}
	}
	return true
}

// printEverySecond prints the processes' status each second until the
// demo ends.
func (d *demo) printEverySecond() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-d.quit:
			return
		case <-t.C:
			d.printStatus()
		}
	}
}

// printStatus prints a line a process and one for the host.
func (d *demo) printStatus() {
	for _, w := range d.snapshot() {
		role := "standby"
		switch {
		case w.dead:
			role = "killed "
		case w.st.Tracking:
			role = "TRACKER"
		}
		d.say("pid %-7d %s  hits %9d  misses %4d  stale refusals %4d  last pass read %q",
			w.pid, role, w.st.Hits, w.st.Misses, w.st.Stale, value(w.st.Gen))
	}
	h := d.hostStatus()
	d.say("host: tracker pid %d, invalidations applied %d, epoch bumps %d, lag %v",
		h.TrackerPID, h.Invalidations, h.EpochBumps, h.Lag.Round(time.Millisecond))
}

// checkWorkers fails the demo for any read that broke the guarantee or
// failed, and adds up the hits.
func (d *demo) checkWorkers() {
	var hits uint64
	for _, w := range d.snapshot() {
		hits += w.st.Hits
		if w.st.Violations > 0 {
			d.fail("pid %d: %d reads older than a write completed more than %v before (%s)", w.pid, w.st.Violations, maxStaleness, w.st.Last)
		}
		if w.st.Errors > 0 {
			d.fail("pid %d: %d reads failed (%s)", w.pid, w.st.Errors, w.st.Last)
		}
	}
	d.mu.Lock()
	d.totalHits = hits
	d.mu.Unlock()
}
