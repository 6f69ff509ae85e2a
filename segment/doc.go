// Package segment is the implementation beneath package hashmap: the
// segments of a sharedmap file and the table of all of them. Its API
// serves hashmap and cmd/mapctl and carries no compatibility promise;
// programs use hashmap (or typed) instead.
//
// A segment holds a header (its lock word, the modification sequence that
// lock-free readers validate with, entry and chunk counts, the link to its
// overflow tiers), its hash slots (tag and chunk, linear probing,
// backward-shift deletion), its entry space (chunks taken from a bitmap;
// an entry's header, key and value, with a checksum) and the tiers it
// links from the file's overflow pool up to the bloat limit. The package
// finds, inserts, rewrites in place or moves, and removes entries under
// the segment's lock (rwulock), reads them without it, compacts a
// fragmented tier, evicts in cache maps, and checks, recovers and
// rebuilds a segment a dead process or damage left wrong. It works on a
// mapped region it is handed (offheap) and knows nothing of the map's API
// above it.
//
// docs/FORMAT.md gives every byte of the layout; Layout is its record in
// the file.
package segment
