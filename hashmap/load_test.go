//go:build linux

package hashmap

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/formatdoc"
	"github.com/sharedmap/sharedmap/internal/testutil"
)

// heldLoad is a load that counts its calls, says when one starts, and
// returns what the test sends it.
type heldLoad struct {
	calls   atomic.Int32
	started chan struct{} // a call started (buffered)
	answer  chan loadAnswer
}

type loadAnswer struct {
	value []byte
	err   error
	panic any
}

func newHeldLoad() *heldLoad {
	return &heldLoad{started: make(chan struct{}, 64), answer: make(chan loadAnswer)}
}

func (l *heldLoad) load(ctx context.Context) ([]byte, error) {
	l.calls.Add(1)
	l.started <- struct{}{}
	select {
	case a := <-l.answer:
		if a.panic != nil {
			panic(a.panic)
		}
		return a.value, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// waitStarted waits for a call of l to start.
func (l *heldLoad) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-l.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the load did not start")
	}
}

// never is a load that must not run.
func never(t *testing.T) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) {
		t.Error("a load ran that should have waited for another")
		return []byte("never"), nil
	}
}

// result is one GetOrLoad's answer.
type result struct {
	value []byte
	err   error
	took  time.Duration
}

// goGetOrLoad runs GetOrLoad in a goroutine and returns where its answer
// will come.
func goGetOrLoad(m *Map, ctx context.Context, key string, load func(context.Context) ([]byte, error)) <-chan result {
	out := make(chan result, 1)
	go func() {
		start := time.Now()
		v, err := m.GetOrLoad(ctx, []byte(key), load)
		out <- result{v, err, time.Since(start)}
	}()
	return out
}

// waitFollowers waits until n goroutines have joined m's call for key.
func waitFollowers(t *testing.T, m *Map, key string, n int) {
	t.Helper()
	joined := func() bool {
		m.fills.mu.Lock()
		defer m.fills.mu.Unlock()
		c := m.fills.calls[key]
		return c != nil && c.followers >= n
	}
	if !testutil.WaitFor(10*time.Second, joined) {
		t.Fatalf("%d goroutines did not join the call", n)
	}
}

// waitAwaiting waits until m polls for another process's load.
func waitAwaiting(t *testing.T, m *Map) {
	t.Helper()
	if !testutil.WaitFor(10*time.Second, func() bool { return m.fills.awaiting.Load() > 0 }) {
		t.Fatal("no GetOrLoad waits for the other handle's load")
	}
}

func receive(t *testing.T, c <-chan result) result {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("GetOrLoad did not return")
	}
	return result{}
}

// openLoadPair opens two handles on one new map, as two processes would
// (each takes its own registry slot): a cache map unless plain.
func openLoadPair(t *testing.T, plain bool, bOpts Options) (a, b *Map) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "load.map")
	a, err := Open(path, &Options{Entries: 1000, Cache: !plain})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if b, err = Open(path, &bOpts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b
}

func wantValue(t *testing.T, m *Map, key, want string) {
	t.Helper()
	if v, err := m.Get([]byte(key)); err != nil || string(v) != want {
		t.Fatalf("Get(%q) = %q, %v; want %q", key, v, err, want)
	}
}

func wantAbsent(t *testing.T, m *Map, key string) {
	t.Helper()
	if v, err := m.Get([]byte(key)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(%q) = %q, %v; want ErrNotFound", key, v, err)
	}
}

