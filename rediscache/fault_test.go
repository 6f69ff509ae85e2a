//go:build linux

package rediscache_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sharedmap/sharedmap/rediscache"
	"github.com/sharedmap/sharedmap/rediscache/internal/redistest"
)

// faultStaleness is the MaxStaleness of the fault tests' caches: the
// default.
const faultStaleness = 250 * time.Millisecond

// cluster is one fault test's host: a Redis, a map file, helper processes
// and the history they report.
type cluster struct {
	t     *testing.T
	srv   *redistest.Server
	path  string
	hist  *history
	procs []*proc
	plain rueidis.Client
	cache *rediscache.Cache // the test's own (never tracks), for its Sets
	vers  map[string]int64  // versions of the keys the test writes itself
	notes []string          // figures for the log
	lim   limits
}

func newCluster(t *testing.T) *cluster {
	c := &cluster{t: t, srv: redistest.Start(t), path: filepath.Join(t.TempDir(), "cache.map"),
		hist: newHistory(), vers: map[string]int64{},
		lim: limits{maxStaleness: faultStaleness, ttlSlack: 2 * time.Millisecond}}
	var err error
	if c.plain, err = plainClient(c.srv.Addr()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.plain.Close)
	return c
}

// scaled is d, halved in -short mode.
func scaled(d time.Duration) time.Duration {
	if testing.Short() {
		return d / 2
	}
	return d
}

// env is the environment every helper of c gets, then extra.
func (c *cluster) env(addr string, extra ...string) []string {
	return append([]string{envPath + "=" + c.path, envAddr + "=" + addr, envPlain + "=" + c.srv.Addr(),
		envStaleMax + "=" + faultStaleness.String()}, extra...)
}

func (c *cluster) start(name, role, addr string, extra ...string) *proc {
	c.t.Helper()
	p := startProc(c.t, c.hist, name, role, c.env(addr, extra...)...)
	c.procs = append(c.procs, p)
	return p
}

// keys returns n keys named by group.
func keys(group string, n int) string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = keyPrefix + group + ":" + strconv.Itoa(i)
	}
	return strings.Join(ks, ",")
}

// setup starts the usual host: a tracker, a standby, a writer of eight
// keys and two readers of them (each with a goroutine reading by Get, one
// by GetInto and one by MGet), and returns the tracker and the standby.
// The tracker connects to Redis through trackerAddr.
func (c *cluster) setup(trackerAddr string, readKeys ...string) (tracker, standby *proc) {
	c.t.Helper()
	tracker = c.start("tracker", "tracker", trackerAddr)
	c.awaitTracker(tracker, 0, 5*time.Second)
	standby = c.start("standby", "tracker", c.srv.Addr())
	ks := keys("w", 8)
	c.start("writer", "writer", c.srv.Addr(), envKeys+"="+ks, envGap+"=2ms", envSeed+"=1")
	rk := strings.Join(append([]string{ks}, readKeys...), ",")
	for i := range 2 {
		c.start(fmt.Sprintf("reader%d", i), "reader", c.srv.Addr(), envKeys+"="+rk, envWorkers+"=3", envGap+"=300us")
	}
	return tracker, standby
}

