package hashmap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/internal/registry"
	"github.com/sharedmap/sharedmap/segment"
)

// GetOrLoad returns the value of key as Get does; when the key is missing,
// it calls load for the value, stores it (for DefaultTTL in a cache map) and
// returns it. Of all the goroutines of all the processes asking for one
// missing key at once, load runs once in the usual case and the others wait
// for its value (in a map that is not a cache, only the goroutines of one
// process share a load).
//
// load runs again for the key only when the loading process dies or closes
// the map before storing (a waiter takes over within milliseconds), when a
// load outlives Options.LoadTimeout, when the caller running load gives up
// (its ctx ends), or when a write of the key, a Clear or an eviction removes
// the load's token.
//
// The loaded value is stored only if its token still stands, in one step
// under the key's segment lock: a Put during the load keeps its value, and a
// Delete leaves the key absent. Every caller gets a copy of the loaded value
// either way. A load that fails or panics stores nothing: its error goes to
// every waiter (in other processes as ErrLoadFailed), a panic propagates in
// the goroutine that ran load, and the next call loads again.
//
// ctx bounds the call's waits and is passed to load; when it ends first,
// GetOrLoad returns ctx.Err(). load runs outside every lock and may use the
// map, but must not ask for its own key (it would wait for itself until
// LoadTimeout). If the value cannot be stored (ErrTooLarge, a lock timeout),
// GetOrLoad returns it with the error. A ReadOnly map answers ErrReadOnly
// for a missing key without calling load. For a present key it costs a Get.
func (m *Map) GetOrLoad(ctx context.Context, key []byte, load func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	if load == nil {
		return nil, fmt.Errorf("%w: GetOrLoad with a nil load function", ErrBadOptions)
	}
	v, err := m.Get(key)
	if !errors.Is(err, ErrNotFound) {
		return v, err
	}
	return m.loadMissing(ctx, key, func(ctx context.Context) ([]byte, time.Duration, error) {
		v, err := load(ctx)
		return v, 0, err
	})
}

// GetOrLoadWithTTL is GetOrLoad for a cache map whose load also says how
// long its value lives: ttl as PutWithTTL's (NoExpiry: never), or 0 for
// the map's DefaultTTL. A negative ttl is an error matching ErrBadOptions,
// returned with the value, which is not stored. ErrNotCache on a map
// created without Options.Cache.
func (m *Map) GetOrLoadWithTTL(ctx context.Context, key []byte, load func(ctx context.Context) (value []byte, ttl time.Duration, err error)) ([]byte, error) {
	if load == nil {
		return nil, fmt.Errorf("%w: GetOrLoadWithTTL with a nil load function", ErrBadOptions)
	}
	if !m.layout.Cache {
		return nil, ErrNotCache
	}
	v, err := m.Get(key)
	if !errors.Is(err, ErrNotFound) {
		return v, err
	}
	return m.loadMissing(ctx, key, load)
}

// loadFunc is a load that says its value's time to live (0: DefaultTTL).
type loadFunc func(ctx context.Context) ([]byte, time.Duration, error)

// Waiters for another process's load poll the key with pauses that double
// from minNap to maxNap. A load of a remote value takes from a fraction
// of a millisecond up: the first polls see a fast load soon. maxNap bounds
// how late a waiter sees the value stored, or the loader dead
// (TestGetOrLoadLoaderKilled logs the takeover time), and keeps a waiting
// process to 500 lock-free reads and liveness checks a second.
const (
	minNap = 50 * time.Microsecond
	maxNap = 2 * time.Millisecond
)

// fillGroup coalesces the goroutines of this process that ask for one
// missing key: the first leads (loads, or waits for another process's
// load), the others follow it.
type fillGroup struct {
	mu    sync.Mutex
	calls map[string]*fillCall // by key; a call leaves when it is done
	// awaiting counts the leaders polling for another process's load
	// (tests wait for it).
	awaiting atomic.Int32
}

