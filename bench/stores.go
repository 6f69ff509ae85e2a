package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/PowerDNS/lmdb-go/lmdb"
	"github.com/VictoriaMetrics/fastcache"
	"github.com/allegro/bigcache/v3"
	"github.com/coocood/freecache"
	"github.com/dgraph-io/ristretto/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sharedmap/sharedmap/hashmap"
	bolt "go.etcd.io/bbolt"
)

// store is what every peer is measured through. Get appends the value to
// dst (copying it where the store hands out a reference it may reuse).
type store interface {
	Get(dst, key []byte) ([]byte, bool, error)
	Put(key, value []byte) error
	Close() error
}

// batchLoader is implemented by stores with a batch write, which their
// load phase uses as a user loading them would: the transactional ones
// commit 1000 keys per transaction, Redis pipelines 1000 sets, sharedmap
// calls PutMany with 16.
type batchLoader interface {
	LoadBatch(keys [][]byte, value func(i int) []byte) error
}

// batchGetter is implemented by stores with a batch read: values[i] gets
// keys[i]'s value, appended to values[i][:0] (nil when absent).
type batchGetter interface {
	GetMany(keys, values [][]byte) error
}

// batchPutter is implemented by stores with a batch write: keys[i] gets
// values[i], in one transaction, lock or round trip where the store has one.
type batchPutter interface {
	PutMany(keys, values [][]byte) error
}

// loopPutter is the batch write of a store without one: a Put per key.
type loopPutter struct{ st store }

func (l loopPutter) PutMany(keys, values [][]byte) error {
	for i, k := range keys {
		if err := l.st.Put(k, values[i]); err != nil {
			return err
		}
	}
	return nil
}

// loopGetter is the batch read of a store without one: a Get per key.
type loopGetter struct{ st store }

func (l loopGetter) GetMany(keys, values [][]byte) error {
	for i, k := range keys {
		v, ok, err := l.st.Get(values[i][:0], k)
		if err != nil {
			return err
		}
		if !ok {
			v = nil
		}
		values[i] = v
	}
	return nil
}

// serverMemory is implemented by a store whose data lives in another
// process (Redis): that process's resident memory, in MB, which the
// harness adds to its own growth.
type serverMemory interface{ ServerMB() (float64, error) }

// dropper reports how many sets a lossy store dropped.
type dropper interface{ Dropped() uint64 }

type storeSpec struct {
	name string
	open func(dir string, d dataset) (store, error)
	// multiProcess: the store can be opened by several processes at once.
	multiProcess bool
	// slow: peers whose operations cost tens of microseconds get fewer ops.
	slow bool
	// evicts: a cache that may drop a key it was given, so a Get's miss
	// is counted, not an error.
	evicts bool
}

var stores = []storeSpec{
	{name: "sharedmap", open: openSharedmap, multiProcess: true},
	{name: "rwmutex-map", open: func(string, dataset) (store, error) { return &rwMap{m: map[string][]byte{}}, nil }},
	{name: "fastcache", open: func(_ string, d dataset) (store, error) { return &fastStore{fastcache.New(d.memory())}, nil }, evicts: true},
	{name: "freecache", open: func(_ string, d dataset) (store, error) {
		return &freeStore{freecache.NewCache(d.memory())}, nil
	}, evicts: true},
	{name: "bigcache", open: openBigcache, evicts: true},
	{name: "ristretto", open: openRistretto, evicts: true},
	{name: "bbolt", open: openBolt, slow: true},
	{name: "lmdb", open: openLMDB, multiProcess: true},
	{name: "redis-unix", open: openRedis, slow: true},
}

// --- sharedmap ---

type sharedStore struct {
	m    *hashmap.Map
	vals [][]byte // LoadBatch's values, over flat
	flat []byte
}

func openSharedmap(dir string, d dataset) (store, error) {
	m, err := hashmap.Open(filepath.Join(dir, "sharedmap.map"), &hashmap.Options{
		Entries: d.keys, AverageKeySize: keySize, AverageValueSize: d.valueSize})
	return &sharedStore{m: m}, err
}