// awaitTracker waits until a helper sees p's pid in the control record,
// after the instant since, and returns when it first did.
func (c *cluster) awaitTracker(p *proc, since int64, within time.Duration) int64 {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if at, ok := c.trackerSeen(p.pid(), since); ok {
			return at
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Errorf("%s (pid %d) did not become the tracker within %v", p.name, p.pid(), within)
	return 0
}

// trackerSeen returns when a helper first saw pid in the control record,
// after since.
func (c *cluster) trackerSeen(pid int, since int64) (int64, bool) {
	first, ok := int64(0), false
	for _, p := range c.procs {
		for _, s := range p.statuses() {
			if s.at > since && s.ctl.pid == uint64(pid) && (!ok || s.at < first) {
				first, ok = s.at, true
				break
			}
		}
	}
	return first, ok
}

// controlsBetween returns every control record the helpers saw between
// since and until.
func (c *cluster) controlsBetween(since, until int64) []control {
	var cs []control
	for _, p := range c.procs {
		for _, s := range p.statuses() {
			if s.at > since && s.at < until {
				cs = append(cs, s.ctl)
			}
		}
	}
	return cs
}

// hits returns the readers' hits counted by the instant at.
func (c *cluster) hits(at int64) uint64 {
	var n uint64
	for _, p := range c.procs {
		if !strings.HasPrefix(p.name, "reader") {
			continue
		}
		var last uint64
		for _, s := range p.statuses() {
			if s.at <= at {
				last = s.hits
			}
		}
		n += last
	}
	return n
}

// epochBumps returns the epoch bumps counted in the control record by the
// instant at, as the helpers saw them.
func (c *cluster) epochBumps(at int64) uint64 {
	var n uint64
	for _, p := range c.procs {
		for _, s := range p.statuses() {
			if s.at <= at {
				n = max(n, s.bumps)
			}
		}
	}
	return n
}

// set writes the next version of key through the test's own cache (pkg)
// or its plain client, and records it.
func (c *cluster) set(key string, pkg bool, ttl time.Duration) {
	c.t.Helper()
	if pkg && c.cache == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cache, err := rediscache.Open(ctx, cacheOptions(c.path, c.srv.Addr(), faultStaleness, true))
		if err != nil {
			c.t.Fatal(err)
		}
		c.cache = cache
		c.t.Cleanup(func() { _ = cache.Close() })
	}
	c.vers[key]++
	v := value(c.vers[key])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := mono()
	var err error
	switch {
	case pkg:
		err = c.cache.Set(ctx, key, v, ttl)
	case ttl > 0:
		err = c.plain.Do(ctx, c.plain.B().Set().Key(key).Value(string(v)).PxMilliseconds(ttl.Milliseconds()).Build()).Error()
	default:
		err = c.plain.Do(ctx, c.plain.B().Set().Key(key).Value(string(v)).Build()).Error()
	}
	if err != nil {
		c.t.Fatalf("writing %s: %v", key, err)
	}
	c.hist.addWrite(write{key: key, ver: c.vers[key], start: start, end: mono(), pkg: pkg, ttl: int64(ttl)})
}

// do runs a command through the plain client.
func (c *cluster) do(cmd rueidis.Completed) rueidis.RedisResult {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.plain.Do(ctx, cmd)
}

// wipe runs fn, which empties Redis, and records it as what.
func (c *cluster) wipe(what string, fn func() error) {
	c.t.Helper()
	start := mono()
	if err := fn(); err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
	c.hist.addWipe(wipe{what: what, start: start, end: mono()})
}

// note adds a figure to the test's log.
func (c *cluster) note(format string, args ...any) {
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
}

// finish stops the helpers, checks the history and logs what it measured.
func (c *cluster) finish() *report {
	c.t.Helper()
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop()
	}
	rep := c.hist.check(c.lim)
	c.t.Logf("%s; MaxStaleness %v", rep, c.lim.maxStaleness)
	for _, n := range c.notes {
		c.t.Log(n)
	}
	var refused uint64
	for _, p := range c.procs {
		if st := p.statuses(); strings.HasPrefix(p.name, "reader") && len(st) > 0 {
			refused += st[len(st)-1].refusals
		}
	}
	c.t.Logf("readers refused %d stale hits (read Redis instead)", refused)
	for _, p := range c.procs {
		if p.errs > 0 {
			c.t.Logf("%s: %d errors, the last: %s", p.name, p.errs, p.lastE)
		}
	}
	for _, v := range rep.violations {
		c.t.Error(v)
	}
	if c.t.Failed() {
		for _, p := range c.procs {
			if s := p.stderr.String(); s != "" {
				c.t.Logf("%s stderr:\n%s", p.name, s)
			}
		}
	}
	faultSummary = append(faultSummary, summaryLine{c.t.Name(), rep})
	return rep
}

type summaryLine struct {
	name string
	rep  *report
}

var faultSummary []summaryLine

// assertHitsResume checks that the readers hit the cache again in the
// last part of the run, which ended at end: tracking works again after the
// fault.
func (c *cluster) assertHitsResume(end int64, what string) {
	c.t.Helper()
	from := end - int64(scaled(400*time.Millisecond))
	if h0, h1 := c.hits(from), c.hits(end); h1 <= h0 {
		c.t.Errorf("%s: no hit in the last %v of the run (hits %d then %d): the cache did not recover",
			what, time.Duration(end-from), h0, h1)
	}
}

