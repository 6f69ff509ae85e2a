//go:build linux

package rediscache_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sharedmap/sharedmap/hashmap"
	"github.com/sharedmap/sharedmap/rediscache"
	"golang.org/x/sys/unix"
)

// The fault tests run their writers, readers and trackers as processes:
// re-executions of the test binary whose environment names a role. The
// role runs from init, before the testing package or any TestMain, and
// exits; it reports to the test on stdout, one event a line, and ends when
// its stdin closes (or the test dies).
//
// Lines a helper prints:
//
//	READY                                     set up, now running
//	W key ver start end pkg ttl del           a write completed (pkg 1: through Set or Del;
//	                                          del 1: a delete)
//	R key ver start end                       a Get returned (ver -1: ErrNotFound)
//	S at tracking pid epoch hits misses refusals fills bumps cEpoch cWatermark cPID cTerm
//	                                          Stats and the control record
//	H at                                      the held fill's request is being sent
//	B text                                    a broken promise seen by the helper
//	E text                                    an error (Redis down, ...)
const (
	envRole     = "REDISCACHE_FAULT_ROLE"
	envPath     = "REDISCACHE_FAULT_PATH"      // the map file
	envAddr     = "REDISCACHE_FAULT_ADDR"      // Redis (or a proxy) for the package
	envPlain    = "REDISCACHE_FAULT_PLAIN"     // Redis for the plain client
	envKeys     = "REDISCACHE_FAULT_KEYS"      // comma-separated
	envGap      = "REDISCACHE_FAULT_GAP"       // pause between operations
	envTTL      = "REDISCACHE_FAULT_TTL"       // writers' TTL
	envWorkers  = "REDISCACHE_FAULT_WORKERS"   // readers' goroutines
	envStagger  = "REDISCACHE_FAULT_STAGGER"   // a new one-Get goroutine this often, instead of workers
	envHoldKey  = "REDISCACHE_FAULT_HOLDKEY"   // hold the reply to the first request naming this key
	envHold     = "REDISCACHE_FAULT_HOLD"      // for this long (0: until killed)
	envSeed     = "REDISCACHE_FAULT_SEED"      // writers' choice of Set or plain SET
	envStaleMax = "REDISCACHE_FAULT_STALENESS" // Options.MaxStaleness
)

// keyPrefix is the one prefix the fault tests' caches track.
const keyPrefix = "fault:"

// controlKey is the control record's key in the map (the design's).
const controlKey = "\x00rediscache\x00control"

func init() {
	if role := os.Getenv(envRole); role != "" {
		os.Exit(runRole(role))
	}
}

// mono is CLOCK_MONOTONIC in nanoseconds: one clock for every process of
// the host.
func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// value is version ver of a key as the writers write it.
func value(ver int64) []byte {
	b := strconv.AppendInt(nil, ver, 10)
	b = append(b, '|')
	return append(b, bytes.Repeat([]byte{'.'}, 64-len(b))...)
}

// version parses a value written by value.
func version(v []byte) (int64, error) {
	i := bytes.IndexByte(v, '|')
	if i < 0 || len(v) != 64 {
		return 0, fmt.Errorf("not a versioned value: %q", v)
	}
	return strconv.ParseInt(string(v[:i]), 10, 64)
}

// cacheOptions are the options of every cache of the fault tests.
func cacheOptions(path, addr string, maxStaleness time.Duration, noTracker bool) rediscache.Options {
	return rediscache.Options{
		Path:         path,
		Map:          &hashmap.Options{Entries: 4096, AverageKeySize: 24, AverageValueSize: 96},
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
		Prefixes:     []string{keyPrefix},
		MaxStaleness: maxStaleness,
		PingInterval: maxStaleness / 5,
		NegativeTTL:  time.Second,
		FillTimeout:  time.Second,
		NoTracker:    noTracker,
	}
}

// plainClient is a rueidis client outside the package, with no cache.
func plainClient(addr string) (rueidis.Client, error) {
	return rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
}

// out serializes a helper's lines; a ticker flushes them.
type out struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *out) emit(flush bool, format string, args ...any) {
	o.mu.Lock()
	fmt.Fprintf(o.w, format+"\n", args...)
	if flush {
		_ = o.w.Flush()
	}
	o.mu.Unlock()
}