// A miss loads and stores, a hit does not load; an empty value comes back
// non-nil; bad calls are refused without a load.
func TestGetOrLoadHitAndMiss(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			m, _ := openLoadPair(t, plain, Options{})
			ctx := context.Background()
			calls := 0
			load := func(context.Context) ([]byte, error) { calls++; return []byte("v"), nil }
			for range 2 {
				if v, err := m.GetOrLoad(ctx, []byte("k"), load); err != nil || string(v) != "v" {
					t.Fatalf("GetOrLoad = %q, %v", v, err)
				}
			}
			if calls != 1 {
				t.Fatalf("load ran %d times, want 1", calls)
			}
			wantValue(t, m, "k", "v")
			v, err := m.GetOrLoad(nil, []byte("empty"), func(context.Context) ([]byte, error) { return nil, nil }) //nolint:staticcheck // a nil context is taken for Background
			if err != nil || v == nil || len(v) != 0 {
				t.Fatalf("GetOrLoad of an empty value = %#v, %v", v, err)
			}
			wantValue(t, m, "empty", "")
			if _, err := m.GetOrLoad(ctx, []byte("k"), nil); !errors.Is(err, ErrBadOptions) {
				t.Fatalf("GetOrLoad with a nil load: %v", err)
			}
			if _, err := m.GetOrLoadWithTTL(ctx, []byte("k"), nil); !errors.Is(err, ErrBadOptions) {
				t.Fatalf("GetOrLoadWithTTL with a nil load: %v", err)
			}
			ttlLoad := func(context.Context) ([]byte, time.Duration, error) { return []byte("t"), time.Hour, nil }
			if _, err := m.GetOrLoadWithTTL(ctx, []byte("k"), ttlLoad); plain != errors.Is(err, ErrNotCache) {
				t.Fatalf("GetOrLoadWithTTL, plain %v: %v", plain, err)
			}
			ro, err := Open(m.Path(), &Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			if v, err := ro.GetOrLoad(ctx, []byte("k"), never(t)); err != nil || string(v) != "v" {
				t.Fatalf("read-only GetOrLoad of a present key = %q, %v", v, err)
			}
			if _, err := ro.GetOrLoad(ctx, []byte("missing"), never(t)); !errors.Is(err, ErrReadOnly) {
				t.Fatalf("read-only GetOrLoad of a missing key: %v", err)
			}
		})
	}
}

// GetOrLoadWithTTL stores the value for the TTL its load returns: 0 is
// DefaultTTL, NoExpiry never expires, a negative TTL is an error that
// stores nothing and leaves no token behind.
func TestGetOrLoadWithTTL(t *testing.T) {
	m, clock := openClockedCache(t, 1000, time.Minute)
	ctx := context.Background()
	for _, c := range []struct {
		key  string
		ttl  time.Duration
		gone time.Duration // the clock's advance that expires it (0: never)
	}{{"hour", time.Hour, time.Hour}, {"default", 0, time.Minute}, {"never", NoExpiry, 0}} {
		v, err := m.GetOrLoadWithTTL(ctx, []byte(c.key), func(context.Context) ([]byte, time.Duration, error) {
			return []byte(c.key), c.ttl, nil
		})
		if err != nil || string(v) != c.key {
			t.Fatalf("GetOrLoadWithTTL(%s) = %q, %v", c.key, v, err)
		}
	}
	clock.Advance(time.Minute)
	wantAbsent(t, m, "default")
	wantValue(t, m, "hour", "hour")
	clock.Advance(time.Hour)
	wantAbsent(t, m, "hour")
	wantValue(t, m, "never", "never")

	v, err := m.GetOrLoadWithTTL(ctx, []byte("bad"), func(context.Context) ([]byte, time.Duration, error) {
		return []byte("x"), -time.Second, nil
	})
	if !errors.Is(err, ErrBadOptions) || string(v) != "x" {
		t.Fatalf("a negative TTL: %q, %v; want the value and ErrBadOptions", v, err)
	}
	wantAbsent(t, m, "bad")
	if v, err := m.GetOrLoad(ctx, []byte("bad"), func(context.Context) ([]byte, error) { return []byte("y"), nil }); err != nil || string(v) != "y" {
		t.Fatalf("GetOrLoad after a refused TTL = %q, %v", v, err)
	}
}

