package rediscache

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/sharedmap/sharedmap/hashmap"
	"github.com/sharedmap/sharedmap/rediscache/internal/resp"
)

// Defaults of Options.
const (
	DefaultMaxStaleness = 250 * time.Millisecond
	DefaultPingInterval = 50 * time.Millisecond
	DefaultMaxTTL       = 10 * time.Minute
	DefaultFillTimeout  = time.Second
)

// Options configure Open. Zero fields take the defaults.
type Options struct {
	// Path is the map file the host's processes share (required), best on
	// /dev/shm.
	Path string
	// Map sizes the map when Open creates it; Cache is forced on and
	// DefaultTTL off. An existing map must have been created as a cache.
	Map *hashmap.Options
	// Client serves the data commands; nil: one is built from ClientOption
	// (and closed by Close).
	Client rueidis.Client
	// ClientOption builds the client when Client is nil, and gives the
	// tracker its connection either way: InitAddress[0], Username,
	// Password, SelectDB, DialCtxFn (or DialFn, or Dialer) and TLSConfig.
	ClientOption rueidis.ClientOption
	// Prefixes are the key prefixes cached and tracked (required; each
	// non-empty and not starting with a zero byte). Keys outside them
	// pass through to Redis uncached.
	Prefixes []string
	// MaxStaleness bounds how old a write may be and still be missed by a
	// hit (see the package doc). Default 250ms.
	MaxStaleness time.Duration
	// PingInterval is how often the tracker pings, and standbys check the
	// tracker. Default 50ms; must be less than MaxStaleness/2.
	PingInterval time.Duration
	// MaxTTL caps how long an entry lives (keys without a Redis TTL live
	// this long). Default 10m.
	MaxTTL time.Duration
	// NegativeTTL is how long a key absent in Redis is remembered as
	// absent. Default 0: absences are not cached.
	NegativeTTL time.Duration
	// FillTimeout bounds how long a miss waits for another process's fill
	// of the same key before reading Redis itself. Default 1s.
	FillTimeout time.Duration
	// NoTracker keeps this process from ever becoming the host's tracker.
	NoTracker bool
}

// Cache is the host-wide cache of Redis keys in a shared map. It is safe
// for concurrent use.
type Cache struct {
	m         *hashmap.Map
	client    rueidis.Client
	ownClient bool
	prefixes  []string
	maxStale  uint64 // MaxStaleness in ns
	o         Options
	pid       uint64

	trackerAddr string
	dial        resp.Options

	hits, misses, fills, stale, pass atomic.Uint64
	tracking                         atomic.Bool
	scratchPool                      sync.Pool // *scratch
	ctlSnap                          atomic.Pointer[controlSnap]

	stopOnce sync.Once
	stop     chan struct{}
	ctx      context.Context // ends at Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// Open opens (creating if needed) the host's cache at o.Path, checks with
// a PING bounded by ctx that Redis answers, and, unless o.NoTracker, starts
// this process's standby, which becomes the host's tracker when there is
// none.
func Open(ctx context.Context, o Options) (*Cache, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	c := &Cache{o: o, prefixes: append([]string(nil), o.Prefixes...), maxStale: uint64(o.MaxStaleness), pid: uint64(os.Getpid()), stop: make(chan struct{})}
	if !o.NoTracker {
		if len(o.ClientOption.InitAddress) == 0 {
			return nil, errors.New("rediscache: the tracker needs an address: set Options.ClientOption.InitAddress (or NoTracker)")
		}
		c.trackerAddr = o.ClientOption.InitAddress[0]
		c.dial = dialOptions(o.ClientOption)
	}
	var mo hashmap.Options
	if o.Map != nil {
		mo = *o.Map
	}
	mo.Cache, mo.DefaultTTL, mo.LoadTimeout = true, 0, o.FillTimeout
	m, err := hashmap.Open(o.Path, &mo)
	if err != nil {
		return nil, err
	}
	c.m = m
	if !m.Stats().Cache {
		m.Close()
		return nil, fmt.Errorf("rediscache: %s is not a cache map (hashmap.Options.Cache): %w", o.Path, hashmap.ErrNotCache)
	}
	c.client = o.Client
	if c.client == nil {
		co := o.ClientOption
		co.DisableCache = true // this package is the cache
		if c.client, err = rueidis.NewClient(co); err != nil {
			m.Close()
			return nil, err
		}
		c.ownClient = true
	}
	if err := c.checkClient(ctx); err != nil {
		c.closeClient()
		m.Close()
		return nil, err
	}
	ct := newControl()
	_, _ = m.PutIfAbsent(controlKey, ct.encode()) // else the first takeover creates it
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if !o.NoTracker {
		c.wg.Add(1)
		go c.standby()
	}
	return c, nil
}

func (o *Options) setDefaults() error {
	if o.Path == "" {
		return errors.New("rediscache: Options.Path is required")
	}
	if len(o.Prefixes) == 0 {
		return errors.New("rediscache: Options.Prefixes is required (keys outside them are not cached)")
	}
	for _, p := range o.Prefixes {
		if p == "" || p[0] == 0 {
			return fmt.Errorf("rediscache: prefix %q: prefixes must be non-empty and not start with a zero byte", p)
		}
	}
	for i, p := range o.Prefixes {
		for j, q := range o.Prefixes {
			if i != j && strings.HasPrefix(p, q) {
				return fmt.Errorf("rediscache: prefixes %q and %q overlap (Redis refuses overlapping BCAST prefixes)", q, p)
			}
		}
	}
	def := func(d *time.Duration, v time.Duration, name string) error {
		if *d < 0 {
			return fmt.Errorf("rediscache: negative %s", name)
		}
		if *d == 0 {
			*d = v
		}
		return nil
	}
	for _, f := range []struct {
		d    *time.Duration
		v    time.Duration
		name string
	}{
		{&o.MaxStaleness, DefaultMaxStaleness, "MaxStaleness"},
		{&o.PingInterval, DefaultPingInterval, "PingInterval"},
		{&o.MaxTTL, DefaultMaxTTL, "MaxTTL"},
		{&o.NegativeTTL, 0, "NegativeTTL"},
		{&o.FillTimeout, DefaultFillTimeout, "FillTimeout"},
	} {
		if err := def(f.d, f.v, f.name); err != nil {
			return err
		}
	}
	if o.PingInterval >= o.MaxStaleness/2 {
		return fmt.Errorf("rediscache: PingInterval %v must be less than MaxStaleness/2 (%v)", o.PingInterval, o.MaxStaleness/2)
	}
	return nil
}

// checkClient refuses a client of several nodes (Redis Cluster), whose
// invalidations one tracking connection would not all see, and checks that
// Redis answers.
func (c *Cache) checkClient(ctx context.Context) error {
	if n := len(c.client.Nodes()); n > 1 {
		return fmt.Errorf("rediscache: the client talks to %d nodes; the tracker follows one server, so Redis Cluster is not supported", n)
	}
	if err := c.client.Do(ctx, c.client.B().Ping().Build()).Error(); err != nil {
		return fmt.Errorf("rediscache: PING: %w", err)
	}
	return nil
}

// dialOptions gives the tracker's connection the client's address book:
// credentials, database, dialer and TLS.
func dialOptions(co rueidis.ClientOption) resp.Options {
	o := resp.Options{Username: co.Username, Password: co.Password, SelectDB: co.SelectDB}
	dialer := co.Dialer
	if dialer.Timeout == 0 {
		dialer.Timeout = 5 * time.Second
	}
	switch {
	case co.DialCtxFn != nil:
		o.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			return co.DialCtxFn(ctx, addr, &dialer, co.TLSConfig)
		}
	case co.DialFn != nil:
		o.Dial = func(_ context.Context, addr string) (net.Conn, error) { return co.DialFn(addr, &dialer, co.TLSConfig) }
	case co.TLSConfig != nil:
		o.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return tls.Client(c, co.TLSConfig), nil
		}
	default:
		o.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return dialer.DialContext(ctx, "tcp", addr) }
	}
	return o
}

