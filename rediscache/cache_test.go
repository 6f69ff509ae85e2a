//go:build linux

package rediscache

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sharedmap/sharedmap/hashmap"
	"github.com/sharedmap/sharedmap/rediscache/internal/redistest"
	"github.com/sharedmap/sharedmap/typed"
)

var ctx = context.Background()

func TestHitMissFill(t *testing.T) {
	c := newCache(t, nil)
	p := plainClient(t)
	key := prefixFor(t) + "k"
	plainSet(t, p, "SET", key, "v1")
	settle(t, c) // else the write's invalidation may remove the first fill

	if got := mustGet(t, c, key); got != "v1" {
		t.Fatalf("first Get: %q", got)
	}
	if s := c.Stats(); s.Misses != 1 || s.Fills != 1 || s.Hits != 0 {
		t.Fatalf("after a miss: %+v", s)
	}
	for range 3 {
		if got := mustGet(t, c, key); got != "v1" {
			t.Fatalf("hit: %q", got)
		}
	}
	if s := c.Stats(); s.Hits != 3 || s.Fills != 1 || !s.Tracking || s.TrackerPID == 0 || s.Lag < 0 || s.Lag > DefaultMaxStaleness {
		t.Fatalf("after hits: %+v", s)
	}
	if _, err := c.Get(ctx, prefixFor(t)+"absent"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of an absent key: %v", err)
	}
	got, err := c.MGet(ctx, key, prefixFor(t)+"absent", key)
	if err != nil || len(got) != 3 || string(got[0]) != "v1" || got[1] != nil || string(got[2]) != "v1" {
		t.Fatalf("MGet: %q, %v", got, err)
	}
}

func TestMGet(t *testing.T) {
	c := newCache(t, func(o *Options) { o.NegativeTTL = time.Minute })
	p := plainClient(t)
	pre := prefixFor(t)
	var keys []string
	for i := range 40 {
		k := fmt.Sprintf("%sk%d", pre, i)
		keys = append(keys, k)
		if i%4 != 3 { // every fourth key absent
			plainSet(t, p, "SET", k, "v"+k)
		}
	}
	plainSet(t, p, "SET", "elsewhere:"+t.Name(), "passed")
	keys = append(keys, "elsewhere:"+t.Name())
	settle(t, c)
	check := func(round int) {
		t.Helper()
		got, err := c.MGet(ctx, keys...)
		if err != nil || len(got) != len(keys) {
			t.Fatalf("round %d: MGet: %d values, %v", round, len(got), err)
		}
		for i, k := range keys[:40] {
			want := "v" + k
			if i%4 == 3 {
				if got[i] != nil {
					t.Fatalf("round %d: absent %s: %q", round, k, got[i])
				}
			} else if string(got[i]) != want {
				t.Fatalf("round %d: %s: %q, want %q", round, k, got[i], want)
			}
		}
		if string(got[40]) != "passed" {
			t.Fatalf("round %d: pass-through key: %q", round, got[40])
		}
	}
	check(0)
	if s := c.Stats(); s.Fills != 40 || s.PassThrough != 1 {
		t.Fatalf("first MGet: %+v", s)
	}
	check(1)
	if s := c.Stats(); s.Hits+s.StaleRefusals < 40 || s.Fills != 40 {
		t.Fatalf("second MGet: %+v", s)
	}
}

