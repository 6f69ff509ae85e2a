package hashmap

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/sharedmap/sharedmap/ipc"
	"github.com/sharedmap/sharedmap/segment"
)

// Options size a new map and tune how this process uses it. Zero fields take
// the defaults below. Sizing fields (Entries, AverageKeySize,
// AverageValueSize, MaxBloatFactor, Segments) only matter when the file is
// created; an existing file keeps its own, and non-zero sizing fields that
// disagree with it make Open fail with ErrIncompatible.
type Options struct {
	// Entries is how many entries the map is sized for. Default 65536; at
	// most 2^40, and no more than keep the file within 64 TiB (Open says
	// how many do).
	Entries int
	// AverageKeySize and AverageValueSize are the expected encoded sizes in
	// bytes; entries of other sizes are fine. Defaults 32 and 256. Each is
	// at most 2^29, and the two with an entry's 16-byte header (24 in a
	// cache) at most 1 GiB, the largest entry a tier takes: beyond it every
	// Put of the planned sizes would fail with ErrTooLarge.
	AverageKeySize   int
	AverageValueSize int
	// MaxBloatFactor sizes the overflow pool the file starts with: about
	// how far past Entries the map grows (by chaining overflow tiers)
	// before the file must grow, or, for a map that does not grow (a
	// cache, or MaxSize NoGrowth), before Put returns ErrFull: 2 means
	// about twice Entries. Default 2; from 1 to 1000.
	MaxBloatFactor float64
	// MaxSize bounds the file of a map that is not a cache: when its
	// overflow pool is used up, a writer lengthens the file by as many
	// tiers again as it holds, up to MaxSize bytes, and every process
	// sees the new tiers at once; Put returns ErrFull only once the file
	// is MaxSize bytes long, or the disk is full. Zero means
	// DefaultMaxGrowth times the size the file is created with, at least
	// MinDefaultMaxSize and at most MaxDefaultMaxSize, plus the first
	// tiers of the segments it may split into (see NoSplits); NoGrowth keeps the
	// file at the size it is created with. Each process that opens the
	// map reserves MaxSize bytes of address space for it (not memory:
	// nothing past the file's end is touched). Fixed at creation. A map
	// that holds many times Entries, past what its splits (see NoSplits)
	// absorb, reads and writes more slowly than one created for its size
	// (its segments chain more tiers; mapctl stats shows the tiers per
	// segment): Resize rewrites it for its entries.
	MaxSize int64
	// Segments is the number of independently locked parts, a power of two.
	// Default: about one per 1024 entries.
	Segments int
	// NoSplits creates a map that keeps the segments it is created with.
	// By default a store map that grows also splits its segments as it
	// fills (linear hashing, up to 4 times Segments and at least 1024,
	// their first tiers within half of MaxSize),
	// so that a map holding many times Entries reads and writes about as
	// fast as one created for its size. Splits cost address space before
	// they happen: the file is laid out, as holes, for the first tiers of
	// every segment it may split into, and each process's registry slot
	// has a ledger word per such segment. Caches and maps that do not
	// grow never split. Fixed at creation.
	NoSplits bool
	// LockTimeout is how long an operation waits for a segment lock before
	// it looks for a dead holder to release (see Recover) and waits once
	// more: a lock a live process keeps ends the operation in ErrTimeout
	// after up to twice LockTimeout. Waits for the lock table's locks are
	// bounded by it too: see LockTable's Lock, LockTimeout and TryLock.
	// Default 10s.
	LockTimeout time.Duration
	// ReadOnly maps the file read-only: Get, Range and Stats work, writes
	// return ErrReadOnly. The file must exist.
	ReadOnly bool
	// NoCreate opens only a map that exists: where Open would create one it
	// fails, matching fs.ErrNotExist for an absent file and ErrNotReady for
	// an empty one or one whose creator died before finishing.
	NoCreate bool
	// CreateNew creates the map, failing (fs.ErrExist) when the file exists
	// and is not empty: of several processes creating one path, at most one
	// succeeds.
	CreateNew bool
	// Locks is how many application locks the map's lock table holds (see
	// Map.Locks). Default 0. Fixed at creation.
	Locks int
	// LockAlgorithm names the lock table's algorithm: the Name of one of
	// ipc.Algorithms(). Default "hapax-cr". Fixed at creation.
	LockAlgorithm string
	// NoChecksums creates the map without per-entry checksums, saving a hash
	// per write. The checksum is what recovery, Check, Repair, Range and
	// GetChecked tell a damaged entry by; other lookups return its bytes
	// unverified.
	NoChecksums bool
	// NoUndo creates the map without undo records. By default a Put that
	// rewrites a value in place goes through its segment's undo record, so
	// that a process killed in the middle leaves the key with its old value
	// or its new one; without records that key is lost instead, and such a
	// Put takes a little less time. (Values larger than twice the average
	// entry, or 4 KiB, are moved when their segment has room, else rewritten
	// unsaved.) Fixed at creation.
	NoUndo bool
	// NoPrefault skips mapping the segment headers and first tiers in at
	// the Open that creates the map. Mapping them (the default) costs that
	// Open time in proportion to the map's size and keeps page faults off
	// the first Puts and Gets. An Open of an existing map maps in only the
	// segment headers and counters (unless NoPrefault), so that it takes
	// about the same time whatever the map's size; the tiers come in as
	// they are used.
	NoPrefault bool
	// NoHugePages maps the file with small pages only, instead of asking for
	// transparent huge pages (which spare a random Get page walks where the
	// filesystem caches files in 2 MiB folios). Set it when writeback in
	// 2 MiB units costs more than that saves.
	NoHugePages bool
	// Mode is the permission bits of a map file Open creates, whatever the
	// umask; zero means 0o600. Every process that writes, recovery included,
	// needs write permission (0o660 with a common group, say); read
	// permission alone lets a user read every entry, and its locks on the
	// file stop no writer and no recovery. The PATH-lock file writers create
	// is readable only by those who may write. Ignored for an existing file.
	Mode fs.FileMode
	// MaxProcesses is how many open Maps may write to the file at once: each
	// writable Open takes a slot in the file's process registry until Close
	// (a process opening the map twice takes two). At most 65536. Fixed at
	// creation: an existing file's count cannot grow in place (copy its
	// entries into a new map: mapctl dump, mapctl load).
	//
	// Zero means DefaultMaxProcesses (4096), or fewer, never fewer than
	// 64, where that many slots would make the registry more than a fifth
	// of the file: a slot holds a few words per segment, so in a map of
	// very many segments 4096 slots would be gigabytes. The registry is sparse:
	// a slot takes disk blocks (or memory, on tmpfs) only once a process
	// claims it, and liveness scans read only the slots ever claimed, so a
	// large count costs file size and address space, not disk or time.
	MaxProcesses int
	// Cache creates the map as a cache: entries may expire (PutWithTTL,
	// DefaultTTL), and a full segment evicts the entries read least recently
	// (CLOCK, per segment) instead of failing with ErrFull. Get, GetInto,
	// GetMany and Contains through a writable handle mark an entry read;
	// ReadOnly handles and a PutIfAbsent that finds the key do not. A Put
	// that returns nil is stored until it expires or is evicted. Fixed at
	// creation; each value takes 8 more bytes.
	Cache bool
	// DefaultTTL is how long entries that Put, PutMany and PutIfAbsent store
	// in a cache map live, and those Compute and Update create; 0 means
	// until evicted. ErrNotCache for a map that is not a cache. A choice of
	// this process.
	DefaultTTL time.Duration
	// Now replaces the clock that expiry is measured with, in this process
	// (tests, simulations). Default time.Now.
	Now func() time.Time
	// QueueWritersLocally makes this process's writers to one segment queue
	// on a process-local token before the segment's shared lock word (the
	// local half of lock cohorting); the wait counts towards LockTimeout.
	// A choice of this process. Off by default: it is not a clear win.
	QueueWritersLocally bool
	// LoadTimeout bounds how long GetOrLoad waits for a load that another
	// goroutine or process runs: a load in flight that long is taken over,
	// and the waiter loads itself. Default 5s. A choice of this process.
	LoadTimeout time.Duration
}

