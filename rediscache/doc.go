// Package rediscache keeps one cache of Redis (or Valkey) keys per host, in
// a sharedmap file that every process of the host maps, kept fresh from
// Redis by one tracking connection per host.
//
// Each process opens the cache on the same file:
//
//	c, err := rediscache.Open(ctx, rediscache.Options{
//		Path:         "/dev/shm/redis.cache",
//		ClientOption: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
//		Prefixes:     []string{"user:", "product:"},
//	})
//	defer c.Close()
//	v, err := c.Get(ctx, "user:42")          // errors.Is(err, rediscache.ErrNotFound) when absent
//	err = c.Set(ctx, "user:42", v, time.Hour) // through Redis; read back host-wide at once
//
// A hit costs a read of the shared map and no round trip; the entries are
// stored once per host instead of once per process, off the Go heap.
//
// # The guarantee
//
// A hit never returns a value older than a write that completed more than
// MaxStaleness before the read began, through a tracker crash or stall,
// a Redis restart and a network partition; writes made through the package
// (Set, Del) are read back by every process of the host once they return.
//
// It holds because of how the pieces below fit. The tracker applies each
// invalidation before it publishes a watermark past the write's completion,
// and a read serves an entry only while the watermark is within
// MaxStaleness of now; an entry read is then either filled after the
// invalidation (reading Redis after the write), or of a newer epoch, and an
// entry of an epoch whose tracker may have lost invalidations is never
// served. When the watermark is older (the tracker is dead, stopped, or cut
// off from Redis), reads go to Redis instead: a stale refusal in Stats.
//
// # How it works
//
// One process per host is the tracker, elected through a control record in
// the map: every process that may track checks it each PingInterval and
// takes over when the tracker has exited, died, or left the watermark
// unpublished for twice MaxStaleness. The tracker holds its own RESP3
// connection with CLIENT TRACKING ON BCAST for the Prefixes, deletes the
// keys Redis names in invalidation messages, in batches, and pings every
// PingInterval: at each PONG it publishes as the watermark the time it sent
// the PING before, up to which it has seen every invalidation. A flush
// (FLUSHALL, FLUSHDB), a lost connection or a new tracker starts a new
// epoch, which every entry carries: entries of older epochs are misses.
//
// A miss fills the entry through the map's GetOrLoad: of the processes
// that miss one key at once, one reads Redis and the others wait for its
// value (for FillTimeout at most, then read Redis themselves). The filler
// reads the epoch first, then the value and its remaining TTL in one
// transaction, and the entry is stored only if no write or invalidation of
// the key removed the fill's token meanwhile. An entry lives no longer than
// the key's Redis TTL, nor than MaxTTL; a key absent in Redis is remembered
// as absent for NegativeTTL (default: not at all).
//
// Keys outside Prefixes pass through: Get reads them from Redis every time
// and the map never holds them (Stats.PassThrough counts those reads).
//
// # Trade-offs
//
//   - BCAST tracking sends every write under the prefixes to every host's
//     tracker, whether or not the host caches the key: choose prefixes
//     narrowly, for keys that are read far more often than written.
//     Prefixes may not overlap (Redis refuses it).
//   - A reconnect of the tracker, a change of tracker and a flush drop every
//     entry at once: a burst of misses follows, which the fills' single
//     flight keeps to one Redis read per key per host. A change of a
//     cluster's topology reconnects, so it flushes too.
//   - While no tracker is fresh (a partition, Redis down, the tracker
//     stopped), every read goes to Redis.
//   - The processes sharing a file must share a PID namespace: a standby
//     tells a dead tracker by its pid.
//   - The tracker follows the one server at ClientOption.InitAddress[0];
//     Open refuses a client that talks to several nodes (Redis Cluster),
//     whose invalidations one connection would not all see.
//
// The map is a hashmap cache map (Options.Map sizes it when it is created);
// its entries are the Redis keys, each value a 16-byte header (epoch, kind)
// and the Redis value. Linux only, as hashmap is.
package rediscache