// A write by a client outside the package reaches every reader within
// MaxStaleness, through the tracker's invalidation.
func TestOutsideWriteInvalidated(t *testing.T) {
	c := newCache(t, nil)
	p := plainClient(t)
	key := prefixFor(t) + "k"
	for i := range 20 {
		old, next := string(rune('a'+i)), string(rune('a'+i+1))
		if i == 0 {
			plainSet(t, p, "SET", key, old)
		}
		if got := mustGet(t, c, key); got != old { // cached now
			t.Fatalf("round %d: Get %q, want %q", i, got, old)
		}
		plainSet(t, p, "SET", key, next)
		written := time.Now()
		for {
			got := mustGet(t, c, key)
			if got == next {
				break
			}
			if time.Since(written) > DefaultMaxStaleness {
				t.Fatalf("round %d: Get %q more than MaxStaleness after the write of %q", i, got, next)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if s := c.Stats(); s.InvalidationsApplied == 0 {
		t.Fatalf("no invalidations applied: %+v", s)
	}
}

// Set and Del are read back at once by another Cache of the same file,
// without waiting for the invalidation.
func TestReadYourWritesSameFile(t *testing.T) {
	a := newCache(t, nil)
	o := testOptions(t, a.Map().Path())
	o.NoTracker = true
	b := openCache(t, o)
	key := prefixFor(t) + "k"
	for i := range 200 {
		want := strings.Repeat("x", i%7) + string(rune('A'+i%26))
		if _, err := b.Get(ctx, key); err != nil && !errors.Is(err, ErrNotFound) { // fill the old value
			t.Fatal(err)
		}
		if err := a.Set(ctx, key, []byte(want), 0); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, b, key); got != want {
			t.Fatalf("round %d: Get after Set: %q, want %q", i, got, want)
		}
		if i%10 == 9 {
			if err := a.Del(ctx, key); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Get(ctx, key); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get after Del: %v", err)
			}
		}
	}
}

// A process that opens the file later reads what a Set stored before, not
// the entry that the Set replaced.
func TestReadYourWritesOtherProcess(t *testing.T) {
	c := newCache(t, nil)
	key := prefixFor(t) + "k"
	cmd := helperCommand("reader", "MAP_PATH="+c.Map().Path(), "PREFIX="+prefixFor(t))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer in.Close()
	out := bufio.NewScanner(outp)
	read := func() string {
		t.Helper()
		for out.Scan() {
			if rest, ok := strings.CutPrefix(out.Text(), "@ "); ok {
				return rest
			}
		}
		t.Fatalf("helper ended: %v", out.Err())
		return ""
	}
	if got := read(); got != "ready" {
		t.Fatalf("helper: %q", got)
	}
	for i := range 50 {
		want := string(rune('a' + i%26))
		if err := c.Set(ctx, key, []byte(want), time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Write([]byte(key + "\n")); err != nil {
			t.Fatal(err)
		}
		if got := read(); got != want {
			t.Fatalf("round %d: helper read %q after Set of %q", i, got, want)
		}
		// The helper's read filled the map: the next Set must remove it.
		if got := mustGet(t, c, key); got != want {
			t.Fatalf("round %d: own read %q", i, got)
		}
	}
	if err := c.Del(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Write([]byte(key + "\n")); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "-" {
		t.Fatalf("helper read %q after Del", got)
	}
}

func TestFlushAllDropsEverything(t *testing.T) {
	c := newCache(t, nil)
	p := plainClient(t)
	keys := []string{prefixFor(t) + "a", prefixFor(t) + "b"}
	for _, k := range keys {
		plainSet(t, p, "SET", k, "v")
	}
	// The SETs' own invalidations must land before the fills, or they drop
	// the entries and the Gets below miss without FLUSHALL's help.
	settle(t, c)
	for _, k := range keys {
		awaitHit(t, c, k, "v")
	}
	before := c.Stats()
	plainSet(t, p, "FLUSHALL")
	flushed := time.Now()
	for _, k := range keys {
		for {
			_, err := c.Get(ctx, k)
			if errors.Is(err, ErrNotFound) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if time.Since(flushed) > DefaultMaxStaleness {
				t.Fatalf("%s still served more than MaxStaleness after FLUSHALL", k)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// A Get also misses when it passes through to Redis while the watermark
	// is stale, before the tracker has read FLUSHALL's message: the bump is
	// awaited.
	bumped := func() bool {
		after := c.Stats()
		return after.EpochBumps > before.EpochBumps && after.Epoch != before.Epoch
	}
	if !waitFor(5*time.Second, bumped) {
		t.Fatalf("FLUSHALL bumped no epoch: before %+v, after %+v", before, c.Stats())
	}
}

// When the tracker closes, a standby (here another Cache of the same
// process) takes over at its next check, and invalidations flow again.
func TestTakeoverOnClose(t *testing.T) {
	a := newCache(t, nil)
	b := openCache(t, testOptions(t, a.Map().Path()))
	time.Sleep(3 * DefaultPingInterval)
	if !a.Stats().Tracking || b.Stats().Tracking {
		t.Fatalf("tracking: a %v, b %v", a.Stats().Tracking, b.Stats().Tracking)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(time.Second, func() bool { return b.Stats().Tracking }) {
		t.Fatalf("no takeover within a second: %+v", b.Stats())
	}
	waitFresh(t, b)
	p := plainClient(t)
	key := prefixFor(t) + "k"
	plainSet(t, p, "SET", key, "old")
	mustGet(t, b, key)
	plainSet(t, p, "SET", key, "new")
	time.Sleep(DefaultMaxStaleness)
	if got := mustGet(t, b, key); got != "new" {
		t.Fatalf("after takeover, Get %q MaxStaleness after a write", got)
	}
}

// trackedThrough opens a cache whose tracker reaches Redis through a proxy
// while its data commands go directly.
func trackedThrough(t *testing.T) (*Cache, *redistest.Proxy) {
	t.Helper()
	px := redistest.StartProxy(t, redisAddr)
	direct := plainClient(t)
	c := newCache(t, func(o *Options) {
		o.Client = direct
		o.ClientOption.InitAddress = []string{px.Addr()}
	})
	return c, px
}

// A blackholed tracking connection sends no reset and no invalidation: the
// watermark stalls, and reads go to Redis instead of serving what may be
// stale.
func TestBlackholeStopsHits(t *testing.T) {
	c, px := trackedThrough(t)
	p := plainClient(t)
	key := prefixFor(t) + "k"
	plainSet(t, p, "SET", key, "old")
	mustGet(t, c, key)
	mustGet(t, c, key)

	px.Blackhole(true)
	plainSet(t, p, "SET", key, "new")
	written := time.Now()
	for time.Since(written) < 2*DefaultMaxStaleness {
		got := mustGet(t, c, key)
		if got != "new" && time.Since(written) > DefaultMaxStaleness {
			t.Fatalf("Get %q more than MaxStaleness after the write, tracker blackholed", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	s := c.Stats()
	if s.StaleRefusals == 0 || s.Lag >= 0 && s.Lag < DefaultMaxStaleness {
		t.Fatalf("blackholed tracker: %+v", s)
	}

	px.Blackhole(false)
	px.Cut() // the tracker may be waiting out a handshake timeout
	waitFresh(t, c)
	awaitHit(t, c, key, "new")
}

// A cut tracking connection may have lost invalidations: the tracker bumps
// the epoch, which drops every entry.
func TestCutBumpsEpoch(t *testing.T) {
	c, px := trackedThrough(t)
	p := plainClient(t)
	key := prefixFor(t) + "k"
	plainSet(t, p, "SET", key, "v")
	mustGet(t, c, key)
	before := c.Stats()
	px.Cut()
	if !waitFor(2*time.Second, func() bool { return c.Stats().Epoch > before.Epoch+1 }) {
		t.Fatalf("no epoch bump after a cut: before %+v, after %+v", before, c.Stats())
	}
	waitFresh(t, c)
	fills := c.Stats().Fills
	if got := mustGet(t, c, key); got != "v" || c.Stats().Fills != fills+1 {
		t.Fatalf("after the cut: %q, fills %d -> %d", got, fills, c.Stats().Fills)
	}
}

func TestNegativeCaching(t *testing.T) {
	c := newCache(t, func(o *Options) { o.NegativeTTL = time.Minute })
	p := plainClient(t)
	key := prefixFor(t) + "absent"
	for range 3 {
		if _, err := c.Get(ctx, key); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get of an absent key: %v", err)
		}
	}
	// A process starved of CPU for MaxStaleness refuses its entries
	// instead; those reads go to Redis.
	if s := c.Stats(); s.Fills != 1 || s.Hits+s.StaleRefusals != 2 {
		t.Fatalf("negative entry not served: %+v", s)
	}
	plainSet(t, p, "SET", key, "now")
	time.Sleep(DefaultMaxStaleness)
	if got := mustGet(t, c, key); got != "now" {
		t.Fatalf("negative entry outlived a write: %q", got)
	}

	// Without NegativeTTL every read of an absent key goes to Redis.
	d := newCache(t, nil)
	for range 3 {
		if _, err := d.Get(ctx, key+"2"); !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	}
	if s := d.Stats(); s.Hits != 0 || s.Misses != 3 {
		t.Fatalf("absence cached with NegativeTTL 0: %+v", s)
	}
	if ok, _ := d.Map().Contains([]byte(key + "2")); ok {
		t.Fatal("absence stored with NegativeTTL 0")
	}
}

// An entry never outlives its Redis key: its TTL is at most the key's
// remaining PTTL, also after PEXPIRE shortens it, and MaxTTL caps keys
// without one.
func TestTTLNeverBeyondRedis(t *testing.T) {
	c := newCache(t, func(o *Options) { o.MaxTTL = time.Minute })
	p := plainClient(t)
	key := prefixFor(t) + "k"
	ttlOf := func() time.Duration {
		t.Helper()
		d, ok, err := c.Map().GetTTL([]byte(key))
		if err != nil || !ok {
			t.Fatalf("GetTTL: %v, %v", ok, err)
		}
		return d
	}

	plainSet(t, p, "SET", key, "v")
	settle(t, c)
	fillEntry(t, c, key)
	if d := ttlOf(); d > time.Minute || d < 50*time.Second {
		t.Fatalf("key without TTL cached for %v, want MaxTTL", d)
	}

	plainSet(t, p, "SET", key, "v", "PX", "10000")
	settle(t, c)
	fillEntry(t, c, key)
	if d := ttlOf(); d > 10*time.Second {
		t.Fatalf("key with PTTL 10s cached for %v", d)
	}

	plainSet(t, p, "PEXPIRE", key, "300")
	settle(t, c)
	pttl, err := p.Do(ctx, p.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	fillEntry(t, c, key)
	if d := ttlOf(); d > time.Duration(pttl)*time.Millisecond {
		t.Fatalf("after PEXPIRE: cached for %v, Redis has %dms left", d, pttl)
	}
	time.Sleep(400 * time.Millisecond)
	if _, err := c.Get(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after the key expired: %v", err)
	}
}

func TestOutsidePrefixesPassThrough(t *testing.T) {
	c := newCache(t, nil)
	p := plainClient(t)
	key := "elsewhere:" + t.Name()
	plainSet(t, p, "SET", key, "v")
	for range 2 {
		if got := mustGet(t, c, key); got != "v" {
			t.Fatalf("pass-through Get: %q", got)
		}
	}
	if s := c.Stats(); s.PassThrough != 2 || s.Hits+s.Misses != 0 {
		t.Fatalf("pass-through counted as %+v", s)
	}
	if ok, _ := c.Map().Contains([]byte(key)); ok {
		t.Fatal("key outside the prefixes was cached")
	}
	if err := c.Set(ctx, key, []byte("w"), 0); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, c, key); got != "w" {
		t.Fatalf("pass-through after Set: %q", got)
	}
}

func TestGetIntoHitAllocatesNothing(t *testing.T) {
	c := newCache(t, nil)
	p := plainClient(t)
	key := prefixFor(t) + "k"
	plainSet(t, p, "SET", key, strings.Repeat("v", 64))
	settle(t, c)
	fillEntry(t, c, key)
	buf := make([]byte, 0, 128)
	hits := c.Stats().Hits
	if raceEnabled {
		t.Skip("allocation counts do not hold under the race detector (sync.Pool drops items)")
	}
	allocs := testing.AllocsPerRun(200, func() {
		b, err := c.GetInto(ctx, buf[:0], key)
		if err != nil || len(b) != 64 {
			t.Fatalf("GetInto: %d bytes, %v", len(b), err)
		}
	})
	if allocs != 0 {
		t.Fatalf("GetInto hit: %v allocations", allocs)
	}
	if c.Stats().Hits < hits+200 {
		t.Fatalf("GetInto did not hit: %+v", c.Stats())
	}
}

func TestTyped(t *testing.T) {
	c := newCache(t, nil)
	type user struct{ Name string }
	users := NewTyped(c, typed.String(), typed.JSON[user]())
	key := prefixFor(t) + "u1"
	if _, err := users.Get(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of an absent key: %v", err)
	}
	if err := users.Set(ctx, key, user{"ada"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if u, err := users.Get(ctx, key); err != nil || u.Name != "ada" {
			t.Fatalf("Get: %+v, %v", u, err)
		}
	}
	p := plainClient(t)
	plainSet(t, p, "SET", key, "not json")
	time.Sleep(DefaultMaxStaleness)
	if _, err := users.Get(ctx, key); !errors.Is(err, typed.ErrDecode) {
		t.Fatalf("Get of bytes that do not decode: %v", err)
	}
	if err := users.Del(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := users.Get(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Del: %v", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.map")
	m, err := hashmap.Open(plain, &hashmap.Options{Entries: 1024})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	for _, tc := range []struct {
		name string
		mod  func(*Options)
		want string
	}{
		{"not a cache", func(o *Options) { o.Path = plain }, "not a cache"},
		{"no path", func(o *Options) { o.Path = "" }, "Path"},
		{"no prefixes", func(o *Options) { o.Prefixes = nil }, "Prefixes"},
		{"empty prefix", func(o *Options) { o.Prefixes = []string{""} }, "prefix"},
		{"overlapping prefixes", func(o *Options) { o.Prefixes = []string{"a:", "a:b"} }, "overlap"},
		{"slow pings", func(o *Options) { o.PingInterval = 200 * time.Millisecond }, "PingInterval"},
		{"no address", func(o *Options) { o.ClientOption = rueidis.ClientOption{}; o.Client = plainClient(t) }, "InitAddress"},
	} {
		o := testOptions(t, filepath.Join(dir, "c.map"))
		tc.mod(&o)
		c, err := Open(ctx, o)
		if err == nil {
			c.Close()
			t.Errorf("%s: Open succeeded", tc.name)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
}

// Goroutines sharing a Cache each read back their own writes, while the
// others fill, hit and invalidate keys of the same map (run with -race).
func TestConcurrentUse(t *testing.T) {
	c := newCache(t, func(o *Options) { o.NegativeTTL = time.Second })
	pre := prefixFor(t)
	deadline := time.Now().Add(300 * time.Millisecond)
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			own := fmt.Sprintf("%sown%d", pre, g)
			var err error
			for i := 0; err == nil && time.Now().Before(deadline); i++ {
				want := fmt.Sprint(i)
				if err = c.Set(ctx, own, []byte(want), time.Minute); err != nil {
					break
				}
				var got []byte
				if got, err = c.Get(ctx, own); err == nil && string(got) != want {
					err = fmt.Errorf("%s: read %q after writing %q", own, got, want)
				}
				shared := fmt.Sprintf("%sshared%d", pre, i%5)
				if _, err = c.Get(ctx, shared); errors.Is(err, ErrNotFound) {
					err = nil
				}
				if err == nil && i%7 == 0 {
					err = c.Set(ctx, shared, []byte(want), 0)
				}
				if err == nil && i%11 == 0 {
					_, err = c.MGet(ctx, own, shared)
				}
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s := c.Stats(); s.Hits == 0 || s.Fills == 0 {
		t.Fatalf("no hits or no fills: %+v", s)
	}
}
