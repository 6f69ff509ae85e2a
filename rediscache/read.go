package rediscache

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/sharedmap/sharedmap/hashmap"
)

// Get returns the value of key: from the map when a fresh entry is there,
// else from Redis (filling the map). ErrNotFound when Redis has no such key.
func (c *Cache) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := c.GetInto(ctx, nil, key)
	if err != nil {
		return nil, err
	}
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

// GetInto appends the value of key to dst, as Get. A hit allocates nothing
// when dst has room for the value and the entry's 16-byte header past it.
// On an error dst is returned unchanged.
func (c *Cache) GetInto(ctx context.Context, dst []byte, key string) ([]byte, error) {
	if !c.cached(key) {
		c.pass.Add(1)
		return c.redisGet(ctx, dst, key)
	}
	ct, _ := c.readControl()
	if !c.fresh(ct, monoNow()) {
		c.stale.Add(1)
		return c.redisGet(ctx, dst, key)
	}
	out, hit, err := c.lookup(dst, key, ct.epoch)
	if hit || err != nil {
		return out, err
	}
	c.misses.Add(1)
	return c.fill(ctx, dst, key)
}

// lookup serves key from the map if its entry is of epoch. An entry of an
// older epoch is removed (if nobody replaced it meanwhile) and is a miss.
func (c *Cache) lookup(dst []byte, key string, epoch uint64) (out []byte, hit bool, err error) {
	sc := c.scratch()
	sc.key = append(sc.key[:0], key...)
	out, err = c.m.GetInto(dst, sc.key)
	c.scratchPool.Put(sc)
	if errors.Is(err, hashmap.ErrNotFound) {
		return dst, false, nil
	}
	if err != nil {
		return dst, false, err
	}
	e, kind, ok := parseHeader(out[len(dst):])
	switch {
	case ok && e == epoch:
		c.hits.Add(1)
		if kind == kindNegative {
			return dst, true, ErrNotFound
		}
		n := copy(out[len(dst):], out[len(dst)+headerSize:])
		return out[:len(dst)+n], true, nil
	case !ok || e < epoch:
		c.dropOld(key, epoch)
	}
	return dst, false, nil
}

// dropOld deletes key's entry if it is still of an epoch before epoch (or
// not an entry of this package).
func (c *Cache) dropOld(key string, epoch uint64) {
	_ = c.m.Compute([]byte(key), func(old []byte, found bool) ([]byte, bool) {
		if !found {
			return nil, false
		}
		if e, _, ok := parseHeader(old); ok && e >= epoch {
			return old, true
		}
		return nil, false
	})
}

// fill reads key from Redis through the map's single flight: of the
// processes missing the key at once, one reads Redis and stores the value,
// the others wait for it.
func (c *Cache) fill(ctx context.Context, dst []byte, key string) ([]byte, error) {
	ran := false
	v, err := c.m.GetOrLoadWithTTL(ctx, []byte(key), func(ctx context.Context) ([]byte, time.Duration, error) {
		ran = true
		return c.load(ctx, key)
	})
	if !ran {
		// Another caller's fill, or an entry stored since the lookup: that
		// fill may have read Redis before this call began, and was stored
		// only if no invalidation removed its token, so serve it only as
		// found in the map now; else read Redis.
		if cerr := ctx.Err(); cerr != nil {
			return dst, cerr
		}
		ct, _ := c.readControl()
		if c.fresh(ct, monoNow()) {
			if out, hit, err := c.lookup(dst, key, ct.epoch); hit || err != nil {
				return out, err
			}
		}
		return c.redisGet(ctx, dst, key)
	}
	switch {
	case errors.Is(err, errAbsent):
		return dst, ErrNotFound
	case v == nil && err != nil:
		return dst, err
	}
	// v was read from Redis during this call: serve it even if storing it
	// failed (err), which only costs the next reader a fill.
	c.fills.Add(1)
	if _, kind, ok := parseHeader(v); ok {
		if kind == kindNegative {
			return dst, ErrNotFound
		}
		return append(dst, v[headerSize:]...), nil
	}
	return dst, errors.New("rediscache: fill returned a malformed entry")
}

