package hashmap

import (
	"cmp"
	"fmt"
	"math/bits"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/internal/keyhash"
	"github.com/sharedmap/sharedmap/offheap"
)

// PutAll stores values[i] under keys[i] for every i, as a Put of each
// would, and says how many keys it stored and how many of them were
// absent until then (added); it replaced the values of the others. It is
// the fast way to fill a map: it stores the keys not in the slice's order
// but in the file's, segment by segment and, within a segment, in the
// order of their home runs, so that its writes sweep the file forward
// instead of jumping about it, with the lookups' cache misses overlapped
// as PutMany does; and a large batch is split at segment boundaries among
// up to GOMAXPROCS goroutines, which then never wait for each other's
// locks. A key given twice keeps the value of its last occurrence, and is
// counted as PutManyAdded counts it: added once, then replaced. Each
// key's write is atomic and visible to every process as soon as it is
// done, but the batch is not a transaction, and other processes may see
// its keys appear in any order.
//
// An error stops the batch: a *BatchError naming the lowest index of a
// key that failed, which matches what Put would return for it (ErrFull,
// ErrTooLarge, ...). The keys stored before the error are then not a
// prefix of keys: some keys after the named one may be stored, some
// before it not. Storing the same batch again is safe: it stores each
// key's last value again. values must be as long as keys. In a cache map
// each entry lives for DefaultTTL, as with Put.
func (m *Map) PutAll(keys, values [][]byte) (stored, added int, err error) {
	if len(values) != len(keys) {
		return 0, 0, fmt.Errorf("PutAll: %d values for %d keys", len(values), len(keys))
	}
	return m.putAll(keys, values, nil)
}

// putAll is PutAll, with expiries[i] the expiry of keys[i] (as stored:
// Unix ns, 0 for never) when expiries is not nil, rather than DefaultTTL's:
// a copy of a cache map keeps its entries' times.
func (m *Map) putAll(keys, values [][]byte, expiries []int64) (stored, added int, err error) {
	c, err := m.enterAny(true)
	if err != nil {
		return 0, 0, err
	}
	defer c.Leave()
	// Rounds of at most roundKeys keys (see there): a key given twice
	// keeps its last value across rounds too, a later round storing it
	// after.
	for lo := 0; lo < len(keys); lo += roundKeys {
		hi := min(lo+roundKeys, len(keys))
		var exp []int64
		if expiries != nil {
			exp = expiries[lo:hi]
		}
		s, a, err := m.putAllRound(keys[lo:hi], values[lo:hi], exp, lo)
		stored, added = stored+s, added+a
		if err != nil {
			return stored, added, err
		}
	}
	return stored, added, nil
}

// putAllRound is one round of PutAll: keys, whose first is keys[base] of
// the call's.
func (m *Map) putAllRound(keys, values [][]byte, expiries []int64, base int) (stored, added int, err error) {
	sc := m.putAllScratch(len(keys))
	defer m.putAllBufs.Put(sc)
	items := sc.sortBySlot(keys, m.table.Layout().Segments)
	parts := putAllParts(len(items))
	if parts == 1 {
		p := putAllPart{items: items}
		m.putAllPart(&p, keys, values, expiries, nil)
		return p.result(base)
	}
	// Cut items into parts of about equal length, each moved on to the
	// next segment boundary, so that no segment is in two parts (and a
	// part that the one before took over entirely is empty).
	ps := make([]putAllPart, parts)
	var stop atomic.Bool
	// A part's panic (a fault on the file's pages) is the caller's, as a
	// Put's would be, once every part has stopped: not the end of the
	// process, nor a return while other parts still write. The parts'
	// goroutines fault as the caller's does (debug.SetPanicOnFault, which
	// is per goroutine).
	panicOnFault := debug.SetPanicOnFault(false)
	debug.SetPanicOnFault(panicOnFault)
	run := func(p *putAllPart) {
		defer func() {
			if r := recover(); r != nil {
				p.panicked = r
				stop.Store(true)
			}
		}()
		m.putAllPart(p, keys, values, expiries, &stop)
	}
	var wg sync.WaitGroup
	from := 0
	for i := range ps {
		to := max(len(items)*(i+1)/parts, from)
		for to > from && to < len(items) && items[to].hash&m.segMask == items[to-1].hash&m.segMask {
			to++
		}
		ps[i].items = items[from:to]
		from = to
		if i == len(ps)-1 {
			run(&ps[i]) // this goroutine's share
			break
		}
		wg.Go(func() {
			debug.SetPanicOnFault(panicOnFault)
			run(&ps[i])
		})
	}
	wg.Wait()
	lowest := -1 // the part whose failed key has the lowest index
	for i := range ps {
		if ps[i].panicked != nil {
			panic(ps[i].panicked)
		}
		stored, added = stored+ps[i].stored, added+ps[i].added
		if ps[i].err != nil && (lowest < 0 || ps[i].failed < ps[lowest].failed) {
			lowest = i
		}
	}
	if lowest >= 0 {
		_, _, err = ps[lowest].result(base)
	}
	return stored, added, err
}

