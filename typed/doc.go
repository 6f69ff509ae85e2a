// Package typed puts Go types on a hashmap.Map, whose keys and values are
// bytes, so that callers stop hand-writing the encoding at every call site
// and every process agrees on it by construction.
//
// # Overview
//
// A Codec turns a type into bytes and back. The package has codecs for
// strings and byte slices (stored as they are, so typed and raw users of a
// map see the same bytes), fixed-width little-endian numbers and bools,
// types with MarshalBinary/UnmarshalBinary, and JSON for the rest. New
// pairs a map with a key codec and a value codec:
//
//	raw, err := hashmap.Open("/dev/shm/users.map", &hashmap.Options{Entries: 100_000})
//	if err != nil { ... }
//	defer raw.Close()
//	users := typed.New(raw, typed.Int64(), typed.JSON[User]())
//	err = users.Put(42, User{Name: "ada"})
//	u, err := users.Get(42) // errors.Is(err, hashmap.ErrNotFound) when absent
//
// Get and Put encode into pooled buffers, so with fixed-width numbers they
// allocate nothing, and with strings only the string Get returns; JSON
// allocates on every call (TestAllocs holds the counts).
//
// # Near-cache
//
// NewCached adds a process-local cache of decoded values, for value types
// that are expensive to decode. A cached value is served only while
// hashmap.Map.Unchanged reports it current, so a process never returns a
// value older than a write it has observed complete. Values it returns are
// shared: treat them as read-only.
//
// # Concurrency
//
// A Map is as safe for concurrent use as the hashmap.Map it wraps, by
// goroutines and by processes, and it adds no lock: each call is one call
// of the raw map. Compute keeps its atomicity across processes.
//
// # Caveats
//
//   - The file records no types. Every process must use the same codecs
//     for a map; a mismatch shows up as errors matching ErrDecode (fixed
//     widths catch most), or, for String and Bytes, which accept any
//     bytes, as wrong values. Changing a codec means migrating the file.
//   - Key codecs must give equal keys equal bytes. Float64 keys are
//     compared by bits: 0 and -0 are different keys (see Float64).
//   - Decode errors never panic and never change the map; Delete removes
//     an entry that no longer decodes.
//   - The hashmap caveats apply unchanged: do not fork after Open, use a
//     local filesystem, keep Compute's fn short and do not call the map
//     from it.
package typed
