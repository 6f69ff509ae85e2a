//go:build linux

package rediscache

import (
	"bufio"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sharedmap/sharedmap/rediscache/internal/redistest"
)

// A tracker that dies without resigning is replaced at a standby's next
// check: the dead pid vacates the place.
func TestTakeoverFromDeadTracker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.map")
	cmd := helperCommand("tracker", "MAP_PATH="+path, "PREFIX="+prefixFor(t))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "@ tracking") {
	}
	c := openCache(t, testOptions(t, path))
	waitFresh(t, c)
	if s := c.Stats(); s.Tracking || s.TrackerPID != cmd.Process.Pid {
		t.Fatalf("with the helper tracking: %+v", s)
	}
	epoch := c.Stats().Epoch
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	if !waitFor(2*time.Second, func() bool { return c.Stats().Tracking }) {
		t.Fatalf("no takeover within 2s of the tracker's death: %+v", c.Stats())
	}
	if took := time.Since(killed); took > 5*DefaultPingInterval {
		t.Errorf("takeover took %v, want within a few PingIntervals", took)
	}
	if s := c.Stats(); s.Epoch <= epoch {
		t.Fatalf("takeover kept the epoch: %d -> %d", epoch, s.Epoch)
	}
	waitFresh(t, c)
}

// A tracker whose term was taken over (as when it was stopped long enough)
// notices at its next publish and stops tracking; its standby takes the
// place back once the usurper's watermark goes stale.
func TestDeposedTrackerStops(t *testing.T) {
	c := newCache(t, nil)
	if !c.Stats().Tracking {
		t.Fatal("not tracking")
	}
	usurper := uint64(1) // init: alive, and never this process
	if _, _, err := c.updateControl(func(ct *control) bool {
		ct.epoch++
		ct.pid, ct.term, ct.watermark = usurper, monoNow(), 0
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(time.Second, func() bool { return !c.Stats().Tracking }) {
		t.Fatal("deposed tracker still tracking after a second")
	}
	if !waitFor(2*time.Second, func() bool { s := c.Stats(); return s.Tracking && s.TrackerPID != int(usurper) }) {
		t.Fatalf("no takeover from a tracker that publishes nothing: %+v", c.Stats())
	}
	waitFresh(t, c)
}

// A Redis restart loses the connection and every key: the tracker
// reconnects, bumps the epoch, and hits resume with Redis's new contents.
func TestRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	c := newCache(t, func(o *Options) { o.ClientOption.InitAddress = []string{srv.Addr()} })
	key := prefixFor(t) + "k"
	if err := c.Set(ctx, key, []byte("before"), 0); err != nil {
		t.Fatal(err)
	}
	mustGet(t, c, key)
	epoch := c.Stats().Epoch
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(3*time.Second, func() bool { return c.Stats().Epoch > epoch }) {
		t.Fatalf("no epoch bump after a Redis restart: %+v", c.Stats())
	}
	waitFresh(t, c)
	if !waitFor(3*time.Second, func() bool {
		_, err := c.Get(ctx, key)
		return errors.Is(err, ErrNotFound)
	}) {
		t.Fatal("the key Redis lost at restart is still served")
	}
	// The client's connection may have died with the server: a write
	// may fail once (rueidis retries only reads).
	var err error
	if !waitFor(3*time.Second, func() bool { err = c.Set(ctx, key, []byte("after"), 0); return err == nil }) {
		t.Fatal(err)
	}
	if got := mustGet(t, c, key); got != "after" {
		t.Fatalf("after restart: %q", got)
	}
}

// The tracker authenticates with the client's credentials (HELLO 3 AUTH).
func TestTrackerAuth(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "secret")
	c := newCache(t, func(o *Options) {
		o.ClientOption = rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Password: "secret"}
	})
	if !c.Stats().Tracking {
		t.Fatal("not tracking")
	}
	p, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Password: "secret", DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	key := prefixFor(t) + "k"
	plainSet(t, p, "SET", key, "old")
	settle(t, c)
	fillEntry(t, c, key)
	plainSet(t, p, "SET", key, "new")
	time.Sleep(DefaultMaxStaleness)
	if got := mustGet(t, c, key); got != "new" {
		t.Fatalf("Get %q MaxStaleness after an outside write", got)
	}
	if c.Stats().InvalidationsApplied == 0 {
		t.Fatalf("no invalidation applied: %+v", c.Stats())
	}
}