// run lets the host run for d.
func run(d time.Duration) { time.Sleep(scaled(d)) }

// TestFault runs a host of processes over a real Redis through each fault
// and checks every read against the guarantee (see checker_test.go):
// staleness within MaxStaleness, read-your-writes for Sets, and no value
// past its Redis TTL.
func TestFault(t *testing.T) {
	faultSummary = nil
	t.Run("PlainWrites", testPlainWrites)
	t.Run("TrackerKilled", testTrackerKilled)
	t.Run("TrackerStopped", testTrackerStopped)
	t.Run("TrackerStalled", testTrackerStalled)
	t.Run("RedisRestart", testRedisRestart)
	t.Run("Flushall", testFlushall)
	t.Run("ClientKill", testClientKill)
	t.Run("Blackhole", testBlackhole)
	t.Run("FillerKilled", testFillerKilled)
	t.Run("FillHeld", testFillHeld)
	t.Run("FillAcrossTakeover", testFillAcrossTakeover)
	t.Run("Expiry", testExpiry)
	worst, worstName := time.Duration(-1<<62), ""
	var plain, pkg []time.Duration
	for _, s := range faultSummary {
		if s.rep.worst > worst {
			worst, worstName = s.rep.worst, s.name
		}
		plain = append(plain, s.rep.lagPlain...)
		pkg = append(pkg, s.rep.lagPkg...)
	}
	if worst > -1<<61 {
		t.Logf("worst staleness over all faults %v (%s), MaxStaleness %v", worst, worstName, faultStaleness)
	}
	t.Logf("invalidation lag over all faults: after plain writes p50 %v p99 %v (n=%d), after Set p50 %v p99 %v (n=%d)",
		percentile(plain, 50), percentile(plain, 99), len(plain), percentile(pkg, 50), percentile(pkg, 99), len(pkg))
}

// testPlainWrites: no other fault than writes from a plain client outside
// the package (half of them; the rest through Set), which reach the cache
// only as invalidations. Gives the invalidation lag of a healthy host.
func testPlainWrites(t *testing.T) {
	c := newCluster(t)
	c.setup(c.srv.Addr())
	run(1500 * time.Millisecond)
	end := mono()
	rep := c.finish()
	c.assertHitsResume(end, "with no fault")
	if len(rep.lagPlain) == 0 {
		t.Error("no plain write was seen by a reader")
	}
}

// testTrackerKilled: SIGKILL of the tracker. The standby takes over, stale
// hits stop within MaxStaleness, and hits resume.
func testTrackerKilled(t *testing.T) {
	c := newCluster(t)
	tracker, standby := c.setup(c.srv.Addr())
	run(800 * time.Millisecond)
	killed := mono()
	tracker.signal(syscall.SIGKILL)
	took := c.awaitTracker(standby, killed, 2*faultStaleness+time.Second)
	c.note("standby took over %v after the tracker's SIGKILL", time.Duration(took-killed))
	run(1500 * time.Millisecond)
	end := mono()
	c.finish()
	c.assertHitsResume(end, "after the takeover")
}

// testTrackerStopped: SIGSTOP of the tracker, SIGCONT later. The standby
// takes over once the watermark is older than the takeover bound; the
// stopped tracker, continued, finds itself deposed and never writes the
// control record again.
func testTrackerStopped(t *testing.T) {
	c := newCluster(t)
	tracker, standby := c.setup(c.srv.Addr())
	run(800 * time.Millisecond)
	stopped := mono()
	tracker.signal(syscall.SIGSTOP)
	took := c.awaitTracker(standby, stopped, 2*faultStaleness+time.Second)
	c.note("standby took over %v after the tracker's SIGSTOP", time.Duration(took-stopped))
	run(1000 * time.Millisecond)
	continued := mono()
	tracker.signal(syscall.SIGCONT)
	run(1000 * time.Millisecond)
	end := mono()
	c.finish()
	c.assertDeposed(tracker, standby, took, continued, end)
	c.assertHitsResume(end, "after the takeover")
}