// While a load is in flight, its token is no value to any reader: Get,
// Contains, GetMany, Range and another handle see the key absent, and
// Check finds nothing wrong. Only Len counts it, as it counts expired
// entries.
func TestGetOrLoadTokenIsInvisible(t *testing.T) {
	a, b := openLoadPair(t, false, Options{})
	l := newHeldLoad()
	done := goGetOrLoad(a, context.Background(), "k", l.load)
	l.waitStarted(t)
	for _, m := range []*Map{a, b} {
		wantAbsent(t, m, "k")
		if ok, err := m.Contains([]byte("k")); ok || err != nil {
			t.Fatalf("Contains = %v, %v", ok, err)
		}
		values := make([][]byte, 1)
		if err := m.GetMany([][]byte{[]byte("k")}, values); err != nil || values[0] != nil {
			t.Fatalf("GetMany = %q, %v", values[0], err)
		}
		var err error
		for k, v := range m.Range(&err) {
			t.Fatalf("Range yielded %q = %q", k, v)
		}
		if err != nil {
			t.Fatal(err)
		}
		if problems, err := m.Check(); len(problems) > 0 || err != nil {
			t.Fatalf("Check: %v, %v", problems, err)
		}
	}
	if n := a.Len(); n != 1 {
		t.Fatalf("Len with a load in flight = %d, want 1 (the token)", n)
	}
	l.answer <- loadAnswer{value: []byte("v")}
	if r := receive(t, done); r.err != nil || string(r.value) != "v" {
		t.Fatalf("GetOrLoad = %q, %v", r.value, r.err)
	}
	wantValue(t, b, "k", "v")
	if n := a.Len(); n != 1 {
		t.Fatalf("Len = %d, want 1", n)
	}
}

// Goroutines of one process asking for one missing key share one load, in
// a plain map as in a cache.
func TestGetOrLoadCoalescesGoroutines(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			m, _ := openLoadPair(t, plain, Options{})
			l := newHeldLoad()
			var outs []<-chan result
			outs = append(outs, goGetOrLoad(m, context.Background(), "k", l.load))
			l.waitStarted(t)
			for range 7 {
				outs = append(outs, goGetOrLoad(m, context.Background(), "k", l.load))
			}
			waitFollowers(t, m, "k", 7)
			l.answer <- loadAnswer{value: []byte("v")}
			for _, o := range outs {
				if r := receive(t, o); r.err != nil || string(r.value) != "v" {
					t.Fatalf("GetOrLoad = %q, %v", r.value, r.err)
				}
			}
			if n := l.calls.Load(); n != 1 {
				t.Fatalf("load ran %d times, want 1", n)
			}
		})
	}
}

// A second handle (a process of its own) waits for the first one's load
// instead of loading, and gets its value; in a plain map it cannot, and
// loads too, but the first value stored stays.
func TestGetOrLoadAcrossHandles(t *testing.T) {
	a, b := openLoadPair(t, false, Options{})
	l := newHeldLoad()
	first := goGetOrLoad(a, context.Background(), "k", l.load)
	l.waitStarted(t)
	second := goGetOrLoad(b, context.Background(), "k", never(t))
	waitAwaiting(t, b)
	l.answer <- loadAnswer{value: []byte("va")}
	for _, c := range []<-chan result{first, second} {
		if r := receive(t, c); r.err != nil || string(r.value) != "va" {
			t.Fatalf("GetOrLoad = %q, %v", r.value, r.err)
		}
	}

	a, b = openLoadPair(t, true, Options{})
	l = newHeldLoad()
	first = goGetOrLoad(a, context.Background(), "k", l.load)
	l.waitStarted(t)
	if v, err := b.GetOrLoad(context.Background(), []byte("k"), func(context.Context) ([]byte, error) { return []byte("vb"), nil }); err != nil || string(v) != "vb" {
		t.Fatalf("plain map, second handle: %q, %v", v, err)
	}
	l.answer <- loadAnswer{value: []byte("va")}
	if r := receive(t, first); r.err != nil || string(r.value) != "va" {
		t.Fatalf("plain map, first handle: %q, %v", r.value, r.err)
	}
	wantValue(t, a, "k", "vb") // stored first; the later load did not overwrite it
}

