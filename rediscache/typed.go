package rediscache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sharedmap/sharedmap/typed"
)

// Typed puts Go types on a Cache through typed codecs: the key codec's
// bytes are the Redis key (so they must start with one of the cache's
// prefixes to be cached), the value codec's bytes the Redis value. Every
// process, and every other Redis client, must use the same codecs.
type Typed[K, V any] struct {
	c      *Cache
	keys   typed.Codec[K]
	values typed.Codec[V]
	bufs   sync.Pool // *[]byte
}

// NewTyped returns a typed view of c.
func NewTyped[K, V any](c *Cache, keys typed.Codec[K], values typed.Codec[V]) *Typed[K, V] {
	return &Typed[K, V]{c: c, keys: keys, values: values}
}

func (t *Typed[K, V]) key(k K) (string, error) {
	b, err := t.keys.Append(nil, k)
	if err != nil {
		return "", fmt.Errorf("rediscache: encoding key: %w", err)
	}
	return string(b), nil
}

// Get returns the decoded value of k; ErrNotFound when Redis has no such
// key, an error matching typed.ErrDecode when its bytes do not decode.
func (t *Typed[K, V]) Get(ctx context.Context, k K) (V, error) {
	var zero V
	key, err := t.key(k)
	if err != nil {
		return zero, err
	}
	bp, _ := t.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	defer t.bufs.Put(bp)
	b, err := t.c.GetInto(ctx, (*bp)[:0], key)
	if err != nil {
		return zero, err
	}
	*bp = b
	v, err := t.values.Decode(b)
	if err != nil && !errors.Is(err, typed.ErrDecode) {
		err = fmt.Errorf("%w: %w", typed.ErrDecode, err)
	}
	return v, err
}

// Set encodes v and writes it under k, as Cache.Set.
func (t *Typed[K, V]) Set(ctx context.Context, k K, v V, ttl time.Duration) error {
	key, err := t.key(k)
	if err != nil {
		return err
	}
	b, err := t.values.Append(nil, v)
	if err != nil {
		return fmt.Errorf("rediscache: encoding value: %w", err)
	}
	return t.c.Set(ctx, key, b, ttl)
}

// Del deletes k, as Cache.Del.
func (t *Typed[K, V]) Del(ctx context.Context, k K) error {
	key, err := t.key(k)
	if err != nil {
		return err
	}
	return t.c.Del(ctx, key)
}
