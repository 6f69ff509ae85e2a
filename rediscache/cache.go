package rediscache

import (
	"context"
	"errors"
	"time"

	"github.com/redis/rueidis"
	"github.com/sharedmap/sharedmap/hashmap"
)

// ErrNotFound is returned by Get, GetInto and the typed Get when the key is
// absent in Redis.
var ErrNotFound = errors.New("rediscache: key not found")

var errNotBuilt = errors.New("rediscache: not implemented yet")

// Options configure Open.
type Options struct {
	Path         string
	Map          *hashmap.Options
	Client       rueidis.Client
	ClientOption rueidis.ClientOption
	Prefixes     []string
	MaxStaleness time.Duration
	PingInterval time.Duration
	MaxTTL       time.Duration
	NegativeTTL  time.Duration
	FillTimeout  time.Duration
	NoTracker    bool
}

// Stats are a Cache's counters.
type Stats struct {
	Hits, Misses, Fills, StaleRefusals, PassThrough uint64
	InvalidationsApplied, EpochBumps, Epoch         uint64
	TrackerPID                                      int
	Tracking                                        bool
	Lag                                             time.Duration
}

// Cache is a host-wide cache of Redis keys in a shared map.
type Cache struct{ m *hashmap.Map }

// Open opens the cache.
func Open(ctx context.Context, o Options) (*Cache, error) { return nil, errNotBuilt }

// Get returns the value of key.
func (c *Cache) Get(ctx context.Context, key string) ([]byte, error) { return nil, errNotBuilt }

// GetInto appends the value of key to dst.
func (c *Cache) GetInto(ctx context.Context, dst []byte, key string) ([]byte, error) {
	return dst, errNotBuilt
}

// MGet returns the values of keys, nil for absent ones.
func (c *Cache) MGet(ctx context.Context, keys ...string) ([][]byte, error) { return nil, errNotBuilt }

// Set writes key in Redis.
func (c *Cache) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return errNotBuilt
}

// Del deletes keys in Redis.
func (c *Cache) Del(ctx context.Context, keys ...string) error { return errNotBuilt }

// Stats returns the counters.
func (c *Cache) Stats() Stats { return Stats{} }

// Map returns the shared map.
func (c *Cache) Map() *hashmap.Map { return c.m }

// Close closes the cache.
func (c *Cache) Close() error { return errNotBuilt }