// A Put during a load keeps its later value: the load's caller gets the
// loaded value, the waiters and every later Get the Put's. A Delete during
// a load leaves the loaded value unstored, and a waiter loads anew.
func TestGetOrLoadWriteDuringLoad(t *testing.T) {
	t.Run("put", func(t *testing.T) {
		a, b := openLoadPair(t, false, Options{})
		l := newHeldLoad()
		loader := goGetOrLoad(a, context.Background(), "k", l.load)
		l.waitStarted(t)
		waiter := goGetOrLoad(b, context.Background(), "k", never(t))
		waitAwaiting(t, b)
		if err := b.Put([]byte("k"), []byte("later")); err != nil {
			t.Fatal(err)
		}
		if r := receive(t, waiter); r.err != nil || string(r.value) != "later" {
			t.Fatalf("waiter: %q, %v", r.value, r.err)
		}
		l.answer <- loadAnswer{value: []byte("loaded")}
		if r := receive(t, loader); r.err != nil || string(r.value) != "loaded" {
			t.Fatalf("loader: %q, %v", r.value, r.err)
		}
		wantValue(t, a, "k", "later")
	})
	t.Run("delete", func(t *testing.T) {
		a, b := openLoadPair(t, false, Options{})
		l := newHeldLoad()
		loader := goGetOrLoad(a, context.Background(), "k", l.load)
		l.waitStarted(t)
		var fresh atomic.Int32
		waiter := goGetOrLoad(b, context.Background(), "k", func(context.Context) ([]byte, error) {
			fresh.Add(1)
			return []byte("fresh"), nil
		})
		waitAwaiting(t, b)
		if fresh.Load() != 0 {
			t.Fatal("the waiter loaded before the Delete")
		}
		if _, err := a.Delete([]byte("k")); err != nil {
			t.Fatal(err)
		}
		if r := receive(t, waiter); r.err != nil || string(r.value) != "fresh" {
			t.Fatalf("waiter: %q, %v", r.value, r.err)
		}
		l.answer <- loadAnswer{value: []byte("loaded")}
		if r := receive(t, loader); r.err != nil || string(r.value) != "loaded" {
			t.Fatalf("loader: %q, %v", r.value, r.err)
		}
		wantValue(t, a, "k", "fresh")
		if _, err := a.Delete([]byte("k")); err != nil {
			t.Fatal(err)
		}

		// No waiter: the Delete leaves the key absent.
		l = newHeldLoad()
		loader = goGetOrLoad(a, context.Background(), "k", l.load)
		l.waitStarted(t)
		if _, err := b.Delete([]byte("k")); err != nil {
			t.Fatal(err)
		}
		l.answer <- loadAnswer{value: []byte("loaded")}
		if r := receive(t, loader); r.err != nil || string(r.value) != "loaded" {
			t.Fatalf("loader: %q, %v", r.value, r.err)
		}
		wantAbsent(t, a, "k")
	})
}