// testTrackerStalled: SIGSTOP of the tracker for longer than MaxStaleness
// but not long enough for the standby to take over. The tracker's own
// PINGs go unanswered meanwhile, as far as it can tell when it runs again:
// whatever it does then, readers go to Redis while it was stopped, and hits
// resume after.
func testTrackerStalled(t *testing.T) {
	c := newCluster(t)
	tracker, _ := c.setup(c.srv.Addr())
	run(800 * time.Millisecond)
	tracker.signal(syscall.SIGSTOP)
	time.Sleep(faultStaleness + 50*time.Millisecond)
	tracker.signal(syscall.SIGCONT)
	run(1000 * time.Millisecond)
	end := mono()
	c.finish()
	c.assertHitsResume(end, "after the stall")
}

// assertDeposed checks that once the standby took over (at took) and until
// the run ended (at end), the control record named the standby alone, and
// that from 400ms (or half the rest of the run, if shorter) after the old
// tracker could run again (at resumed), it no longer says it tracks.
func (c *cluster) assertDeposed(old, standby *proc, took, resumed, end int64) {
	c.t.Helper()
	if took == 0 {
		return
	}
	for _, ctl := range c.controlsBetween(took, end) {
		if ctl.pid != uint64(standby.pid()) {
			c.t.Errorf("after the takeover the control record names pid %d (old tracker %d, standby %d): %+v",
				ctl.pid, old.pid(), standby.pid(), ctl)
			break
		}
	}
	settled := resumed + min(int64(400*time.Millisecond), (end-resumed)/2)
	seen := false
	for _, s := range old.statuses() {
		if s.at > settled && s.at < end {
			seen = true
			if s.tracking {
				c.t.Errorf("the old tracker still says it tracks %v after it could run again", time.Duration(s.at-resumed))
				break
			}
		}
	}
	if !seen && end > settled {
		c.t.Errorf("the old tracker reported nothing after it could run again")
	}
}

// testRedisRestart: Redis restarts empty. A restart is a wipe: reads that
// begin MaxStaleness after it see no value from before it.
func testRedisRestart(t *testing.T) {
	testWipe(t, "Redis restart", 1500*time.Millisecond, func(c *cluster) error { return c.srv.Restart() })
}

// testFlushall: FLUSHALL from a plain client (a null invalidation).
func testFlushall(t *testing.T) {
	testWipe(t, "FLUSHALL", 1200*time.Millisecond, func(c *cluster) error {
		return c.do(c.plain.B().Flushall().Build()).Error()
	})
}

// testWipe runs the readers and writers, wipes Redis with wipe, runs for
// after, and asserts that the epoch moved and hits came back.
func testWipe(t *testing.T, name string, after time.Duration, wipe func(*cluster) error) {
	c := newCluster(t)
	c.setup(c.srv.Addr())
	run(800 * time.Millisecond)
	before := mono()
	c.wipe(name, func() error { return wipe(c) })
	run(after)
	end := mono()
	c.finish()
	if c.epochBumps(end) <= c.epochBumps(before) {
		t.Errorf("the epoch was not bumped after the %s", name)
	}
	c.assertHitsResume(end, "after the "+name)
}

// testClientKill: CLIENT KILL of the tracking connection alone, then of
// every normal connection.
func testClientKill(t *testing.T) {
	c := newCluster(t)
	c.setup(c.srv.Addr())
	run(800 * time.Millisecond)
	id := c.trackingClient()
	before := mono()
	if err := c.do(c.plain.B().Arbitrary("CLIENT", "KILL", "ID", id).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	run(800 * time.Millisecond)
	if err := c.do(c.plain.B().Arbitrary("CLIENT", "KILL", "TYPE", "normal").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	run(1000 * time.Millisecond)
	end := mono()
	c.finish()
	if n := c.epochBumps(end) - c.epochBumps(before); n < 2 {
		t.Errorf("%d epoch bumps after two kills of the tracking connection, want 2 or more", n)
	}
	c.assertHitsResume(end, "after CLIENT KILL")
}

// trackingClient returns the client id of the one connection tracking in
// BCAST mode, waiting up to 2s for there to be exactly one (a tracker
// reconnecting has none for a moment).
func (c *cluster) trackingClient() string {
	c.t.Helper()
	var list string
	for try := 0; try < 100; try++ {
		if try > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		var err error
		if list, err = c.do(c.plain.B().ClientList().Build()).ToString(); err != nil {
			c.t.Fatal(err)
		}
		if ids := bcastClients(list); len(ids) == 1 {
			return ids[0]
		}
	}
	c.t.Fatalf("want one BCAST tracking connection, CLIENT LIST shows:\n%s", list)
	return ""
}

// bcastClients returns the ids of the clients in list, CLIENT LIST's reply,
// that track in BCAST mode.
func bcastClients(list string) []string {
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		var id, flags string
		// RESP3 sends CLIENT LIST as a verbatim string, "txt:" first.
		for _, f := range strings.Fields(strings.TrimPrefix(line, "txt:")) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(f, "flags="); ok {
				flags = v
			}
		}
		if strings.Contains(flags, "B") { // tracking in BCAST mode
			ids = append(ids, id)
		}
	}
	return ids
}