// load is the fill: it reads the control epoch, then the value and its TTL
// in one transaction, and returns the entry and how long it may live. The
// epoch is read first, so a fill that straddles an epoch bump is stored
// under the old epoch and reads as a miss.
func (c *Cache) load(ctx context.Context, key string) ([]byte, time.Duration, error) {
	ct, _ := c.readControl()
	start := time.Now()
	val, pttl, found, err := c.redisGetTTL(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	if !found {
		if c.o.NegativeTTL == 0 {
			return nil, 0, errAbsent
		}
		return appendHeader(nil, ct.epoch, kindNegative), c.o.NegativeTTL, nil
	}
	ttl := c.o.MaxTTL
	if pttl >= 0 {
		// The entry's clock starts when it is stored, after the read: take
		// off the time since the request, and a millisecond for PTTL's
		// rounding and the store, so it never outlives the Redis key.
		if rem := pttl - time.Since(start) - time.Millisecond; rem < ttl {
			ttl = rem
		}
		if ttl <= 0 {
			ttl = time.Nanosecond // expired at once: returned, never served
		}
	}
	e := appendHeader(make([]byte, 0, headerSize+len(val)), ct.epoch, kindValue)
	return append(e, val...), ttl, nil
}

// redisGet reads key from Redis, bypassing the map.
func (c *Cache) redisGet(ctx context.Context, dst []byte, key string) ([]byte, error) {
	v, err := c.client.Do(ctx, c.client.B().Get().Key(key).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return dst, ErrNotFound
	}
	if err != nil {
		return dst, err
	}
	return append(dst, v...), nil
}

// redisGetTTL reads key's value and remaining TTL at one instant (MULTI,
// GET, PTTL, EXEC). pttl is -1 for a key without expiry.
func (c *Cache) redisGetTTL(ctx context.Context, key string) (val []byte, pttl time.Duration, found bool, err error) {
	b := c.client.B()
	res := c.client.DoMulti(ctx,
		b.Multi().Build(),
		b.Get().Key(key).Build(),
		b.Pttl().Key(key).Build(),
		b.Exec().Build(),
	)
	for _, r := range res[:3] {
		if err := r.Error(); err != nil {
			return nil, 0, false, err
		}
	}
	arr, err := res[3].ToArray()
	if err != nil {
		return nil, 0, false, err
	}
	if len(arr) != 2 {
		return nil, 0, false, errors.New("rediscache: EXEC returned no GET and PTTL")
	}
	val, err = arr[0].AsBytes()
	if rueidis.IsRedisNil(err) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	ms, err := arr[1].AsInt64()
	if err != nil {
		return nil, 0, false, err
	}
	switch {
	case ms == -2: // expired between GET and PTTL cannot happen in MULTI; be safe
		return nil, 0, false, nil
	case ms < 0:
		return val, -1, true, nil
	}
	return val, time.Duration(ms) * time.Millisecond, true, nil
}

// mgetFills bounds the fills one MGet runs at once.
const mgetFills = 16

// MGet returns the values of keys, in order, nil for keys absent in Redis.
// The hits are looked up in one batch of the map; the other keys are read
// as Get reads them, up to 16 at once.
func (c *Cache) MGet(ctx context.Context, keys ...string) ([][]byte, error) {
	out := make([][]byte, len(keys))
	done := make([]bool, len(keys))
	c.mgetHits(keys, out, done)
	var (
		wg    sync.WaitGroup
		sem   = make(chan struct{}, mgetFills)
		mu    sync.Mutex
		first error
	)
	for i, k := range keys {
		if done[i] {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			v, err := c.Get(ctx, k)
			switch {
			case errors.Is(err, ErrNotFound):
			case err != nil:
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			default:
				out[i] = v
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, nil
}

// mgetHits serves what it can of keys from the map in one GetMany, setting
// done for each key it served.
func (c *Cache) mgetHits(keys []string, out [][]byte, done []bool) {
	ct, _ := c.readControl()
	if !c.fresh(ct, monoNow()) {
		return
	}
	var idx []int
	var kb [][]byte
	for i, k := range keys {
		if c.cached(k) {
			idx = append(idx, i)
			kb = append(kb, []byte(k))
		}
	}
	if len(kb) == 0 {
		return
	}
	vals := make([][]byte, len(kb))
	if err := c.m.GetMany(kb, vals); err != nil {
		return // Get reads each key again, and reports the error
	}
	for j, v := range vals {
		if e, kind, ok := parseHeader(v); ok && e == ct.epoch {
			c.hits.Add(1)
			done[idx[j]] = true
			if kind == kindValue {
				out[idx[j]] = v[headerSize:]
			}
		}
	}
}

// Set writes key in Redis (SET PX; ttl 0: no expiry), then deletes the map's
// entry: once Set returns, every process of the host reads the new value.
// The delete also cancels a fill in flight, which may have read Redis
// before the write.
func (c *Cache) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if ttl < 0 {
		return errors.New("rediscache: negative ttl")
	}
	cmd := c.client.B().Set().Key(key).Value(rueidis.BinaryString(value))
	var err error
	if ttl > 0 {
		ms := max(int64((ttl+time.Millisecond-1)/time.Millisecond), 1)
		err = c.client.Do(ctx, cmd.PxMilliseconds(ms).Build()).Error()
	} else {
		err = c.client.Do(ctx, cmd.Build()).Error()
	}
	// Delete even after an error: the write may have happened.
	if derr := c.forget(key); err == nil {
		err = derr
	}
	return err
}

// Del deletes keys in Redis (one DEL each, so keys of different cluster
// slots are fine), then deletes their map entries, as Set does.
func (c *Cache) Del(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = c.client.B().Del().Key(k).Build()
	}
	var err error
	for _, r := range c.client.DoMulti(ctx, cmds...) {
		if rerr := r.Error(); rerr != nil && err == nil {
			err = rerr
		}
	}
	for _, k := range keys {
		if derr := c.forget(k); err == nil {
			err = derr
		}
	}
	return err
}

// forget deletes key's entry, for a write through the package.
func (c *Cache) forget(key string) error {
	if !c.cached(key) {
		return nil
	}
	_, err := c.m.Delete([]byte(key))
	return err
}