// A failed load stores nothing; its caller and the goroutines that waited
// on it in its process get its error, another process's waiter an
// ErrLoadFailed with its text; the next call loads again.
func TestGetOrLoadFailingLoad(t *testing.T) {
	a, b := openLoadPair(t, false, Options{})
	errBackend := errors.New("backend down")
	l := newHeldLoad()
	loader := goGetOrLoad(a, context.Background(), "k", l.load)
	l.waitStarted(t)
	follower := goGetOrLoad(a, context.Background(), "k", never(t))
	waiter := goGetOrLoad(b, context.Background(), "k", never(t))
	waitFollowers(t, a, "k", 1)
	waitAwaiting(t, b)
	l.answer <- loadAnswer{err: errBackend}
	for _, c := range []<-chan result{loader, follower} {
		if r := receive(t, c); !errors.Is(r.err, errBackend) || r.value != nil {
			t.Fatalf("in the loading process: %q, %v", r.value, r.err)
		}
	}
	if r := receive(t, waiter); !errors.Is(r.err, ErrLoadFailed) || !strings.Contains(r.err.Error(), "backend down") {
		t.Fatalf("in another process: %v", r.err)
	}
	wantAbsent(t, a, "k")
	if v, err := b.GetOrLoad(context.Background(), []byte("k"), func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil || string(v) != "v" {
		t.Fatalf("GetOrLoad after a failed load = %q, %v", v, err)
	}
}

// A load that panics releases its token: the panic reaches the goroutine
// that ran it, the waiters (in its process and in another) get
// ErrLoadFailed at once rather than after LoadTimeout, and the next call
// loads.
func TestGetOrLoadPanickingLoad(t *testing.T) {
	a, b := openLoadPair(t, false, Options{LoadTimeout: time.Hour})
	l := newHeldLoad()
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_, _ = a.GetOrLoad(context.Background(), []byte("k"), l.load)
	}()
	l.waitStarted(t)
	follower := goGetOrLoad(a, context.Background(), "k", never(t))
	waiter := goGetOrLoad(b, context.Background(), "k", never(t))
	waitFollowers(t, a, "k", 1)
	waitAwaiting(t, b)
	l.answer <- loadAnswer{panic: "boom"}
	select {
	case r := <-panicked:
		if r != "boom" {
			t.Fatalf("recovered %v, want the load's panic", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the panic did not propagate")
	}
	for _, c := range []<-chan result{follower, waiter} {
		if r := receive(t, c); !errors.Is(r.err, ErrLoadFailed) || !strings.Contains(r.err.Error(), "panicked: boom") {
			t.Fatalf("waiter: %q, %v", r.value, r.err)
		}
	}
	if v, err := b.GetOrLoad(context.Background(), []byte("k"), func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil || string(v) != "v" {
		t.Fatalf("GetOrLoad after a panicked load = %q, %v", v, err)
	}
}

// A load that outlives LoadTimeout is taken over: a waiter of another
// process, or of its own, loads after LoadTimeout and its value is
// stored; the slow load's caller still gets its own value, which is not
// stored.
func TestGetOrLoadSlowLoadIsTakenOver(t *testing.T) {
	const timeout = 200 * time.Millisecond
	t.Run("another-process", func(t *testing.T) {
		a, b := openLoadPair(t, false, Options{LoadTimeout: timeout})
		l := newHeldLoad()
		slow := goGetOrLoad(a, context.Background(), "k", l.load)
		l.waitStarted(t)
		r := receive(t, goGetOrLoad(b, context.Background(), "k", func(context.Context) ([]byte, error) { return []byte("second"), nil }))
		if r.err != nil || string(r.value) != "second" {
			t.Fatalf("waiter: %q, %v", r.value, r.err)
		}
		if r.took < timeout || r.took > timeout+time.Second {
			t.Fatalf("the waiter took over after %v, want about LoadTimeout (%v)", r.took, timeout)
		}
		t.Logf("taken over after %v (LoadTimeout %v)", r.took, timeout)
		l.answer <- loadAnswer{value: []byte("first")}
		if r := receive(t, slow); r.err != nil || string(r.value) != "first" {
			t.Fatalf("slow loader: %q, %v", r.value, r.err)
		}
		wantValue(t, a, "k", "second")
	})
	t.Run("same-process", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "load.map")
		m, err := Open(path, &Options{Entries: 1000, Cache: true, LoadTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		l := newHeldLoad()
		slow := goGetOrLoad(m, context.Background(), "k", l.load)
		l.waitStarted(t)
		r := receive(t, goGetOrLoad(m, context.Background(), "k", func(context.Context) ([]byte, error) { return []byte("second"), nil }))
		if r.err != nil || string(r.value) != "second" || r.took < timeout || r.took > timeout+time.Second {
			t.Fatalf("follower: %q, %v after %v", r.value, r.err, r.took)
		}
		l.answer <- loadAnswer{value: []byte("first")}
		if r := receive(t, slow); r.err != nil || string(r.value) != "first" {
			t.Fatalf("slow loader: %q, %v", r.value, r.err)
		}
		wantValue(t, m, "k", "second")
	})
}

// A loader whose map is closed mid-load is gone to the others: a waiter
// takes over within a few polls, and the closed loader's answer is its
// value with ErrClosed.
func TestGetOrLoadClosedLoaderIsTakenOver(t *testing.T) {
	a, b := openLoadPair(t, false, Options{LoadTimeout: time.Hour})
	l := newHeldLoad()
	loader := goGetOrLoad(a, context.Background(), "k", l.load)
	l.waitStarted(t)
	var at atomic.Int64
	waiter := goGetOrLoad(b, context.Background(), "k", func(context.Context) ([]byte, error) {
		at.Store(time.Now().UnixNano())
		return []byte("vb"), nil
	})
	waitAwaiting(t, b)
	closed := time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if r := receive(t, waiter); r.err != nil || string(r.value) != "vb" {
		t.Fatalf("waiter: %q, %v", r.value, r.err)
	}
	took := time.Duration(at.Load() - closed.UnixNano())
	if took > time.Second {
		t.Fatalf("takeover %v after Close", took)
	}
	t.Logf("takeover %v after the loader's Close", took)
	l.answer <- loadAnswer{value: []byte("va")}
	if r := receive(t, loader); !errors.Is(r.err, ErrClosed) || string(r.value) != "va" {
		t.Fatalf("closed loader: %q, %v", r.value, r.err)
	}
	wantValue(t, b, "k", "vb")
}

// A caller's context bounds its wait; a leader that gives up for its
// context hands the load to the goroutines that waited on it.
func TestGetOrLoadContext(t *testing.T) {
	a, b := openLoadPair(t, false, Options{})
	l := newHeldLoad()
	loader := goGetOrLoad(a, context.Background(), "k", l.load)
	l.waitStarted(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if r := receive(t, goGetOrLoad(b, ctx, "k", never(t))); !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("a waiter past its deadline: %v", r.err)
	}
	l.answer <- loadAnswer{value: []byte("v")}
	receive(t, loader)

	lctx, lcancel := context.WithCancel(context.Background())
	l = newHeldLoad()
	leader := goGetOrLoad(a, lctx, "k2", l.load)
	l.waitStarted(t)
	follower := goGetOrLoad(a, context.Background(), "k2", l.load)
	waitFollowers(t, a, "k2", 1)
	lcancel() // the leader's load returns its context's error
	if r := receive(t, leader); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("leader: %v", r.err)
	}
	l.waitStarted(t) // the follower loads
	l.answer <- loadAnswer{value: []byte("v2")}
	if r := receive(t, follower); r.err != nil || string(r.value) != "v2" {
		t.Fatalf("follower: %q, %v", r.value, r.err)
	}
	if n := l.calls.Load(); n != 2 {
		t.Fatalf("load ran %d times, want 2", n)
	}
}

// TestGetOrLoadTokenFormatDoc holds docs/FORMAT.md to the fill token's
// layout.
func TestGetOrLoadTokenFormatDoc(t *testing.T) {
	d, f := formatdoc.Load(t, ".."), formatdoc.F
	d.Expect(t, "3.12 Fill token", "The token value", []formatdoc.Row{
		f(tokenState, "4", fmt.Sprintf("state: %d loading, %d failed", tokenLoading, tokenFailed)),
		f(tokenSlot, "4", "the loader's registry slot"), f(tokenGeneration, "8", "that slot's generation"),
		f(tokenID, "8", "load id"), f(tokenHeaderSize, "n", fmt.Sprintf("state %d: the load's error text, at most %d bytes", tokenFailed, maxFailureText)),
	})
}

// Tokens decode only as written: damage, or a placeholder of another kind,
// is no load in flight.
func TestGetOrLoadTokenDecoding(t *testing.T) {
	tok := newToken(3, 7)
	if got, ok := decodeToken(tok.encode(), 4); !ok || got != tok {
		t.Fatalf("decode(encode) = %+v, %v", got, ok)
	}
	f := tok.failed(strings.Repeat("é", maxFailureText)) // cut inside a character
	got, ok := decodeToken(f.encode(), 4)
	if !ok || got.state != tokenFailed || len(got.failure) > maxFailureText || !strings.HasPrefix(strings.Repeat("é", maxFailureText), got.failure) {
		t.Fatalf("failed token = %+v, %v", got, ok)
	}
	for name, b := range map[string][]byte{
		"short":          tok.encode()[:tokenHeaderSize-1],
		"slot too large": newToken(4, 7).encode(),
		"id zero":        fillToken{state: tokenLoading, slot: 1}.encode(),
		"state":          fillToken{state: 9, slot: 1, id: 1}.encode(),
		"loading, long":  append(tok.encode(), 'x'),
	} {
		if _, ok := decodeToken(b, 4); ok {
			t.Errorf("%s: decoded", name)
		}
	}
}