func (s *sharedStore) Get(dst, k []byte) ([]byte, bool, error) {
	v, err := s.m.GetInto(dst, k)
	if errors.Is(err, hashmap.ErrNotFound) {
		return dst, false, nil
	}
	return v, err == nil, err
}
func (s *sharedStore) Put(k, v []byte) error { return s.m.Put(k, v) }
func (s *sharedStore) Close() error          { return s.m.Close() }

// GetMany is sharedmap's batch read, which overlaps the lookups' misses.
func (s *sharedStore) GetMany(keys, values [][]byte) error { return s.m.GetMany(keys, values) }

// PutMany is sharedmap's batch write, which overlaps the lookups' misses.
func (s *sharedStore) PutMany(keys, values [][]byte) error {
	_, err := s.m.PutMany(keys, values)
	return err
}

// LoadBatch loads with PutAll, the map's way to fill (in the file's order,
// on every core), as LMDB and bbolt load with one transaction per 1,000
// keys. value may reuse one buffer, so the values are copied first.
func (s *sharedStore) LoadBatch(keys [][]byte, value func(int) []byte) error {
	s.vals = s.vals[:0]
	s.flat = s.flat[:0]
	for i := range keys {
		s.flat = append(s.flat, value(i)...)
	}
	at := 0
	for i := range keys {
		n := len(value(i))
		s.vals = append(s.vals, s.flat[at:at+n:at+n])
		at += n
	}
	_, _, err := s.m.PutAll(keys, s.vals)
	return err
}

// --- map[string][]byte under sync.RWMutex ---

type rwMap struct {
	mu sync.RWMutex
	m  map[string][]byte
}

func (r *rwMap) Get(dst, k []byte) ([]byte, bool, error) {
	r.mu.RLock()
	v, ok := r.m[string(k)]
	dst = append(dst, v...)
	r.mu.RUnlock()
	return dst, ok, nil
}

func (r *rwMap) Put(k, v []byte) error {
	c := append([]byte(nil), v...)
	r.mu.Lock()
	r.m[string(k)] = c
	r.mu.Unlock()
	return nil
}
func (r *rwMap) Close() error { return nil }

// PutMany copies the batch's values, then sets them under one write lock.
func (r *rwMap) PutMany(keys, values [][]byte) error {
	copies := make([][]byte, len(values))
	for i, v := range values {
		copies[i] = append([]byte(nil), v...)
	}
	r.mu.Lock()
	for i, k := range keys {
		r.m[string(k)] = copies[i]
	}
	r.mu.Unlock()
	return nil
}

// GetMany reads the batch under one read lock.
func (r *rwMap) GetMany(keys, values [][]byte) error {
	r.mu.RLock()
	for i, k := range keys {
		v, ok := r.m[string(k)]
		if ok {
			values[i] = append(values[i][:0], v...)
		} else {
			values[i] = nil
		}
	}
	r.mu.RUnlock()
	return nil
}

// --- fastcache, freecache, bigcache, ristretto ---

type fastStore struct{ c *fastcache.Cache }

func (s *fastStore) Get(dst, k []byte) ([]byte, bool, error) {
	n := len(dst)
	dst = s.c.Get(dst, k)
	return dst, len(dst) > n || s.c.Has(k), nil
}
func (s *fastStore) Put(k, v []byte) error { s.c.Set(k, v); return nil }
func (s *fastStore) Close() error          { s.c.Reset(); return nil }

type freeStore struct{ c *freecache.Cache }

func (s *freeStore) Get(dst, k []byte) ([]byte, bool, error) {
	v, err := s.c.GetWithBuf(k, dst[len(dst):cap(dst)])
	if err != nil {
		return dst, false, nil
	}
	if len(v) > 0 && len(dst) < cap(dst) && &v[0] == &dst[:len(dst)+1][len(dst)] {
		return dst[:len(dst)+len(v)], true, nil // copied into dst's spare room already
	}
	return append(dst, v...), true, nil
}
func (s *freeStore) Put(k, v []byte) error { return s.c.Set(k, v, 0) }
func (s *freeStore) Close() error          { s.c.Clear(); return nil }