// cached reports whether key falls under one of the prefixes.
func (c *Cache) cached(key string) bool {
	for _, p := range c.prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// Map returns the shared map the cache keeps its entries in.
func (c *Cache) Map() *hashmap.Map { return c.m }

// Close stops this process's standby (a tracker resigns, so a standby of
// another process takes over at once), closes the client if Open built it,
// and closes the map.
func (c *Cache) Close() error {
	first := false
	c.stopOnce.Do(func() {
		first = true
		close(c.stop)
		c.cancel()
	})
	if !first {
		return nil
	}
	c.wg.Wait()
	c.closeClient()
	return c.m.Close()
}

func (c *Cache) closeClient() {
	if c.ownClient {
		c.client.Close()
	}
}

// Stats describe the cache: Hits through PassThrough count this process's
// calls; the others are the host's, from the control record.
type Stats struct {
	Hits          uint64 // reads served from the map
	Misses        uint64 // reads of cached keys the map could not serve (each fills or waits for a fill)
	Fills         uint64 // Redis reads this process stored (or offered) in the map
	StaleRefusals uint64 // reads sent to Redis because the watermark was older than MaxStaleness
	PassThrough   uint64 // reads of keys outside Prefixes

	InvalidationsApplied uint64 // keys deleted on the tracker's invalidations, host-wide
	EpochBumps           uint64 // times every entry was dropped at once, host-wide
	Epoch                uint64 // the current epoch

	TrackerPID int  // the host's tracker; 0: none
	Tracking   bool // this process is the tracker
	// Lag is now minus the watermark: how far behind Redis the cache may
	// be. -1 when there is no watermark (no tracker has caught up yet).
	Lag time.Duration
}

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	s := Stats{
		Hits: c.hits.Load(), Misses: c.misses.Load(), Fills: c.fills.Load(),
		StaleRefusals: c.stale.Load(), PassThrough: c.pass.Load(),
		Tracking: c.tracking.Load(), Lag: -1,
	}
	if ct, ok := c.readControl(); ok {
		s.InvalidationsApplied, s.EpochBumps, s.Epoch = ct.applied, ct.bumps, ct.epoch
		s.TrackerPID = int(ct.pid)
		if now := monoNow(); ct.watermark != 0 && ct.watermark <= now {
			s.Lag = time.Duration(now - ct.watermark)
		}
	}
	return s
}