// putAllPart is what one goroutine of PutAll stores (items, in order) and
// what it did.
type putAllPart struct {
	items         []putAllItem
	stored, added int
	failed        uint32 // index of the key that failed, in the round
	err           error
	panicked      any // what the part panicked with
}

// result is the part's counts and error, the error naming the key's index
// in the call (base is the round's first).
func (p *putAllPart) result(base int) (stored, added int, err error) {
	if p.err != nil {
		err = &BatchError{Op: "PutAll", Index: base + int(p.failed), Err: p.err}
	}
	return p.stored, p.added, err
}

// putAllPart stores p's items in their order, getManyBatch at a time with
// their lines requested first (segment.Table.Prefetch), as PutMany does,
// each with its expiry in expiries (nil: DefaultTTL's). It stops at its
// first error, and before each batch once stop is set (by the part that
// failed first), setting it in turn.
func (m *Map) putAllPart(p *putAllPart, keys, values [][]byte, expiries []int64, stop *atomic.Bool) {
	var hashes [getManyBatch]uint64
	var batch, vals [getManyBatch][]byte
	for start := 0; start < len(p.items); start += getManyBatch {
		if stop != nil && stop.Load() {
			return
		}
		items := p.items[start:min(start+getManyBatch, len(p.items))]
		// The keys and values lie in the caller's memory in the slice's
		// order, which is not this one: each is a miss of its own, and
		// the store of a key reads it only after the one before, so
		// their lines are requested here, together.
		for i, it := range items {
			hashes[i], batch[i], vals[i] = it.hash, keys[it.index], values[it.index]
			offheap.PrefetchForRead(batch[i])
			offheap.PrefetchForRead(vals[i][:min(len(vals[i]), putAllPrefetchValue)])
		}
		m.table.Prefetch(hashes[:len(items)], batch[:len(items)])
		expiry := m.expiry(m.opts.DefaultTTL) // per batch: a long call must not age later keys
		for i, it := range items {
			exp := expiry
			if expiries != nil {
				exp = expiries[it.index]
			}
			inserted, err := m.putBatched(hashes[i], batch[i], vals[i], exp)
			if err != nil {
				p.failed, p.err = it.index, err
				if stop != nil {
					stop.Store(true)
				}
				return
			}
			p.stored++
			if inserted {
				p.added++
			}
		}
	}
}

// putAllPrefetchValue bounds the bytes of a value putAllPart requests
// ahead: the rest of a long value streams in as its copy reads it.
const putAllPrefetchValue = 256

// putAllItem is one key of a PutAll round: its hash and its index.
type putAllItem struct {
	hash  uint64
	index uint32
}

// roundKeys is how many keys a round of PutAll sorts and stores. In the
// file's order, a round reads the caller's keys and values, and their
// slice headers, in no order of theirs: the headers of a round this size
// stay in the CPU's caches, where those of a batch of millions of keys
// were a miss each, which cost more than the longer sweep saved. The
// scratch memory a round sorts in stays small too, and its indices fit
// putAllItem's 32 bits.
const roundKeys = 64 << 10

// putAllParallel is how many keys a PutAll part is given at least: a
// goroutine's start and the wait for it take microseconds, a part of this
// many keys milliseconds. Where between the split starts to pay is not
// measured yet: BenchmarkPutAllBatch, on a machine with a core to spare,
// shows it.
const putAllParallel = 16 << 10