// Defaults for zero Options fields.
const (
	DefaultEntries          = 1 << 16
	DefaultAverageKeySize   = 32
	DefaultAverageValueSize = 256
	DefaultMaxBloatFactor   = 2.0
	DefaultLockTimeout      = 10 * time.Second
	DefaultLoadTimeout      = 5 * time.Second
)

func (o *Options) withDefaults() (Options, error) {
	var r Options
	if o != nil {
		r = *o
	}
	var negative []string
	for _, f := range []struct {
		name string
		neg  bool
	}{{"Entries", r.Entries < 0}, {"AverageKeySize", r.AverageKeySize < 0}, {"AverageValueSize", r.AverageValueSize < 0},
		{"MaxBloatFactor", r.MaxBloatFactor < 0}, {"Segments", r.Segments < 0}, {"LockTimeout", r.LockTimeout < 0},
		{"Locks", r.Locks < 0}, {"MaxProcesses", r.MaxProcesses < 0}, {"DefaultTTL", r.DefaultTTL < 0},
		{"LoadTimeout", r.LoadTimeout < 0}, {"MaxSize", r.MaxSize < NoGrowth}} {
		if f.neg {
			negative = append(negative, f.name)
		}
	}
	if len(negative) > 0 {
		return r, fmt.Errorf("%w: %s must not be negative", ErrBadOptions, strings.Join(negative, ", "))
	}
	if r.CreateNew && (r.NoCreate || r.ReadOnly) {
		return r, fmt.Errorf("%w: CreateNew with NoCreate or ReadOnly", ErrBadOptions)
	}
	if r.Entries == 0 {
		r.Entries = DefaultEntries
	}
	if r.AverageKeySize == 0 {
		r.AverageKeySize = DefaultAverageKeySize
	}
	if r.AverageValueSize == 0 {
		r.AverageValueSize = DefaultAverageValueSize
	}
	if r.MaxBloatFactor == 0 {
		r.MaxBloatFactor = DefaultMaxBloatFactor
	}
	if r.LockAlgorithm == "" {
		r.LockAlgorithm = ipc.DefaultAlgorithm
	}
	if r.LockTimeout == 0 {
		r.LockTimeout = DefaultLockTimeout
	}
	if r.LoadTimeout == 0 {
		r.LoadTimeout = DefaultLoadTimeout
	}
	if r.MaxProcesses > maxProcesses {
		return r, fmt.Errorf("%w: MaxProcesses %d is more than %d", ErrBadOptions, r.MaxProcesses, maxProcesses)
	}
	return r, nil
}

// withLargestEntries adds to err, if it refuses o as too large for the
// format (segment.ErrOversize), the largest Entries accepted with o's other
// fields, found by bisection: the file grows with Entries.
func withLargestEntries(o Options, err error) error {
	if !errors.Is(err, segment.ErrOversize) {
		return err
	}
	fits := func(n int) bool {
		o.Entries = n
		_, _, _, err := planLayout(o)
		return err == nil
	}
	lo, hi := max(1, o.Segments), o.Entries // fits(lo) is checked; hi does not fit
	if lo >= hi || !fits(lo) {
		return fmt.Errorf("%w; no Entries is accepted with these options: lower Segments or MaxBloatFactor or the average sizes", err)
	}
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return fmt.Errorf("%w; the largest Entries accepted with these options is %d", err, lo)
}