func (o *out) flush() {
	o.mu.Lock()
	_ = o.w.Flush()
	o.mu.Unlock()
}

// role is a helper process's environment and output.
type role struct {
	*out
	quit  chan struct{} // closed when stdin closes
	path  string
	addr  string
	plain string
	keys  []string
	gap   time.Duration
	ms    time.Duration
}

func envDuration(name string, def time.Duration) time.Duration {
	if s := os.Getenv(name); s != "" {
		if d, err := time.ParseDuration(s); err == nil {
			return d
		}
	}
	return def
}

func runRole(name string) int {
	r := &role{
		out:   &out{w: bufio.NewWriterSize(os.Stdout, 64<<10)},
		quit:  make(chan struct{}),
		path:  os.Getenv(envPath),
		addr:  os.Getenv(envAddr),
		plain: os.Getenv(envPlain),
		gap:   envDuration(envGap, time.Millisecond),
		ms:    envDuration(envStaleMax, 250*time.Millisecond),
	}
	if k := os.Getenv(envKeys); k != "" {
		r.keys = strings.Split(k, ",")
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(r.quit)
	}()
	go func() {
		for {
			time.Sleep(20 * time.Millisecond)
			r.flush()
		}
	}()
	var err error
	switch name {
	case "tracker":
		err = r.tracker()
	case "writer":
		err = r.writer()
	case "reader":
		err = r.reader()
	default:
		err = fmt.Errorf("no role %q", name)
	}
	if err != nil {
		r.emit(true, "B %s: %v", name, err)
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r.flush()
	return 0
}

// open opens the role's cache, holding a request as the environment says.
func (r *role) open(noTracker bool) (*rediscache.Cache, error) {
	o := cacheOptions(r.path, r.addr, r.ms, noTracker)
	if hk := os.Getenv(envHoldKey); hk != "" {
		h := &holder{out: r.out, key: []byte(hk), hold: envDuration(envHold, 0)}
		co := o.ClientOption
		co.DialCtxFn = h.dial
		client, err := rueidis.NewClient(co)
		if err != nil {
			return nil, err
		}
		o.Client = client
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return rediscache.Open(ctx, o)
}

// status prints the cache's Stats and control record every 20ms until
// quit.
func (r *role) status(c *rediscache.Cache) {
	var buf [64]byte
	for {
		s := c.Stats()
		var ctl [4]uint64
		if m := c.Map(); m != nil {
			if v, err := m.GetInto(buf[:0], []byte(controlKey)); err == nil && len(v) >= 32 {
				for i := range ctl {
					ctl[i] = binary.LittleEndian.Uint64(v[8*i:])
				}
			}
		}
		r.emit(false, "S %d %t %d %d %d %d %d %d %d %d %d %d %d", mono(), s.Tracking, s.TrackerPID, s.Epoch,
			s.Hits, s.Misses, s.StaleRefusals, s.Fills, s.EpochBumps, ctl[0], ctl[1], ctl[2], ctl[3])
		select {
		case <-r.quit:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// tracker opens a cache that may track, reports its state, and closes it
// when told to.
func (r *role) tracker() error {
	c, err := r.open(false)
	if err != nil {
		return err
	}
	r.emit(true, "READY")
	r.status(c)
	return c.Close()
}

// writer writes its keys in turn, each a version higher than the last,
// through a plain SET (keys of even index) or through Set or a plain SET at
// random (odd index), retrying a failed write until it completes. One write
// in eight is a delete instead (DEL or Del, as the SET would have been): a
// version whose value is absence. It writes version 1 of every key before
// it says READY.
func (r *role) writer() error {
	c, err := r.open(true)
	if err != nil {
		return err
	}
	defer c.Close()
	plain, err := plainClient(r.plain)
	if err != nil {
		return err
	}
	defer plain.Close()
	seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	rng := rand.New(rand.NewPCG(seed, uint64(os.Getpid())))
	ttl := envDuration(envTTL, 0)
	vers := make(map[string]int64)
	writeOne := func(k string, pkg, del bool) bool {
		vers[k]++
		v := value(vers[k])
		start := mono()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			var err error
			switch {
			case del && pkg:
				err = c.Del(ctx, k)
			case del:
				err = plain.Do(ctx, plain.B().Del().Key(k).Build()).Error()
			case pkg:
				err = c.Set(ctx, k, v, ttl)
			case ttl > 0:
				err = plain.Do(ctx, plain.B().Set().Key(k).Value(string(v)).PxMilliseconds(ttl.Milliseconds()).Build()).Error()
			default:
				err = plain.Do(ctx, plain.B().Set().Key(k).Value(string(v)).Build()).Error()
			}
			cancel()
			if err == nil {
				break
			}
			r.emit(false, "E write %s: %v", k, err)
			select {
			case <-r.quit:
				return false
			case <-time.After(10 * time.Millisecond):
			}
		}
		r.emit(false, "W %s %d %d %d %d %d %d", k, vers[k], start, mono(), b2i(pkg), ttl, b2i(del))
		return true
	}
	for _, k := range r.keys {
		if !writeOne(k, false, false) {
			return nil
		}
	}
	r.emit(true, "READY")
	for i := 0; ; i++ {
		select {
		case <-r.quit:
			return nil
		default:
		}
		// Keys of even index are written by the plain client alone: a Set
		// would delete the entry and hide a tracker that failed.
		k := i % len(r.keys)
		if !writeOne(r.keys[k], k%2 == 1 && rng.IntN(2) == 0, rng.IntN(8) == 0) {
			return nil
		}
		time.Sleep(r.gap)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// reader reads its keys through the package: workers goroutines, each
// reading the keys in turn (by Get, GetInto or MGet: see read); or, with a stagger, a new goroutine that reads
// the first key once every stagger.
func (r *role) reader() error {
	c, err := r.open(true)
	if err != nil {
		return err
	}
	defer c.Close()
	r.emit(true, "READY")
	go r.status(c)
	var wg sync.WaitGroup
	if stagger := envDuration(envStagger, 0); stagger > 0 {
		for {
			select {
			case <-r.quit:
				return nil // Gets still held are not waited for
			case <-time.After(stagger):
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.readOne(c, r.keys[0], true)
			}()
		}
	}
	workers, _ := strconv.Atoi(os.Getenv(envWorkers))
	for g := range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 128)
			for i := g; ; i++ {
				select {
				case <-r.quit:
					return
				default:
				}
				// Workers take turns at Get, GetInto and MGet.
				switch g % 3 {
				case 0:
					r.read(c, nil, r.keys[i%len(r.keys):][:1], false)
				case 1:
					r.read(c, buf, r.keys[i%len(r.keys):][:1], false)
				case 2:
					ks := make([]string, 0, 3)
					for j := range 3 {
						ks = append(ks, r.keys[(i+j)%len(r.keys)])
					}
					r.read(c, nil, ks, false)
				}
				time.Sleep(r.gap)
			}
		}()
	}
	wg.Wait()
	return nil
}

// readOne reads key through c and reports the read.
func (r *role) readOne(c *rediscache.Cache, key string, flush bool) {
	r.read(c, nil, []string{key}, flush)
}

// read reads keys through c and reports each read: one key with Get, or
// with GetInto into buf when buf is not nil; several with MGet, each key's
// read spanning the whole call.
func (r *role) read(c *rediscache.Cache, buf []byte, keys []string, flush bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := mono()
	var vs [][]byte
	var err error
	switch {
	case len(keys) > 1:
		vs, err = c.MGet(ctx, keys...)
	case buf != nil:
		var v []byte
		v, err = c.GetInto(ctx, buf[:0], keys[0])
		vs = [][]byte{v}
	default:
		var v []byte
		v, err = c.Get(ctx, keys[0])
		vs = [][]byte{v}
	}
	end := mono()
	if errors.Is(err, rediscache.ErrNotFound) && len(keys) == 1 {
		vs, err = [][]byte{nil}, nil
	}
	if err != nil {
		r.emit(flush, "E read %v: %v", keys, err)
		return
	}
	for i, key := range keys {
		if vs[i] == nil {
			r.emit(flush, "R %s -1 %d %d", key, start, end)
			continue
		}
		ver, err := version(vs[i])
		if err != nil {
			r.emit(true, "B read %s: %v", key, err)
			continue
		}
		r.emit(flush, "R %s %d %d %d", key, ver, start, end)
	}
}

// holder holds the reply to the first request that names key: a fill whose
// Redis read has happened and whose value is on its way, for hold (or
// until the process is killed).
type holder struct {
	*out
	key  []byte
	hold time.Duration
	used atomic.Bool
}

func (h *holder) dial(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &holdConn{Conn: c, h: h}, nil
}

type holdConn struct {
	net.Conn
	h       *holder
	pending atomic.Bool
}

func (c *holdConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.h.key) && c.h.used.CompareAndSwap(false, true) {
		c.pending.Store(true) // before the request leaves: its reply is held
		c.h.emit(true, "H %d", mono())
	}
	return c.Conn.Write(b)
}

func (c *holdConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.pending.CompareAndSwap(true, false) {
		if c.h.hold <= 0 {
			select {} // until the process is killed
		}
		time.Sleep(c.h.hold)
	}
	return n, err
}

// The test's side.

// control is the control record as a helper saw it.
type control struct{ epoch, watermark, pid, term uint64 }

// status is one S line.
type status struct {
	at                                          int64
	tracking                                    bool
	trackerPID                                  int
	epoch, hits, misses, refusals, fills, bumps uint64
	ctl                                         control
}

// proc is a helper process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  chan struct{}
	held   chan int64
	exited chan struct{} // closed once reaped (at once: a zombie would pass for alive)
	done   chan struct{} // closed when its stdout ends
	stderr lockedBuffer

	mu     sync.Mutex
	status []status
	errs   int
	lastE  string
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startProc starts a helper in role with env and waits until it is
// READY.
func startProc(t *testing.T, h *history, name, role string, env ...string) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, ready: make(chan struct{}), held: make(chan int64, 4),
		exited: make(chan struct{}), done: make(chan struct{})}
	p.cmd = exec.Command(exe)
	p.cmd.Env = append(append(os.Environ(), envRole+"="+role), env...)
	p.cmd.Stderr = &p.stderr
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = wr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wr.Close()
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	go p.scan(rd, h)
	t.Cleanup(p.stop)
	select {
	case <-p.ready:
	case <-p.done:
		t.Fatalf("helper %s ended before it was ready: %s", name, p.stderr.String())
	case <-time.After(15 * time.Second):
		t.Fatalf("helper %s not ready within 15s: %s", name, p.stderr.String())
	}
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// stop closes the helper's stdin, kills it if it has not ended within 5s,
// and waits until all its lines are read.
func (p *proc) stop() {
	_ = p.stdin.Close()
	p.signal(syscall.SIGCONT)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		p.signal(syscall.SIGKILL)
		<-p.exited
	}
	<-p.done
}