type bigStore struct{ c *bigcache.BigCache }

func openBigcache(_ string, d dataset) (store, error) {
	// A LifeWindow of 0 (DefaultConfig(0)) expires every entry after a
	// second, so the cells after the load measured a mostly empty cache;
	// the others keep everything for the run, and so must bigcache.
	cfg := bigcache.DefaultConfig(24 * time.Hour)
	cfg.Shards = 1024
	cfg.MaxEntriesInWindow = d.keys
	cfg.MaxEntrySize = d.valueSize + 64
	cfg.CleanWindow = 0
	cfg.Verbose = false
	c, err := bigcache.New(context.Background(), cfg)
	return &bigStore{c}, err
}

// Get returns bigcache's own copy (its allocation is bigcache's cost),
// appended to dst only when dst holds something already.
func (s *bigStore) Get(dst, k []byte) ([]byte, bool, error) {
	v, err := s.c.Get(string(k))
	if err != nil {
		return dst, false, nil
	}
	if len(dst) == 0 {
		return v, true, nil
	}
	return append(dst, v...), true, nil
}
func (s *bigStore) Put(k, v []byte) error { return s.c.Set(string(k), v) }
func (s *bigStore) Close() error          { return s.c.Close() }

type ristrettoStore struct {
	c        *ristretto.Cache[string, []byte]
	lostLoad uint64 // the load's sets still dropped after their retries
}

func openRistretto(_ string, d dataset) (store, error) {
	c, err := ristretto.NewCache(&ristretto.Config[string, []byte]{
		NumCounters: int64(d.keys) * 10, MaxCost: int64(d.keys) * 2, BufferItems: 64,
		IgnoreInternalCost: true}) // no Metrics: nothing reads them, and they cost every Get and Set atomic adds
	return &ristrettoStore{c: c}, err
}

func (s *ristrettoStore) Get(dst, k []byte) ([]byte, bool, error) {
	v, ok := s.c.Get(string(k))
	return append(dst, v...), ok, nil
}
func (s *ristrettoStore) Put(k, v []byte) error {
	s.c.Set(string(k), append([]byte(nil), v...), 1)
	return nil
}
func (s *ristrettoStore) Close() error { s.c.Close(); return nil }

// LoadBatch retries a set that ristretto drops (its buffers full), after
// waiting for them to drain, so that the Get cells run on a loaded cache:
// until 2026-11-27 the drops stayed dropped, and ristretto's Gets ran on a
// cache holding a quarter of the keys, mostly missing, which is faster.
// Then it waits for the buffers, so that what is set is visible.
func (s *ristrettoStore) LoadBatch(keys [][]byte, value func(int) []byte) error {
	for i, k := range keys {
		v := append([]byte(nil), value(i)...)
		ok := s.c.Set(string(k), v, 1)
		for try := 0; !ok && try < 20; try++ {
			s.c.Wait()
			ok = s.c.Set(string(k), v, 1)
		}
		if !ok {
			s.lostLoad++
		}
	}
	s.c.Wait()
	return nil
}

// Dropped is how many of the load's sets stayed dropped after retries.
func (s *ristrettoStore) Dropped() uint64 { return s.lostLoad }

// --- bbolt: one transaction per operation ---

var bucket = []byte("b")

type boltStore struct{ db *bolt.DB }

func openBolt(dir string, _ dataset) (store, error) {
	db, err := bolt.Open(filepath.Join(dir, "bolt.db"), 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true,
		FreelistType: bolt.FreelistMapType, InitialMmapSize: 1 << 30})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists(bucket); return err })
	return &boltStore{db}, err
}

func (s *boltStore) Get(dst, k []byte) ([]byte, bool, error) {
	var ok bool
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucket).Get(k)
		ok = v != nil
		dst = append(dst, v...)
		return nil
	})
	return dst, ok, err
}

