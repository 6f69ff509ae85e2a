//go:build linux

package rediscache

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sharedmap/sharedmap/hashmap"
	"github.com/sharedmap/sharedmap/rediscache/internal/redistest"
)

// redisAddr is the address of the server TestMain starts (in a helper
// process: the parent's, from the environment), and redisServer that server
// (nil in a helper process). Tests that restart or kill Redis start a
// server of their own (redistest.Start), so as not to disturb the others.
var (
	redisAddr   string
	redisServer *redistest.Server
)

const (
	helperRoleEnv = "REDISCACHE_TEST_HELPER_ROLE"
	helperAddrEnv = "REDISCACHE_TEST_REDIS"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperRoleEnv) != "" {
		redisAddr = os.Getenv(helperAddrEnv)
		os.Exit(m.Run())
	}
	srv, err := redistest.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr, redisServer = srv.Addr(), srv
	code := m.Run()
	_ = srv.Close()
	os.Exit(code)
}

// plainClient is a rueidis client outside the package, for writes the cache
// learns of only through invalidations.
func plainClient(t testing.TB) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// prefixFor gives each test keys of its own, so that one test's writes do
// not invalidate another's entries.
func prefixFor(t testing.TB) string {
	return "rc:" + strings.ReplaceAll(t.Name(), "/", ".") + ":"
}

// testOptions are a small map at path and the test's prefix.
func testOptions(t testing.TB, path string) Options {
	return Options{
		Path:         path,
		Map:          &hashmap.Options{Entries: 4096, AverageKeySize: 32, AverageValueSize: 64},
		ClientOption: rueidis.ClientOption{InitAddress: []string{redisAddr}},
		Prefixes:     []string{prefixFor(t)},
	}
}

// openCache opens a cache with o and closes it when the test ends.
func openCache(t testing.TB, o Options) *Cache {
	t.Helper()
	c, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newCache opens a tracking cache on a new map and waits until it serves
// hits.
func newCache(t testing.TB, mod func(*Options)) *Cache {
	t.Helper()
	o := testOptions(t, filepath.Join(t.TempDir(), "cache.map"))
	if mod != nil {
		mod(&o)
	}
	c := openCache(t, o)
	waitFresh(t, c)
	return c
}

// waitFresh waits until the host's tracker has published a watermark
// within MaxStaleness.
func waitFresh(t testing.TB, c *Cache) {
	t.Helper()
	if !waitFor(5*time.Second, func() bool {
		ct, _ := c.readControl()
		return c.fresh(ct, monoNow())
	}) {
		t.Fatalf("no fresh watermark within 5s: %+v", c.Stats())
	}
}

// settle waits until the tracker has applied the invalidations of every
// write completed before the call: its watermark passes the call's start.
func settle(t testing.TB, c *Cache) {
	t.Helper()
	start := monoNow()
	if !waitFor(5*time.Second, func() bool {
		ct, _ := c.readControl()
		return ct.watermark > start
	}) {
		t.Fatalf("watermark not past the writes within 5s: %+v", c.Stats())
	}
}

// fillEntry reads key until the map holds its entry (a read may go to Redis
// instead while the process is starved of CPU for MaxStaleness).
func fillEntry(t testing.TB, c *Cache, key string) {
	t.Helper()
	if !waitFor(5*time.Second, func() bool {
		mustGet(t, c, key)
		ok, err := c.Map().Contains([]byte(key))
		return ok && err == nil
	}) {
		t.Fatalf("%s not cached within 5s: %+v", key, c.Stats())
	}
}

func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func mustGet(t testing.TB, c *Cache, key string) string {
	t.Helper()
	v, err := c.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get %q: %v", key, err)
	}
	return string(v)
}

// awaitHit waits until a Get of key is served from the map with want. A Get
// passes through to Redis while the watermark is stale, and a fill is lost
// to an epoch bump or an invalidation that lands after it, so on a loaded
// machine the first tries may miss.
func awaitHit(t testing.TB, c *Cache, key, want string) {
	t.Helper()
	var got string
	served := func() bool {
		h := c.Stats().Hits
		got = mustGet(t, c, key)
		return got == want && c.Stats().Hits > h
	}
	if !waitFor(5*time.Second, served) {
		t.Fatalf("%s not served from the map within 5s: last %q, %+v", key, got, c.Stats())
	}
}

func plainSet(t testing.TB, p rueidis.Client, args ...string) {
	t.Helper()
	if err := p.Do(context.Background(), p.B().Arbitrary(args[0]).Args(args[1:]...).Build()).Error(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

// helperCommand re-executes the test binary as a helper process in role,
// with the Redis address and extra environment entries.
func helperCommand(role string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperRoleEnv+"="+role, helperAddrEnv+"="+redisAddr)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	return cmd
}

// helperRoles are what a helper process can do, by role name. A test file
// adds its own roles from an init function; the helper runs its role inside
// TestHelperProcess, with redisAddr set, and reports on stdout in lines
// starting with "@ ".
var helperRoles = map[string]func(t *testing.T){
	"tracker": trackerRole,
	"reader":  readerRole,
}

// TestHelperProcess is the helper processes' entry point; in the parent it
// does nothing.
func TestHelperProcess(t *testing.T) {
	role := os.Getenv(helperRoleEnv)
	if role == "" {
		t.Skip("only runs as a helper process")
	}
	run, ok := helperRoles[role]
	if !ok {
		t.Fatalf("unknown role %q", role)
	}
	run(t)
}

// trackerRole opens the cache at MAP_PATH for PREFIX, reports "@ tracking"
// once it is the host's tracker, and waits to be killed.
func trackerRole(t *testing.T) {
	o := testOptions(t, os.Getenv("MAP_PATH"))
	o.Prefixes = []string{os.Getenv("PREFIX")}
	c := openCache(t, o)
	if !waitFor(5*time.Second, func() bool { return c.Stats().Tracking }) {
		t.Fatal("did not become the tracker")
	}
	fmt.Println("@ tracking")
	time.Sleep(time.Minute)
}

// readerRole opens the cache at MAP_PATH for PREFIX without a tracker and
// answers each key read on stdin with "@ value" (or "@ -" when absent).
func readerRole(t *testing.T) {
	o := testOptions(t, os.Getenv("MAP_PATH"))
	o.Prefixes = []string{os.Getenv("PREFIX")}
	o.NoTracker = true
	c := openCache(t, o)
	fmt.Println("@ ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		v, err := c.Get(context.Background(), sc.Text())
		switch {
		case errors.Is(err, ErrNotFound):
			fmt.Println("@ -")
		case err != nil:
			t.Fatal(err)
		default:
			fmt.Println("@ " + string(v))
		}
	}
}