// testBlackhole: the tracker reaches Redis through a proxy that stops
// forwarding (a partition that resets nothing), then heals. The standby
// takes over; the old tracker, healed, is deposed.
func testBlackhole(t *testing.T) {
	c := newCluster(t)
	proxy := redistest.StartProxy(t, c.srv.Addr())
	tracker, standby := c.setup(proxy.Addr())
	run(800 * time.Millisecond)
	cut := mono()
	proxy.Blackhole(true)
	took := c.awaitTracker(standby, cut, 2*faultStaleness+time.Second)
	c.note("standby took over %v after the tracker's link was blackholed", time.Duration(took-cut))
	run(800 * time.Millisecond)
	healed := mono()
	proxy.Blackhole(false)
	run(1000 * time.Millisecond)
	end := mono()
	c.finish()
	c.assertDeposed(tracker, standby, took, healed, end)
	c.assertHitsResume(end, "after the partition")
}

// heldKey is the key whose fill the filler holds.
const heldKey = keyPrefix + "held"

// testFillerKilled: a process is SIGKILLed while its fill of a key is in
// flight (its reply held) and other processes wait for that fill. They
// take over within FillTimeout and read the key themselves.
func testFillerKilled(t *testing.T) {
	c := newCluster(t)
	c.setup(c.srv.Addr())
	c.set(heldKey, false, 0) // not cached: nobody read it yet
	filler := c.start("filler", "reader", c.srv.Addr(), envKeys+"="+heldKey, envStagger+"=50ms",
		envHoldKey+"="+heldKey, envHold+"=0")
	select {
	case <-filler.held:
	case <-time.After(5 * time.Second):
		t.Fatal("the filler never sent its fill")
	}
	c.start("waiter", "reader", c.srv.Addr(), envKeys+"="+heldKey, envWorkers+"=2", envGap+"=1ms")
	time.Sleep(300 * time.Millisecond)
	killed := mono()
	filler.signal(syscall.SIGKILL)
	run(1000 * time.Millisecond)
	c.finish()
	var waited, afterKill time.Duration
	n := 0
	for _, r := range c.hist.reads {
		if r.who != "waiter" {
			continue
		}
		waited = max(waited, time.Duration(r.end-r.start))
		if r.start < killed {
			n++
			afterKill = max(afterKill, time.Duration(r.end-killed))
		}
	}
	t.Logf("%d reads waited for the killed filler; they ended up to %v after the kill; the longest read took %v", n, afterKill, waited)
	if n == 0 {
		t.Error("no read waited for the filler")
	}
	if bound := time.Second + 500*time.Millisecond; waited > bound {
		t.Errorf("a read of %s took %v, more than FillTimeout and slack (%v)", heldKey, waited, bound)
	}
}

