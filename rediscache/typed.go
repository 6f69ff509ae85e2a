package rediscache

import (
	"context"
	"time"

	"github.com/sharedmap/sharedmap/typed"
)

// Typed puts Go types on a Cache through typed codecs.
type Typed[K, V any] struct {
	c      *Cache
	keys   typed.Codec[K]
	values typed.Codec[V]
}

// NewTyped returns a typed view of c.
func NewTyped[K, V any](c *Cache, keys typed.Codec[K], values typed.Codec[V]) *Typed[K, V] {
	return &Typed[K, V]{c: c, keys: keys, values: values}
}

// Get returns the value of k.
func (t *Typed[K, V]) Get(ctx context.Context, k K) (V, error) {
	var zero V
	return zero, errNotBuilt
}

// Set writes k.
func (t *Typed[K, V]) Set(ctx context.Context, k K, v V, ttl time.Duration) error { return errNotBuilt }

// Del deletes k.
func (t *Typed[K, V]) Del(ctx context.Context, k K) error { return errNotBuilt }
