package rediscache

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sharedmap/sharedmap/rediscache/internal/resp"
)

// takeoverFactor times MaxStaleness is how long a tracker may leave the
// watermark unpublished before a standby deposes it: long enough that a
// tracker reconnecting once is not deposed, short enough that readers do not
// go to Redis for long when it hangs.
const takeoverFactor = 2

// maxBatch bounds the invalidations queued before they are applied without
// waiting for the next PONG.
const maxBatch = 4096

// standby runs in every process that may track: each PingInterval it checks
// the host's tracker and takes over when there is none, it is dead, or its
// watermark has not moved for takeoverFactor x MaxStaleness.
func (c *Cache) standby() {
	defer c.wg.Done()
	tick := time.NewTicker(c.o.PingInterval)
	defer tick.Stop()
	for {
		if term, ok := c.takeOver(); ok {
			c.track(term)
		}
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
	}
}

// vacant reports whether a standby may take the tracker's place at now.
func (c *Cache) vacant(ct control, now uint64) bool {
	if ct.pid == 0 || !alive(ct.pid) {
		return true
	}
	last := max(ct.watermark, ct.term)
	return last < now && now-last > takeoverFactor*c.maxStale
}

// takeOver makes this process the tracker if the place is vacant: a new
// term, a new epoch (the previous tracker may have lost invalidations) and
// no watermark until the new tracker has caught up.
func (c *Cache) takeOver() (term uint64, ok bool) {
	if ct, found := c.readControl(); found && !c.vacant(ct, monoNow()) {
		return 0, false
	}
	_, ok, err := c.updateControl(func(ct *control) bool {
		now := monoNow()
		if !c.vacant(*ct, now) {
			return false
		}
		term = max(now, ct.term+1)
		ct.epoch++
		ct.bumps++
		ct.pid, ct.term, ct.watermark = c.pid, term, 0
		return true
	})
	return term, ok && err == nil
}

// ours reports whether ct is still of this process's term.
func (c *Cache) ours(ct *control, term uint64) bool { return ct.pid == c.pid && ct.term == term }

// bump starts a new epoch for term, raising the watermark to wm if that is
// higher (0: leave it). It returns errDeposed if the term has ended.
func (c *Cache) bump(term, wm uint64) error {
	_, ok, err := c.updateControl(func(ct *control) bool {
		if !c.ours(ct, term) {
			return false
		}
		ct.epoch++
		ct.bumps++
		ct.watermark = max(ct.watermark, wm)
		return true
	})
	if err == nil && !ok {
		err = errDeposed
	}
	return err
}

// publish adds n applied invalidations and raises the watermark to wm, for
// term.
func (c *Cache) publish(term, n, wm uint64) error {
	_, ok, err := c.updateControl(func(ct *control) bool {
		if !c.ours(ct, term) {
			return false
		}
		ct.applied += n
		ct.watermark = max(ct.watermark, wm)
		return true
	})
	if err == nil && !ok {
		err = errDeposed
	}
	return err
}

// resign ends term, so that a standby takes over at its next check.
func (c *Cache) resign(term uint64) {
	_, _, _ = c.updateControl(func(ct *control) bool {
		if !c.ours(ct, term) {
			return false
		}
		ct.pid = 0
		return true
	})
}