// fillCall is one leader's call, which its followers wait on.
type fillCall struct {
	done chan struct{} // closed when the fields below are final
	// value and err are the call's answer: a value, an error, or both
	// when the value could not be stored.
	value []byte
	err   error
	retry bool // the leader gave up for its own context: followers try again
	// loading is when the leader began to run load itself (zero while it
	// waits for another process's load); under fillGroup.mu.
	loading time.Time
	// followers counts the goroutines that joined the call; under
	// fillGroup.mu (tests wait for it).
	followers int
}

// join returns the call in progress for key k, or a new one for the
// caller to lead.
func (g *fillGroup) join(k string) (c *fillCall, leader bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.calls[k]; c != nil {
		c.followers++
		return c, false
	}
	if g.calls == nil {
		g.calls = make(map[string]*fillCall)
	}
	c = &fillCall{done: make(chan struct{})}
	g.calls[k] = c
	return c, true
}

// startLoad records that c's leader runs load from now.
func (g *fillGroup) startLoad(c *fillCall) {
	g.mu.Lock()
	c.loading = time.Now()
	g.mu.Unlock()
}

// finish ends c, whose answer is set: later callers of key k start anew.
func (g *fillGroup) finish(k string, c *fillCall) {
	g.mu.Lock()
	if g.calls[k] == c { // not if a follower superseded it
		delete(g.calls, k)
	}
	g.mu.Unlock()
	close(c.done)
}

// supersede is a follower's check after waiting timeout for c: once c's
// leader has run load for timeout, c stops being key k's call, and the
// follower joins anew (and leads, unless another follower did first):
// over reports that. Otherwise it returns how long to wait before asking
// again: a leader that waits for another process's load is bounded by
// its own timeout, for each load it waits on.
func (g *fillGroup) supersede(k string, c *fillCall, timeout time.Duration) (wait time.Duration, over bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.calls[k] != c:
		return 0, true
	case c.loading.IsZero():
		return timeout, false
	}
	if ran := time.Since(c.loading); ran < timeout {
		return timeout - ran, false
	}
	delete(g.calls, k)
	return 0, true
}

// loadMissing is GetOrLoad after a miss. In a process, the goroutines that
// ask for a key while another of them loads it, or waits for another
// process's load, wait for that one, with no traffic to the file. Between
// processes, in a cache map, the loading process holds a fill token in the
// file: an entry under the key whose expiry marks it hidden, naming the
// loader's registry slot, which every reader takes for an absent key (Len
// and Stats count it, as they count expired entries). The others poll the
// key with a pause doubling from 50µs to 2ms, and take the token over when
// the loader's slot is dead or taken, or when LoadTimeout has passed since
// they first saw the token.
func (m *Map) loadMissing(ctx context.Context, key []byte, load loadFunc) ([]byte, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if m.readOnly {
		return nil, ErrReadOnly
	}
	k := string(key)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c, leader := m.fills.join(k)
		if leader {
			return m.lead(ctx, k, key, c, load)
		}
		v, again, err := m.follow(ctx, k, c)
		if !again {
			return v, err
		}
	}
}

// follow waits for c, led by another goroutine of this process, and
// returns its answer, or again when the caller must join anew: c's leader
// gave up for its context, or ran load for LoadTimeout.
func (m *Map) follow(ctx context.Context, k string, c *fillCall) (v []byte, again bool, err error) {
	t := time.NewTimer(m.opts.LoadTimeout)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			if c.retry {
				return nil, true, nil
			}
			if v = bytes.Clone(c.value); v == nil && c.err == nil {
				v = []byte{}
			}
			return v, false, c.err
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-t.C:
			wait, over := m.fills.supersede(k, c, m.opts.LoadTimeout)
			if over {
				return nil, true, nil
			}
			t.Reset(wait)
		}
	}
}