// testFillHeld: a fill whose Redis read happened is held for longer than
// MaxStaleness while the key is written twice, by a plain client and then
// through Set. The fill must not be stored, and no Get that began after
// those writes (in the filler's process, where Gets of the key join the
// fill in flight, or elsewhere) may return its value.
func testFillHeld(t *testing.T) {
	c := newCluster(t)
	c.setup(c.srv.Addr())
	c.set(heldKey, false, 0)
	const hold = 800 * time.Millisecond // past MaxStaleness, within FillTimeout
	filler := c.start("filler", "reader", c.srv.Addr(), envKeys+"="+heldKey, envStagger+"=25ms",
		envHoldKey+"="+heldKey, envHold+"="+hold.String())
	var heldAt int64
	select {
	case heldAt = <-filler.held:
	case <-time.After(5 * time.Second):
		t.Fatal("the filler never sent its fill")
	}
	time.Sleep(100 * time.Millisecond)
	c.set(heldKey, false, 0)
	time.Sleep(50 * time.Millisecond)
	c.set(heldKey, true, 0)
	setAt := mono()
	// Other processes read the key only once the filler's Gets that join
	// its held fill include some that began MaxStaleness after the plain
	// write: until then nothing stores the key.
	time.Sleep(time.Duration(heldAt + int64(450*time.Millisecond) - mono()))
	c.start("waiter", "reader", c.srv.Addr(), envKeys+"="+heldKey, envWorkers+"=2", envGap+"=1ms")
	released := heldAt + int64(hold)
	time.Sleep(time.Duration(released + int64(700*time.Millisecond) - mono()))
	c.finish()
	// The filler's Gets that began after the Set, while its fill was
	// held, waited for that fill: they are the ones that must not take its
	// value.
	joined := 0
	for _, r := range c.hist.reads {
		if r.who == "filler" && r.start > setAt && r.start < released && r.end >= released {
			joined++
		}
	}
	t.Logf("%d of the filler's Gets began after the Set and waited for the held fill", joined)
	if joined == 0 {
		t.Error("no Get waited for the held fill after the Set: the test did not test it")
	}
}

// testFillAcrossTakeover: a fill is held while the tracker is SIGKILLed
// and the key written by a plain client before the standby subscribes, so
// that no invalidation cancels the fill. The fill read the epoch before
// Redis, so its value, stored under the dead tracker's epoch, is never
// served: not as a hit, and not to the processes that waited for it.
func testFillAcrossTakeover(t *testing.T) {
	c := newCluster(t)
	tracker, standby := c.setup(c.srv.Addr())
	c.set(heldKey, false, 0)
	const hold = 800 * time.Millisecond
	filler := c.start("filler", "reader", c.srv.Addr(), envKeys+"="+heldKey, envStagger+"=25ms",
		envHoldKey+"="+heldKey, envHold+"="+hold.String())
	var heldAt int64
	select {
	case heldAt = <-filler.held:
	case <-time.After(5 * time.Second):
		t.Fatal("the filler never sent its fill")
	}
	killed := mono()
	tracker.signal(syscall.SIGKILL)
	c.set(heldKey, false, 0)
	written := mono()
	took := c.awaitTracker(standby, killed, 2*faultStaleness+time.Second)
	if took < written {
		t.Logf("the standby took over before the write completed: the write's invalidation cancels the fill")
	}
	time.Sleep(time.Duration(heldAt + int64(400*time.Millisecond) - mono()))
	c.start("waiter", "reader", c.srv.Addr(), envKeys+"="+heldKey, envWorkers+"=2", envGap+"=1ms")
	time.Sleep(time.Duration(heldAt + int64(hold) + int64(700*time.Millisecond) - mono()))
	c.finish()
}

// testExpiry: keys written with a TTL, and a PEXPIRE of a cached key
// without one. A hit never outlives the key in Redis.
func testExpiry(t *testing.T) {
	c := newCluster(t)
	px := keyPrefix + "px"
	c.set(px, false, 0)
	xs := keys("x", 4)
	c.setup(c.srv.Addr(), xs, px)
	c.start("ttlwriter", "writer", c.srv.Addr(), envKeys+"="+xs, envGap+"=75ms", envTTL+"=120ms", envSeed+"=2")
	expireSoon := func() {
		start := mono()
		if err := c.do(c.plain.B().Pexpire().Key(px).Milliseconds(50).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		c.hist.addPexpire(pexpire{key: px, start: start, end: mono(), ttl: int64(50 * time.Millisecond)})
	}
	run(600 * time.Millisecond)
	expireSoon()
	run(600 * time.Millisecond)
	c.set(px, true, 0)
	run(400 * time.Millisecond)
	expireSoon()
	run(600 * time.Millisecond)
	rep := c.finish()
	if rep.ttlN == 0 {
		t.Error("no read of a value with a TTL")
	}
}