// track is the tracker for term: it keeps a tracking connection, and after
// every failure bumps the epoch and reconnects with backoff, until it is
// deposed or the cache closes.
func (c *Cache) track(term uint64) {
	c.tracking.Store(true)
	defer c.tracking.Store(false)
	backoff := 10 * time.Millisecond
	for {
		began := time.Now()
		err := c.trackConn(term)
		switch {
		case errors.Is(err, errDeposed):
			return
		case errors.Is(err, errStopping):
			c.resign(term)
			return
		}
		select {
		case <-c.stop: // the connection ended because the cache closes
			c.resign(term)
			return
		default:
		}
		// Invalidations may have been lost with the connection.
		if err := c.bump(term, 0); errors.Is(err, errDeposed) {
			return
		}
		if time.Since(began) > time.Second {
			backoff = 10 * time.Millisecond
		}
		select {
		case <-c.stop:
			c.resign(term)
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// message is one read from the tracking connection.
type message struct {
	v   resp.Value
	err error
}

// trackConn runs one tracking connection until it fails, the term ends, or
// the cache closes.
func (c *Cache) trackConn(term uint64) error {
	ctx, cancel := context.WithTimeout(c.ctx, max(time.Second, 4*c.o.MaxStaleness))
	conn, err := resp.Dial(ctx, c.trackerAddr, c.dial)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(c.ctx, func() { _ = conn.Close() }) // Close ends any wait
	defer stop()
	args := []string{"CLIENT", "TRACKING", "ON", "BCAST"}
	for _, p := range c.prefixes {
		args = append(args, "PREFIX", p)
	}
	_ = conn.SetReadDeadline(time.Now().Add(max(time.Second, 4*c.o.MaxStaleness)))
	if _, err := conn.Do(args...); err != nil {
		return fmt.Errorf("rediscache: CLIENT TRACKING: %w", err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	// Entries filled before tracking began may miss writes no invalidation
	// will name; a new epoch retires them. Every entry of the new epoch is
	// read from Redis after this instant, so it is a valid watermark.
	if err := c.bump(term, monoNow()); err != nil {
		return err
	}

	msgs := make(chan message, 256)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			v, err := conn.Read()
			select {
			case msgs <- message{v, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return c.loop(term, conn, msgs)
}

// loop pings, applies invalidations in batches (as many as are queued),
// and at each PONG applies what is left and publishes the watermark: the send time of the PING before the one
// answered. A write that completed before PING k-1 was sent had its
// invalidation pushed before PONG k at the latest (Redis sends
// broadcast invalidations at the end of the event-loop iteration that ran
// the write), and the connection keeps that order.
func (c *Cache) loop(term uint64, conn *resp.Conn, msgs <-chan message) error {
	tick := time.NewTicker(c.o.PingInterval)
	defer tick.Stop()
	var (
		sent  []uint64 // send times of PINGs not yet answered
		prev  uint64   // send time of the last PING answered
		batch [][]byte
	)
	ping := func() error {
		sent = append(sent, monoNow())
		return conn.Send("PING")
	}
	apply := func(wm uint64) error {
		if len(batch) > 0 {
			if _, err := c.m.DeleteMany(batch); err != nil {
				return err
			}
		}
		n := uint64(len(batch))
		batch = batch[:0]
		return c.publish(term, n, wm)
	}
	if err := ping(); err != nil {
		return err
	}
	for {
		select {
		case <-c.stop:
			return errStopping
		case <-tick.C:
			if len(sent) > 0 && monoNow()-sent[0] > c.maxStale {
				return errNoPong
			}
			if err := ping(); err != nil {
				return err
			}
		case m := <-msgs:
			if m.err != nil {
				return m.err
			}
			v := m.v
			switch {
			case v.Kind == resp.Push:
				if len(v.Elems) != 2 || v.Elems[0].Str != "invalidate" {
					continue
				}
				if v.Elems[1].IsNull { // FLUSHALL, FLUSHDB: everything goes
					batch = batch[:0]
					if err := c.bump(term, 0); err != nil {
						return err
					}
					continue
				}
				for _, k := range v.Elems[1].Elems {
					batch = append(batch, []byte(k.Str))
				}
				// Apply at once when nothing more is queued: a batch waits
				// only while invalidations keep arriving, so a quiet write's
				// lag is a round of the loop, not a PingInterval.
				if len(batch) >= maxBatch || len(msgs) == 0 {
					if err := apply(0); err != nil {
						return err
					}
				}
			case v.Err() != nil:
				return v.Err()
			case v.Kind == resp.SimpleString && v.Str == "PONG" && len(sent) > 0:
				answered := sent[0]
				sent = sent[1:]
				if err := apply(prev); err != nil {
					return err
				}
				prev = answered
			default:
				return fmt.Errorf("rediscache: unexpected reply on the tracking connection: %q %q", v.Kind, v.Str)
			}
		}
	}
}