// lead answers c for its followers: the value of key, loaded here or by
// another process.
func (m *Map) lead(ctx context.Context, k string, key []byte, c *fillCall, load loadFunc) (v []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.err = fmt.Errorf("%w: the load panicked: %v", ErrLoadFailed, r)
			m.fills.finish(k, c)
			panic(r)
		}
		if v == nil && err == nil {
			v = []byte{}
		}
		c.value, c.err = v, err
		c.retry = err != nil && ctx.Err() != nil
		m.fills.finish(k, c)
	}()
	h := xxhash.Sum64(key)
	if !m.layout.Cache || m.reg == nil {
		// No place for a token: a plain map, or a file from before the
		// process registry, whose loaders no token could name.
		return m.loadAlone(ctx, h, key, c, load)
	}
	return m.fillShared(ctx, h, key, c, load)
}

// loadAlone loads key and stores the value if the key is still absent.
func (m *Map) loadAlone(ctx context.Context, h uint64, key []byte, c *fillCall, load loadFunc) ([]byte, error) {
	m.fills.startLoad(c)
	v, ttl, err := load(ctx)
	if err != nil {
		return nil, err
	}
	expiry, err := m.loadedExpiry(ttl)
	if err == nil {
		now := m.table.Now()
		err = m.updateEntry(h, key, func(_ []byte, exp int64, found bool) ([]byte, int64, segment.Outcome) {
			if found && live(exp, now) {
				return nil, 0, segment.Leave // written meanwhile: the later value stays
			}
			return v, expiry, segment.Store
		})
		if m.wantsLarge(err, key, v) {
			// A value too large for a tier, or a large value stored under
			// the key meanwhile: stored the large way, only if the key is
			// still absent (a large value there is a later write, which
			// stays).
			err = m.putLargeEntered(h, key, v)
		}
	}
	if err != nil {
		return v, fmt.Errorf("GetOrLoad: the loaded value was not stored: %w", err)
	}
	return v, nil
}

// fillShared is lead in a cache map: it takes the key's fill token and
// loads, or waits for the process holding it, until the key has a value.
func (m *Map) fillShared(ctx context.Context, h uint64, key []byte, c *fillCall, load loadFunc) ([]byte, error) {
	self, err := m.selfSlot()
	if err != nil {
		return nil, err
	}
	var w fillWait
	for {
		mine := newToken(uint32(self.Index), self.Generation)
		look, err := m.lookOrClaim(h, key, mine, &w)
		switch {
		case err != nil:
			return nil, err
		case look.outcome == lookValue:
			return look.value, nil
		case look.outcome == lookFailed:
			return nil, fmt.Errorf("%w in another process: %s", ErrLoadFailed, look.token.failure)
		case look.outcome == lookClaimed:
			return m.loadWithToken(ctx, h, key, c, mine, load)
		}
		v, err := m.awaitToken(ctx, h, key, look.token, &w)
		if err != nil || v != nil {
			return v, err
		}
	}
}

// fillWait is what a leader knows of the load it waits for.
type fillWait struct {
	awaited  fillToken     // the token waited on (id 0: none yet)
	since    time.Time     // when this leader first saw it
	nap      time.Duration // the next pause
	takeOver bool          // its loader is gone, or ran LoadTimeout: the next look takes the token
}

// fillLook is what lookOrClaim found.
type fillLook struct {
	outcome int
	value   []byte    // lookValue
	token   fillToken // lookWait, lookFailed
}

const (
	lookValue   = iota + 1 // the key has a value
	lookWait               // another load is in flight
	lookFailed             // the load waited for failed
	lookClaimed            // the caller's token is stored: it loads
)