// GetMany reads the batch in one read transaction.
func (s *boltStore) GetMany(keys, values [][]byte) error {
	return s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		for i, k := range keys {
			if v := b.Get(k); v != nil {
				values[i] = append(values[i][:0], v...)
			} else {
				values[i] = nil
			}
		}
		return nil
	})
}

func (s *boltStore) Put(k, v []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put(k, v) })
}

// PutMany writes the batch in one transaction.
func (s *boltStore) PutMany(keys, values [][]byte) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		for i, k := range keys {
			if err := b.Put(k, values[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// LoadBatch copies each value: bbolt keeps the slice a Put is given until
// its transaction commits, and value reuses one buffer (until 2026-11-28 a
// batch's keys all got its last key's value; the harness's check of every
// value read found it).
func (s *boltStore) LoadBatch(keys [][]byte, value func(int) []byte) error {
	for start := 0; start < len(keys); start += 1000 {
		err := s.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucket)
			for i := start; i < min(start+1000, len(keys)); i++ {
				if err := b.Put(keys[i], append([]byte(nil), value(i)...)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
func (s *boltStore) Close() error { return s.db.Close() }

// --- LMDB: one transaction per operation ---

// lmdbStore runs each Get in a read transaction of its own, as LMDB's
// own advice for such reads goes: a transaction reset after its read and
// renewed for the next (mdb_txn_reset, mdb_txn_renew), which keeps its
// reader slot and takes no lock, rather than one begun and ended with
// env.View, which allocates, and under NoTLS takes the reader table's
// mutex to find a slot: View takes more time than a renewed transaction,
// the more so with several goroutines (docs/PERFORMANCE.md has the runs),
// so a harness on View would flatter the targets against LMDB.
// Each Put is a write transaction of its own, which LMDB cannot renew.
type lmdbStore struct {
	env   *lmdb.Env
	dbi   lmdb.DBI
	reads chan *lmdb.Txn // reset read transactions, one per goroutine that needed one
}

// readTxnsKept bounds the reset read transactions kept for renewal; a
// goroutine that finds none begins one (each holds a reader slot of the
// environment's 256 until it is aborted).
const readTxnsKept = 64

// view runs fn in a read transaction renewed for it.
func (s *lmdbStore) view(fn func(txn *lmdb.Txn) error) error {
	var txn *lmdb.Txn
	select {
	case txn = <-s.reads:
		if err := txn.Renew(); err != nil {
			txn.Abort()
			return err
		}
	default:
		var err error
		if txn, err = s.env.BeginTxn(nil, lmdb.Readonly); err != nil {
			return err
		}
		txn.RawRead = true
	}
	err := fn(txn)
	txn.Reset()
	select {
	case s.reads <- txn:
	default:
		txn.Abort()
	}
	return err
}

func openLMDB(dir string, d dataset) (store, error) {
	env, err := lmdb.NewEnv()
	if err != nil {
		return nil, err
	}
	if err := env.SetMapSize(int64(d.keys) * int64(d.valueSize+keySize+64) * 4); err != nil {
		return nil, err
	}
	if err := env.SetMaxReaders(256); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "lmdb")
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, err
	}
	if err := env.Open(path, lmdb.NoSync|lmdb.NoMetaSync|lmdb.WriteMap|lmdb.NoTLS, 0o600); err != nil {
		return nil, err
	}
	s := &lmdbStore{env: env, reads: make(chan *lmdb.Txn, readTxnsKept)}
	err = env.Update(func(txn *lmdb.Txn) (err error) { s.dbi, err = txn.OpenRoot(0); return err })
	return s, err
}

// GetMany reads the batch in one read transaction.
func (s *lmdbStore) GetMany(keys, values [][]byte) error {
	return s.view(func(txn *lmdb.Txn) error {
		for i, k := range keys {
			v, err := txn.Get(s.dbi, k)
			switch {
			case lmdb.IsNotFound(err):
				values[i] = nil
			case err != nil:
				return err
			default:
				values[i] = append(values[i][:0], v...)
			}
		}
		return nil
	})
}

func (s *lmdbStore) Get(dst, k []byte) ([]byte, bool, error) {
	var ok bool
	err := s.view(func(txn *lmdb.Txn) error {
		v, err := txn.Get(s.dbi, k)
		if lmdb.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		ok = true
		dst = append(dst, v...)
		return nil
	})
	return dst, ok, err
}

func (s *lmdbStore) Put(k, v []byte) error {
	return s.env.Update(func(txn *lmdb.Txn) error { return txn.Put(s.dbi, k, v, 0) })
}

// PutMany writes the batch in one transaction.
func (s *lmdbStore) PutMany(keys, values [][]byte) error {
	return s.env.Update(func(txn *lmdb.Txn) error {
		for i, k := range keys {
			if err := txn.Put(s.dbi, k, values[i], 0); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *lmdbStore) LoadBatch(keys [][]byte, value func(int) []byte) error {
	for start := 0; start < len(keys); start += 1000 {
		err := s.env.Update(func(txn *lmdb.Txn) error {
			for i := start; i < min(start+1000, len(keys)); i++ {
				if err := txn.Put(s.dbi, keys[i], value(i), 0); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
func (s *lmdbStore) Close() error {
	for {
		select {
		case txn := <-s.reads:
			txn.Abort()
		default:
			s.env.Close()
			return nil
		}
	}
}

// --- Redis over a unix socket (server started by run.sh) ---

type redisStore struct{ c *redis.Client }

func openRedis(string, dataset) (store, error) {
	sock := os.Getenv("BENCH_REDIS_SOCKET")
	if sock == "" {
		return nil, errSkip("BENCH_REDIS_SOCKET not set (run.sh starts redis-server)")
	}
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, Protocol: 2, PoolSize: 4,
		Dialer: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "unix", addr)
		}})
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		return nil, fmt.Errorf("redis at %s: %w", sock, err)
	}
	return &redisStore{c}, nil
}

func (s *redisStore) Get(dst, k []byte) ([]byte, bool, error) {
	v, err := s.c.Get(context.Background(), string(k)).Bytes()
	if errors.Is(err, redis.Nil) {
		return dst, false, nil
	}
	return append(dst, v...), err == nil, err
}

// GetMany is one MGET round trip.
func (s *redisStore) GetMany(keys, values [][]byte) error {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = string(k)
	}
	got, err := s.c.MGet(context.Background(), names...).Result()
	if err != nil {
		return err
	}
	for i, v := range got {
		if str, ok := v.(string); ok {
			values[i] = append(values[i][:0], str...)
		} else {
			values[i] = nil
		}
	}
	return nil
}

func (s *redisStore) Put(k, v []byte) error {
	return s.c.Set(context.Background(), string(k), v, 0).Err()
}

// PutMany is one MSET.
func (s *redisStore) PutMany(keys, values [][]byte) error {
	args := make([]any, 0, 2*len(keys))
	for i, k := range keys {
		args = append(args, string(k), string(values[i]))
	}
	return s.c.MSet(context.Background(), args...).Err()
}

// LoadBatch pipelines 1000 keys at a time: a loader would.
func (s *redisStore) LoadBatch(keys [][]byte, value func(int) []byte) error {
	ctx := context.Background()
	for start := 0; start < len(keys); start += 1000 {
		p := s.c.Pipeline()
		for i := start; i < min(start+1000, len(keys)); i++ {
			// A copy: the pipeline sends at Exec, and value reuses one buffer.
			p.Set(ctx, string(keys[i]), string(value(i)), 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}
func (s *redisStore) Close() error { return s.c.Close() }

// ServerMB is redis-server's resident memory (INFO's used_memory_rss),
// data and server alike: the memory a user pays for the store.
func (s *redisStore) ServerMB() (float64, error) {
	info, err := s.c.Info(context.Background(), "memory").Result()
	if err != nil {
		return 0, err
	}
	for l := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory_rss:"); ok {
			n, err := strconv.ParseFloat(v, 64)
			return n / (1 << 20), err
		}
	}
	return 0, errors.New("redis INFO memory: no used_memory_rss")
}

// errSkip marks a store that cannot run here; the table says why.
type errSkip string

func (e errSkip) Error() string { return string(e) }