// putAllParts is how many goroutines store n keys.
func putAllParts(n int) int {
	return max(1, min(runtime.GOMAXPROCS(0), n/putAllParallel))
}

// putAllScratch is a PutAll round's working memory, kept for the next
// call (Map.putAllBufs): the keys' items, and the counts of the sort.
type putAllScratch struct {
	sorted []putAllItem
	counts []uint32
}

// putAllScratch returns scratch for a round of n keys.
func (m *Map) putAllScratch(n int) *putAllScratch {
	sc, _ := m.putAllBufs.Get().(*putAllScratch)
	if sc == nil {
		sc = new(putAllScratch)
	}
	if cap(sc.sorted) < n {
		sc.sorted = make([]putAllItem, n)
	}
	sc.sorted = sc.sorted[:n]
	return sc
}

// sortBySlot returns the items of keys (hash and index) in the order a
// PutAll stores them, in a map of segments segments: by segment, then by
// slot tag (whose high bits pick the home run, so that the entries are
// written in address order), then by index, so that a key given twice
// is stored last with its last value.
//
// It is a counting sort on the sort key's top bits, one bucket for about
// every putAllBucket keys, then an insertion sort of each bucket, stable:
// a comparison sort of a large batch cost a good part of what storing
// it does, this one a few percent. Both
// passes hash every key, rather than keeping the hashes in a second array
// as large as the sorted one.
func (sc *putAllScratch) sortBySlot(keys [][]byte, segments int64) []putAllItem {
	segBits := uint(bits.TrailingZeros64(uint64(segments)))
	keyBits := segBits + 32
	b := min(uint(bits.Len(uint(len(keys)/putAllBucket))), keyBits, putAllMaxBucketBits)
	shift := keyBits - b
	if cap(sc.counts) < 1<<b+1 {
		sc.counts = make([]uint32, 1<<b+1)
	}
	counts := sc.counts[:1<<b+1]
	clear(counts)
	for _, k := range keys {
		counts[slotOrder(keyHash(k), segBits)>>shift+1]++
	}
	for i := 1; i < len(counts); i++ {
		counts[i] += counts[i-1]
	}
	sorted := sc.sorted
	for i, k := range keys {
		h := keyHash(k)
		at := &counts[slotOrder(h, segBits)>>shift]
		sorted[*at] = putAllItem{hash: h, index: uint32(i)}
		*at++
	}
	// counts[i] is now where bucket i ends.
	less := func(a, b putAllItem) int {
		return cmp.Compare(slotOrder(a.hash, segBits), slotOrder(b.hash, segBits))
	}
	from := uint32(0)
	for _, to := range counts[:1<<b] {
		bucket := sorted[from:to]
		from = to
		if len(bucket) > putAllInsertionMax {
			slices.SortStableFunc(bucket, less)
			continue
		}
		for i := 1; i < len(bucket); i++ {
			for j := i; j > 0 && less(bucket[j], bucket[j-1]) < 0; j-- {
				bucket[j], bucket[j-1] = bucket[j-1], bucket[j]
			}
		}
	}
	return sorted
}

// slotOrder is the sort key of a hash in a map whose segments take the
// hash's low segBits bits: its segment, then its slot tag.
func slotOrder(h uint64, segBits uint) uint64 {
	return (h&(1<<segBits-1))<<32 | uint64(uint32(h>>segBits))
}

// keyHash is a key's hash, as Put computes it (Put writes it out, to
// stay small enough to inline).
func keyHash(key []byte) uint64 {
	if h := keyhash.Inline(key); h != 0 {
		return h
	}
	return xxhash.Sum64(key)
}

// putAllBucket is about how many keys sortBySlot's buckets hold on
// average, few enough for an insertion sort; putAllMaxBucketBits bounds
// the buckets' number (1<<20 counts: 4 MiB); a bucket larger than
// putAllInsertionMax (many keys in one segment's slot range, or one key
// given many times) is sorted by a stable merge sort instead.
const (
	putAllBucket        = 8
	putAllMaxBucketBits = 20
	putAllInsertionMax  = 64
)
