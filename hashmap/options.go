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
	// MaxBloatFactor is how far past its planned size the map may grow (by
	// chaining overflow tiers) before Put returns ErrFull: 2 means about
	// twice Entries. Default 2; from 1 to 1000.
	MaxBloatFactor float64
	// Segments is the number of independently locked parts, a power of two.
	// Default: about one per 1024 entries.
	Segments int
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
	// NoCreate opens only a map that exists: where Open would create one,
	// it fails instead, with an error matching fs.ErrNotExist for an
	// absent file and ErrNotReady for an empty one or one whose
	// creation did not finish (its creator died). A process that must not
	// put a map of its own sizing where it expected another's sets it.
	NoCreate bool
	// CreateNew creates the map, and fails with an error matching
	// fs.ErrExist when the file exists and is not
	// empty, a map included: of several processes creating one path at
	// once, at most one succeeds (one, unless its creation fails).
	CreateNew bool
	// Locks is how many application locks the map's lock table holds (see
	// Map.Locks). Default 0. Fixed at creation.
	Locks int
	// LockAlgorithm names the lock table's algorithm: the Name of one of
	// ipc.Algorithms(). Default "hapax-cr". Fixed at creation.
	LockAlgorithm string
	// NoChecksums skips the per-entry checksum (on by default) when
	// creating; it saves a hash of each written entry. The checksum is
	// what recovery, Check, Repair and Range tell a damaged entry by (a
	// page torn by a machine crash, a stray write); Get and the other
	// lookups do not verify it, for speed, and return such an entry's
	// bytes as they are.
	NoChecksums bool
	// NoUndo creates the map without undo records. By default a Put that
	// rewrites a value in place first copies into its segment's undo
	// record either the bytes it overwrites or those it is about to write,
	// so that a process killed in the middle of the rewrite leaves the key
	// whole, which recovery sees to: with its old value or its new one
	// (values larger than twice the average entry, or 4 KiB, are moved
	// instead when their segment has a free run for them, and otherwise
	// rewritten unsaved). Without records that key is lost instead (its entry is torn, and
	// recovery drops it); in exchange such a Put takes a little less time
	// (it writes no record), the more so the larger the value. Fixed at
	// creation; ignored for an existing file.
	NoUndo bool
	// NoPrefault skips mapping the segment headers and first tiers into the
	// process at Open. By default Open maps them up front (allocating them
	// when it creates the file), which costs time at Open in proportion to
	// the map's size and keeps page faults off later Puts and Gets.
	NoPrefault bool
	// NoHugePages maps the file with small pages only. By default the
	// mapping asks for transparent huge pages, which on a kernel and
	// filesystem that cache files in 2 MiB folios (such as ext4 on Linux
	// 6.18) spare a random Get its page walks.
	// Set it when writeback in 2 MiB units costs more than that saves.
	NoHugePages bool
	// Mode is the permission bits of a map file Open creates, set exactly,
	// whatever the umask. Zero means 0o600: the map is its creator's alone.
	// To share a map between users, give the users who write it write
	// permission (0o660 with a common group, say): every process that
	// writes needs it, recovery included. Read permission alone lets a
	// user read every entry (ReadOnly opens, mapctl get and dump) and
	// nothing more: such a user's locks on the file, flock or byte-range,
	// stop no writer and no recovery (docs/RELIABILITY.md). The companion
	// lock file (PATH-lock) that writers create is readable only by those
	// who may write the map. Ignored for an existing file.
	Mode fs.FileMode
	// MaxProcesses is how many open Maps may write to the file at once:
	// each Open that is not ReadOnly takes a slot in the file's process
	// registry (which is how survivors tell which processes died) until
	// Close, so a process that opens the map twice takes two. Open once
	// per process and share the *Map, which is safe for concurrent use.
	// Default 64. Fixed at creation.
	MaxProcesses int
	// Cache creates the map as a cache: entries may expire (PutWithTTL,
	// DefaultTTL), and a full segment evicts the entries read least
	// recently (CLOCK, per segment) instead of failing with ErrFull. A read
	// counts when it marks the entry: Get, GetInto, GetMany and Contains
	// through a writable handle do; a ReadOnly handle cannot write the
	// mark, and a PutIfAbsent that finds the key does not, so keys read
	// only through those age as if unread. Puts
	// are synchronous: a Put that returns nil is stored, until it expires
	// or is evicted. Fixed at creation; each value takes 8 more bytes.
	Cache bool
	// DefaultTTL is how long entries that Put, PutMany and PutIfAbsent
	// store in a cache map live, and those that Compute and Update create
	// (an entry they change keeps its expiry); 0 means until evicted.
	// Open refuses it (ErrNotCache) for a map that is not a cache. A choice of this
	// process; others may differ.
	DefaultTTL time.Duration
	// Now replaces the clock that expiry is measured with, in this process
	// (tests, simulations). Default time.Now.
	Now func() time.Time
	// QueueWritersLocally makes this process's writers to one segment queue
	// on a process-local token before the segment's shared lock word, so
	// that at most one of them waits on the word: the local half of lock
	// cohorting, for processes with many writing goroutines. The wait in
	// the queue counts towards LockTimeout. It is a choice of this process;
	// others may differ. Off by default: with many writing goroutines it
	// measured within the spread of runs without it, so it is not a clear
	// win (docs/PERFORMANCE.md has the runs).
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
		{"LoadTimeout", r.LoadTimeout < 0}} {
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
	if r.MaxProcesses == 0 {
		r.MaxProcesses = DefaultMaxProcesses
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