// lookOrClaim looks at key under its segment lock and, unless it finds a
// value, a load in flight that w does not take over, or the failure of
// the load w waited for, stores mine as its token. A token of this very
// slot is taken over: this process's call for the key is the caller's,
// so such a token is a leftover or belongs to a call the caller
// superseded.
func (m *Map) lookOrClaim(h uint64, key []byte, mine fillToken, w *fillWait) (fillLook, error) {
	var look fillLook
	slots := m.reg.Layout().Slots
	now := m.table.Now()
	err := m.updateEntry(h, key, func(value []byte, exp int64, found bool) ([]byte, int64, segment.Outcome) {
		look = fillLook{}
		if found && live(exp, now) {
			look.outcome, look.value = lookValue, bytes.Clone(value)
			return nil, 0, segment.Leave
		}
		if found && exp == segment.Hidden {
			if t, ok := decodeToken(value, slots); ok {
				ours := t.slot == mine.slot && t.generation == mine.generation
				switch {
				case t.state == tokenFailed && t.id == w.awaited.id:
					look.outcome, look.token = lookFailed, t
					return nil, 0, segment.Leave
				case t.state == tokenLoading && !ours && !(w.takeOver && t.id == w.awaited.id):
					look.outcome, look.token = lookWait, t
					return nil, 0, segment.Leave
				}
			}
		}
		look.outcome = lookClaimed
		return mine.encode(), segment.Hidden, segment.Store
	})
	return look, err
}

// awaitToken waits for the load of token t, polling without a lock, until
// the key has a value (returned), or the caller must look again under the
// lock (nil, nil): t is gone or failed, or its loader is gone or ran
// LoadTimeout (w.takeOver).
func (m *Map) awaitToken(ctx context.Context, h uint64, key []byte, t fillToken, w *fillWait) ([]byte, error) {
	if t.id != w.awaited.id {
		w.awaited, w.since, w.nap = t, time.Now(), minNap
	}
	w.takeOver = false
	m.fills.awaiting.Add(1)
	defer m.fills.awaiting.Add(-1)
	slots := m.reg.Layout().Slots
	var buf []byte
	for {
		if m.loaderGone(t) || time.Since(w.since) >= m.opts.LoadTimeout {
			w.takeOver = true
			return nil, nil
		}
		if err := sleep(ctx, w.nap); err != nil {
			return nil, err
		}
		w.nap = min(2*w.nap, maxNap)
		v, exp, found, err := m.getEntry(h, key, buf[:0])
		switch {
		case err != nil:
			return nil, err
		case found && live(exp, m.table.Now()):
			return bytes.Clone(v), nil
		case !found || exp != segment.Hidden:
			return nil, nil
		}
		if now, ok := decodeToken(v, slots); !ok || now.id != t.id || now.state != tokenLoading {
			return nil, nil
		}
		buf = v
	}
}

// loaderGone reports whether the process that holds token t has died or
// closed the map: its registry slot is not alive, or has been claimed
// again since (another generation). A slot that cannot be read is taken
// for alive: LoadTimeout bounds the wait.
func (m *Map) loaderGone(t fillToken) bool {
	c, err := m.enterAny(false) // Close lets the registry go
	if err != nil {
		return false // the next read says ErrClosed
	}
	defer c.Leave()
	s, err := m.reg.Slot(int(t.slot))
	if err != nil {
		return false
	}
	return !s.Alive || !s.InUse || s.Generation != t.generation
}

// selfSlot is this process's registry slot, which its tokens name.
func (m *Map) selfSlot() (registry.Slot, error) {
	c, err := m.enterAny(false) // Close leaves the slot
	if err != nil {
		return registry.Slot{}, err
	}
	defer c.Leave()
	return m.reg.Slot(m.reg.Self())
}

