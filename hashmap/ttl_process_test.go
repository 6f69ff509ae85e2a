//go:build linux

package hashmap

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// touchRaceStart is the clock of TestTouchRacingExpiryAcrossProcesses at
// its start.
var touchRaceStart = time.Unix(1_700_000_000, 0)

// touchRaceKey and touchRaceExpiry are key i of that test and the time its
// entry expires unless touched.
func touchRaceKey(i int) []byte { return fmt.Appendf(nil, "race-%03d", i) }
func touchRaceExpiry(i int) time.Time {
	return touchRaceStart.Add(time.Duration(i+1) * 10 * time.Millisecond)
}

func init() {
	// first key, stride, keys: report GetTTL of "probe", then Touch each
	// of the keys as the clock comes to its turn, reporting the outcome
	// and the clock read before and after.
	opsRoles["ops-touch-race"] = func(m *Map, args []string) error {
		clock := fileClock(os.Getenv("HASHMAP_CLOCK"))
		ttl, found, err := m.GetTTL([]byte("probe"))
		if err != nil {
			return err
		}
		testutil.Report("probe %d %v", ttl, found)
		for i := argInt(args, 0); i < argInt(args, 2); i += argInt(args, 1) {
			// At its expiry (expired for sure), or up to 4 ms of the clock
			// before: readings a millisecond or so apart (slowClock) then
			// come before it, or on both sides, where Touch races it.
			at := touchRaceExpiry(i).Add(-time.Duration(i%5) * time.Millisecond)
			for deadline := time.Now().Add(30 * time.Second); clock.Now().Before(at); {
				if time.Now().After(deadline) {
					return fmt.Errorf("the clock never reached key %d's turn", i)
				}
			}
			c0 := clock.Now()
			ok, err := m.Touch(touchRaceKey(i), time.Hour)
			c1 := clock.Now()
			if err != nil {
				return err
			}
			testutil.Report("touch %d %v %d %d", i, ok, c0.UnixNano(), c1.UnixNano())
		}
		return nil
	}
}

// TestTouchRacingExpiryAcrossProcesses: two processes Touch keys of a
// cache map that a third, the test, created, as the clock they all read
// from one file passes each key's expiry: a key is touched as the clock
// reaches its expiry (expired: false), or up to 4 ms of the clock before,
// and the helpers' clock readings are slow, so that the test's steps of
// the clock fall between the readings of one Touch. Whatever the
// race, a Touch whose process read the clock before the expiry on both
// sides of the call reported true, one that read it at or past the expiry
// on both sides false, and afterwards, in the test's process, exactly the
// keys touched true are there, each with the time left that the touch set
// by the shared clock (GetTTL); an expired key never came back. The
// helpers' GetTTL of a key the test put sees the test's TTL. A Touch made
// of a Get and a PutWithTTL would bring back keys that expired between
// the two.
func TestTouchRacingExpiryAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	path, clock := filepath.Join(dir, "m"), fileClock(filepath.Join(dir, "clock"))
	clock.Set(touchRaceStart)
	m := mustOpen(t, path, &Options{Entries: 1000, Cache: true, Segments: 4, Now: clock.Now})
	defer m.Close()
	const keys = 80
	for i := range keys {
		if err := m.PutWithTTL(touchRaceKey(i), []byte("v"), touchRaceExpiry(i).Sub(touchRaceStart)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.PutWithTTL([]byte("probe"), []byte("p"), 77*time.Second); err != nil {
		t.Fatal(err)
	}
	var helpers []*helperProc
	for h := range 2 {
		cmd := helperCmd("ops-touch-race", path, strconv.Itoa(h), "2", strconv.Itoa(keys))
		cmd.Env = append(cmd.Env, "HASHMAP_CLOCK="+string(clock), "HASHMAP_CLOCK_SLOW=1")
		helpers = append(helpers, startHelper(t, cmd))
	}
	for _, h := range helpers {
		if l := h.expect(t, "probe", 10*time.Second); l[1] != strconv.FormatInt(int64(77*time.Second), 10) || l[2] != "true" {
			t.Fatalf("a helper's GetTTL of the probe: %v, want %d true", l, 77*time.Second)
		}
	}
	end := touchRaceExpiry(keys + 1)
	for now := touchRaceStart; now.Before(end); now = now.Add(time.Millisecond) {
		clock.Set(now)
		time.Sleep(500 * time.Microsecond)
	}
	clock.Set(end)
	type touch struct {
		ok     bool
		c0, c1 time.Time
	}
	touches := map[int]touch{}
	for _, h := range helpers {
		lines, err := h.rest()
		if err != nil {
			t.Fatalf("helper: %v", err)
		}
		for _, l := range lines {
			switch l[0] {
			case "error":
				t.Fatalf("helper: %v", l)
			case "touch":
				i, _ := strconv.Atoi(l[1])
				c0, _ := strconv.ParseInt(l[3], 10, 64)
				c1, _ := strconv.ParseInt(l[4], 10, 64)
				touches[i] = touch{l[2] == "true", time.Unix(0, c0), time.Unix(0, c1)}
			}
		}
	}
	if len(touches) != keys {
		t.Fatalf("%d touches reported, want %d", len(touches), keys)
	}
	now := clock.Now()
	var trues, falses, raced int
	for i := range keys {
		tc, exp := touches[i], touchRaceExpiry(i)
		switch {
		case tc.c1.Before(exp) && !tc.ok:
			t.Errorf("key %d: Touch false with the clock before its expiry throughout", i)
		case !tc.c0.Before(exp) && tc.ok:
			t.Errorf("key %d: Touch true with the clock past its expiry throughout: an expired entry came back", i)
		case tc.c0.Before(exp) && !tc.c1.Before(exp):
			raced++
		}
		ttl, found, err := m.GetTTL(touchRaceKey(i))
		if err != nil {
			t.Fatal(err)
		}
		_, getErr := m.Get(touchRaceKey(i))
		if found != tc.ok || (getErr == nil) != tc.ok {
			t.Errorf("key %d: touched %v, found now %v (Get: %v)", i, tc.ok, found, getErr)
			continue
		}
		if !tc.ok {
			falses++
			continue
		}
		trues++
		if lo, hi := tc.c0.Add(time.Hour).Sub(now), tc.c1.Add(time.Hour).Sub(now); ttl < lo || ttl > hi {
			t.Errorf("key %d: GetTTL %v, want within [%v, %v]", i, ttl, lo, hi)
		}
	}
	if trues == 0 || falses == 0 || raced == 0 {
		t.Errorf("%d touches true, %d false, %d raced: the test lost its point", trues, falses, raced)
	}
	t.Logf("%d touches true, %d false, %d with the clock passing the expiry during the call", trues, falses, raced)
}