// scan reads the helper's lines into h and p.
func (p *proc) scan(rd *os.File, h *history) {
	defer close(p.done)
	defer rd.Close()
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		n := func(i int) int64 {
			if i >= len(f) {
				return 0
			}
			v, _ := strconv.ParseInt(f[i], 10, 64)
			return v
		}
		switch f[0] {
		case "READY":
			close(p.ready)
		case "W":
			h.addWrite(write{key: f[1], ver: n(2), start: n(3), end: n(4), pkg: n(5) == 1, ttl: n(6), del: n(7) == 1})
		case "R":
			h.addRead(read{key: f[1], ver: n(2), start: n(3), end: n(4), who: p.name})
		case "S":
			s := status{at: n(1), tracking: f[2] == "true", trackerPID: int(n(3))}
			u := func(i int) uint64 { return uint64(n(i)) }
			s.epoch, s.hits, s.misses, s.refusals, s.fills, s.bumps = u(4), u(5), u(6), u(7), u(8), u(9)
			s.ctl = control{u(10), u(11), u(12), u(13)}
			p.mu.Lock()
			p.status = append(p.status, s)
			p.mu.Unlock()
		case "H":
			p.held <- n(1)
		case "B":
			h.addBad(p.name + ": " + line[2:])
		case "E":
			p.mu.Lock()
			p.errs++
			p.lastE = line[2:]
			p.mu.Unlock()
		}
	}
}

// statuses returns a copy of the helper's status lines so far.
func (p *proc) statuses() []status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]status(nil), p.status...)
}