// loadWithToken runs load as the holder of token mine, and stores the
// value if the token still stands. A failure replaces the token by a
// failed one, which tells its waiters; a load abandoned for the caller's
// context removes it, for another process to take over.
func (m *Map) loadWithToken(ctx context.Context, h uint64, key []byte, c *fillCall, mine fillToken, load loadFunc) ([]byte, error) {
	m.fills.startLoad(c)
	defer func() {
		if r := recover(); r != nil {
			m.settleToken(h, key, mine, fmt.Sprintf("the load panicked: %v", r))
			panic(r)
		}
	}()
	v, ttl, err := load(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		m.settleToken(h, key, mine, "")
		return nil, err
	case err != nil:
		m.settleToken(h, key, mine, err.Error())
		return nil, err
	}
	expiry, err := m.loadedExpiry(ttl)
	if err == nil {
		err = m.updateEntry(h, key, func(value []byte, exp int64, found bool) ([]byte, int64, segment.Outcome) {
			if found && exp == segment.Hidden && isToken(value, mine) {
				return v, expiry, segment.Store
			}
			return nil, 0, segment.Leave // the token is gone: a write of the key came, or a takeover
		})
	}
	if err != nil {
		m.settleToken(h, key, mine, "")
		return v, fmt.Errorf("GetOrLoad: the loaded value was not stored: %w", err)
	}
	return v, nil
}

// settleToken ends the load of token mine, if the token still stands,
// without a value: it removes the token (why empty), or replaces it by a
// failed token carrying why. An error here leaves the token, which its
// waiters then take over when this process closes the map, or after
// LoadTimeout.
func (m *Map) settleToken(h uint64, key []byte, mine fillToken, why string) {
	_ = m.updateEntry(h, key, func(value []byte, exp int64, found bool) ([]byte, int64, segment.Outcome) {
		switch {
		case !found || exp != segment.Hidden || !isToken(value, mine):
			return nil, 0, segment.Leave
		case why == "":
			return nil, 0, segment.Remove
		}
		return mine.failed(why).encode(), segment.Hidden, segment.Store
	})
}

// isToken reports whether value is token mine, still loading.
func isToken(value []byte, mine fillToken) bool { return bytes.Equal(value, mine.encode()) }

// live reports whether an entry of expiry exp is visible at now.
func live(exp, now int64) bool { return exp == 0 || exp > now }

// loadedExpiry is the expiry of a value loaded with ttl (0: DefaultTTL).
func (m *Map) loadedExpiry(ttl time.Duration) (int64, error) {
	switch {
	case ttl == 0:
		return m.expiry(m.opts.DefaultTTL), nil
	case ttl < 0:
		return 0, fmt.Errorf("%w: the load returned TTL %v; it must be positive (hashmap.NoExpiry for a value that never expires), or 0 for DefaultTTL", ErrBadOptions, ttl)
	}
	return m.expiry(ttl), nil
}

// updateEntry is segment.UpdateEntry on key, hashed to h, inside the
// in-flight gate.
func (m *Map) updateEntry(h uint64, key []byte, fn func(value []byte, expiry int64, found bool) ([]byte, int64, segment.Outcome)) error {
	c, err := m.enter(h, true)
	if err != nil {
		return err
	}
	defer c.Leave()
	return m.table.For(h).UpdateEntry(h, key, fn)
}

// putLargeEntered is putLarge of value under key (hashed to h) if the key
// is absent, inside the in-flight gate: GetOrLoad's store of a value that
// goes the large way.
func (m *Map) putLargeEntered(h uint64, key, value []byte) error {
	c, err := m.enter(h, true)
	if err != nil {
		return err
	}
	defer c.Leave()
	_, err = m.putLarge(h, key, value, true)
	return err
}

// getEntry is segment.GetEntry on key, hashed to h, inside the in-flight
// gate.
func (m *Map) getEntry(h uint64, key, dst []byte) ([]byte, int64, bool, error) {
	c, err := m.enter(h, false)
	if err != nil {
		return dst, 0, false, err
	}
	defer c.Leave()
	return m.table.For(h).GetEntry(h, key, dst)
}

// sleep pauses for d, or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	if ctx.Done() == nil {
		time.Sleep(d)
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
