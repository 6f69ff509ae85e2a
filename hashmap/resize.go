package hashmap

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sharedmap/sharedmap/internal/registry"
	"github.com/sharedmap/sharedmap/offheap"
	"github.com/sharedmap/sharedmap/segment"
)

// ResizeOptions say how Resize lays out a map's new file. The zero value
// sizes it for the entries the map holds.
type ResizeOptions struct {
	// Entries is how many entries the new file is sized for; zero means
	// the larger of the old file's Entries and the entries it holds.
	Entries int
	// MaxSize bounds the new file's growth as Options.MaxSize does: zero
	// for the default bound of a file of the new size, NoGrowth for none,
	// else bytes. Ignored for a cache map, which evicts instead.
	MaxSize int64
	// Splits and NoSplits say whether the new file's segments split as
	// it fills (Options.NoSplits); neither keeps the old file's choice: a
	// store map that grows and does not split (made with NoSplits, by a
	// build from before splits, or with a MaxSize too small for them)
	// has a new file that does not split either, and any other map one
	// that splits where it grows. A new file that does not grow (a
	// cache, MaxSize NoGrowth) never splits, whatever Splits says. Both
	// is an error matching ErrBadOptions.
	Splits, NoSplits bool
	// Progress, if set, is called from Resize's goroutine after each
	// batch of entries it copies, with the entries copied so far and
	// the entries the map holds.
	Progress func(done, total int64)
}

// ResizeResult says what Resize did.
type ResizeResult struct {
	// Entries is how many entries the new file holds: every entry the
	// old one held, but for Expired.
	Entries int
	// Expired counts the entries of a cache map that expired while they
	// were copied, and were left out.
	Expired int
	// Old and New are the old file and the new one.
	Old, New FileShape
	// Took is the time from the call to the new file in place.
	Took time.Duration
}

// FileShape is how a map file is laid out and how far it has grown.
type FileShape struct {
	Capacity         int   // the entries it is sized for (Options.Entries)
	AverageKeySize   int   // bytes (Options.AverageKeySize)
	AverageValueSize int   // bytes (Options.AverageValueSize)
	Segments         int   // independently locked parts
	TiersInUse       int   // first tiers and linked overflow tiers
	GrowthSteps      int   // times the file has grown
	FileSize         int64 // bytes
	MaxFileSize      int64 // the bytes it may grow to (FileSize if it does not grow)
	Grows            bool  // the file grows when its overflow pool is used up (Options.MaxSize)
	Stamps           bool  // tier headers carry stamps, which files from before them lack
	Splits           bool  // segments split as the file fills (Options.NoSplits)
}

// Resize rewrites the map at path into a new file laid out for the
// entries it holds, and puts the new file in the old one's place. A map
// that grew online (Options.MaxSize) keeps the segments it was created
// with, so its lookups walk chains of more tiers the more it grew; a map
// rewritten for its entries is as fast as one created for them. The new
// file is in the current format (growth and tier stamps, which files made
// before them lack), and keeps what the old one was made with: cache or
// not, checksums, undo records, MaxBloatFactor, whether its segments
// split (unless opts says: see ResizeOptions.Splits), the application locks and
// their algorithm, the process slots, the permission bits (and the owner,
// where this process may give it). It is sized by opts (nil: for the
// entries held): Entries, and AverageKeySize and AverageValueSize the
// means of the entries held (the old ones for an empty map), Segments
// derived from Entries. Every entry is copied, a cache map's with its
// expiry; entries of a cache map that expire during the copy are left
// out (ResizeResult.Expired).
//
// It needs the map to itself for its whole run: it holds the file's
// creation lock and the registry's recovery lock, under which every
// writer joins, and refuses with an error matching ErrNotAlone while any
// process has the map open for writing, or died with it open and has not
// been recovered from (mapctl recover), or while another Resize of the
// map runs (at once, naming its process), and with the error of Range while
// entries are damaged or a segment cannot be read (mapctl check, repair). A writer's Open
// that begins meanwhile waits for the recovery lock (up to three times its
// LockTimeout), then opens the new file. Processes that only read take no
// part in this: one that has the old file open keeps reading it, and it
// no longer changes; readers are not registered, so Resize cannot tell
// whether there are any. They see the new file once they open the path
// again.
//
// It writes the new file beside the old one, at path + ".resize-tmp",
// syncs it and renames it over path, then syncs the directory (where
// path is a symbolic link, beside and over the file it leads to). Killed at
// any point, it leaves path opening with every entry: the old file until
// the rename, the complete new one from then on; a leftover temporary
// file is removed by the next Resize. On a full disk it removes the
// temporary file and returns an error matching ErrNoSpace; the old file
// is untouched.
func Resize(path string, opts *ResizeOptions) (ResizeResult, error) {
	return ResizeContext(context.Background(), path, opts)
}

// ResizeContext is Resize that stops when ctx is done, up to the rename
// that puts the new file in place: it removes the temporary file and
// returns an error matching ctx.Err(), with the old file as it was.
func ResizeContext(ctx context.Context, path string, opts *ResizeOptions) (ResizeResult, error) {
	start := time.Now()
	var ro ResizeOptions
	if opts != nil {
		ro = *opts
	}
	if ro.Entries < 0 || ro.MaxSize < NoGrowth {
		return ResizeResult{}, fmt.Errorf("resize %s: %w: Entries %d, MaxSize %d", path, ErrBadOptions, ro.Entries, ro.MaxSize)
	}
	if ro.Splits && ro.NoSplits {
		return ResizeResult{}, fmt.Errorf("resize %s: %w: Splits and NoSplits together: give one", path, ErrBadOptions)
	}
	// A symbolic link stays one: the new file goes where the map is.
	target := path
	if real, err := filepath.EvalSymlinks(path); err == nil {
		target = real
	}
	f, err := offheap.OpenExclusive(target, segment.RecordGrowth)
	if errors.Is(err, offheap.ErrRewriting) {
		return ResizeResult{}, alsoIs{fmt.Errorf("resize %s: another resize of it is running; try again once it has finished: %w", path, err), ErrNotAlone}
	}
	if err != nil {
		return ResizeResult{}, classifyOpenError(err)
	}
	defer f.Close() // after release: the lock file's locks go with it
	release, err := aloneWith(f, "the map is rewritten", true)
	if err != nil {
		return ResizeResult{}, classifyOpenError(fmt.Errorf("resize %s: %w", path, err))
	}
	defer release()
	testResizeStep("locked")
	res, err := resizeLocked(ctx, f, target, ro)
	if err != nil {
		return ResizeResult{}, fmt.Errorf("resize %s: %w", path, err)
	}
	res.Took = time.Since(start)
	return res, nil
}

// resizeLocked is Resize once it holds f's locks.
func resizeLocked(ctx context.Context, f *offheap.File, path string, ro ResizeOptions) (ResizeResult, error) {
	var res ResizeResult
	old, fl, err := readOnlyOver(f)
	if err != nil {
		return res, classifyOpenError(err)
	}
	res.Old = shapeOf(old)
	held, err := measure(old)
	if err != nil {
		return res, err
	}
	testResizeStep("measured")
	st, err := os.Stat(path)
	if err != nil {
		return res, err
	}
	o := resizedOptions(old.layout, fl, held, ro, st.Mode().Perm())
	tmp := path + resizeTmpSuffix
	removeTemp := func() {
		_ = os.Remove(tmp)
		_ = os.Remove(offheap.LockFilePath(tmp))
	}
	removeTemp() // a killed Resize's; we hold the lock it held
	nm, err := Open(tmp, &o)
	if err != nil {
		removeTemp()
		return res, fmt.Errorf("create the new file: %w", err)
	}
	testResizeStep("created")
	res.Entries, res.Expired, err = copyEntries(ctx, old, nm, held.entries, ro.Progress)
	if err == nil {
		res.New = shapeOf(nm)
		err = nm.Sync()
	}
	if cerr := nm.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		removeTemp()
		return res, err
	}
	testResizeStep("copied")
	if err := finishFile(tmp, st); err != nil {
		removeTemp()
		return res, err
	}
	testResizeStep("synced")
	if err := ctx.Err(); err != nil {
		removeTemp()
		return res, err
	}
	if err := os.Rename(tmp, path); err != nil {
		removeTemp()
		return res, err
	}
	testResizeStep("renamed")
	_ = os.Remove(offheap.LockFilePath(tmp)) // the path's own lock file serves the new file
	return res, syncDir(filepath.Dir(path))
}

// resizeTmpSuffix names the file Resize writes beside the map.
const resizeTmpSuffix = ".resize-tmp"

// readOnlyOver is the read-only Map over f, which OpenExclusive opened,
// for Resize to read: no registry slot, no lock table, nothing written.
func readOnlyOver(f *offheap.File) (*Map, fileLayout, error) {
	fl, err := decodeFileLayout(f, 0, Options{}, nil)
	if err != nil {
		return nil, fl, err
	}
	o, err := (&Options{ReadOnly: true}).withDefaults()
	if err != nil {
		return nil, fl, err
	}
	tb, err := segment.Open(f.Region, fl.segments, nil, o.LockTimeout)
	if err != nil {
		return nil, fl, err
	}
	tb.SetDataAt(f.DataAt)
	if err := tb.SetGrowth(f.Growth, f.Length(), f.Refresh, nil); err != nil {
		return nil, fl, err
	}
	m := &Map{file: f, table: tb, layout: tb.Layout(), segMask: uint64(tb.Layout().Segments - 1), opts: o, readOnly: true, lockLayout: fl.locks}
	if m.lockTable, err = newLockTable(m, f.Region, lockLayout{}); err != nil {
		return nil, fl, err
	}
	return m, fl, nil
}

// shapeOf is m's FileShape.
func shapeOf(m *Map) FileShape {
	st := m.stats()
	return FileShape{
		Capacity: st.Capacity, AverageKeySize: m.layout.AverageKeySize, AverageValueSize: m.layout.AverageValueSize,
		Segments: st.Segments, TiersInUse: st.TiersInUse, GrowthSteps: st.GrowthSteps,
		FileSize: st.FileSize, MaxFileSize: st.MaxFileSize, Grows: m.layout.Grows, Stamps: m.layout.Stamps,
		Splits: m.layout.Splits,
	}
}

// held is what a map holds: its live entries, and the count and bytes of
// those that fit a tier, which the new file is sized by (a large value,
// stored in parts, takes no more of the tier its key is in than any
// entry: counted in the averages, a single 64 MiB value would make every
// tier of the new file hold one, and the file hundreds of gigabytes).
type held struct {
	entries                     int64
	sized, keyBytes, valueBytes int64
}

// measure counts the entries of m and their bytes, refusing a map with
// damaged entries or unreadable segments (their entries would be lost).
func measure(m *Map) (held, error) {
	var h held
	var err error
	for k, v := range m.RangeView(&err) {
		h.entries++
		if m.fitsTier(k, v) {
			h.sized++
			h.keyBytes += int64(len(k))
			h.valueBytes += int64(len(v))
		}
	}
	if err != nil {
		return h, fmt.Errorf("%w; nothing was changed: see what is wrong with mapctl check, mend it with mapctl recover --repair (which drops damaged entries), then resize", err)
	}
	return h, nil
}

// resizedOptions are the Options of the new file of a map laid out as l
// and fl holding h, resized by ro, its permission bits perm.
func resizedOptions(l *segment.Layout, fl fileLayout, h held, ro ResizeOptions, perm fs.FileMode) Options {
	o := Options{
		Entries: ro.Entries, AverageKeySize: l.AverageKeySize, AverageValueSize: l.AverageValueSize,
		MaxBloatFactor: l.MaxBloatFactor, MaxSize: ro.MaxSize,
		Cache: l.Cache, NoChecksums: !l.Checksums, NoUndo: !l.Undo,
		Locks: fl.locks.locks, LockAlgorithm: fl.locks.algorithm, MaxProcesses: fl.registry.Slots,
		Mode: perm, CreateNew: true,
		// The layout does not record NoSplits: a store map that grows
		// without splitting is the nearest sign of it.
		NoSplits: ro.NoSplits || (!ro.Splits && l.Grows && !l.Splits),
	}
	if o.Entries == 0 {
		o.Entries = int(max(int64(l.Entries), h.entries))
	}
	if h.sized > 0 {
		// Rounded up: a tier planned a little large holds its entries
		// in one fewer chunk run more often than one planned small.
		o.AverageKeySize = int(max(1, ceilDiv(h.keyBytes, h.sized)))
		o.AverageValueSize = int(ceilDiv(h.valueBytes, h.sized))
	}
	if o.Cache {
		o.MaxSize = 0
	}
	return o
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// copyBatch bounds a batch of copyEntries: entries, and bytes of keys and
// values. A PutAll of a batch this size sorts in memory that stays in the
// CPU's caches and splits among goroutines (putAllParallel); the bytes
// bound keeps a map of large values from holding gigabytes at once.
const (
	copyBatchEntries = 64 << 10
	copyBatchBytes   = 64 << 20
)

// copyCheckEvery is how many entries copyEntries reads between looks at
// its context, which take a lock; it looks at every batch too, so that
// entries of large values are not read a thousand at a time unlooked at.
const copyCheckEvery = 1024

// copyEntries copies every entry of old into nm, which is empty, by PutAll
// batches, a cache map's entries with their expiries; it returns how many
// it copied and how many it left out because they had expired. total is
// how many entries old held when measured: the counts in and out must
// match it, and what nm holds the count copied.
func copyEntries(ctx context.Context, old, nm *Map, total int64, progress func(done, total int64)) (copied, expired int, err error) {
	var (
		arena    []byte
		ends     []int
		expiries []int64
		keys     [][]byte
		values   [][]byte
		scratch  []byte
		read     int64
	)
	flush := func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(ends) == 0 {
			return nil
		}
		keys, values = keys[:0], values[:0]
		for j, from := 0, 0; j < len(ends); j += 2 {
			keys = append(keys, arena[from:ends[j]])
			values = append(values, arena[ends[j]:ends[j+1]])
			from = ends[j+1]
		}
		var exp []int64
		if old.layout.Cache {
			exp = expiries
		}
		if _, _, err := nm.putAll(keys, values, exp); err != nil {
			return err
		}
		copied += len(keys)
		arena, ends, expiries = arena[:0], ends[:0], expiries[:0]
		if progress != nil {
			progress(read, total)
		}
		return nil
	}
	var rerr error
	for k, v := range old.RangeView(&rerr) {
		if read++; read%copyCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return copied, expired, err
			}
		}
		if old.layout.Cache {
			var exp int64
			var found bool
			scratch, exp, found, err = old.getEntry(keyHash(k), k, scratch[:0])
			if err != nil {
				return copied, expired, err
			}
			if !found || (exp != 0 && exp <= nm.table.Now()) {
				expired++
				continue
			}
			expiries = append(expiries, exp)
		}
		arena = append(arena, k...)
		ends = append(ends, len(arena))
		arena = append(arena, v...)
		ends = append(ends, len(arena))
		if len(ends)/2 >= copyBatchEntries || len(arena) >= copyBatchBytes {
			if err := flush(); err != nil {
				return copied, expired, err
			}
		}
	}
	if rerr != nil {
		return copied, expired, rerr
	}
	if err := flush(); err != nil {
		return copied, expired, err
	}
	if progress != nil {
		progress(read, total)
	}
	switch n := nm.table.Len(); {
	case read != total:
		return copied, expired, fmt.Errorf("%w: %d entries counted, then %d read to copy: the old file changed under the lock", ErrCorrupt, total, read)
	case n != int64(copied):
		return copied, expired, fmt.Errorf("the new file holds %d entries of the %d copied (a cache map evicts where a segment is full: resize with more Entries)", n, copied)
	}
	return copied, expired, nil
}

// finishFile gives the new file at tmp the old file's permission bits,
// and its owner and group where this process may, and syncs it.
func finishFile(tmp string, old fs.FileInfo) error {
	fd, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer fd.Close()
	if err := fd.Chmod(old.Mode().Perm()); err != nil {
		return err
	}
	if uid, gid, ok := fileOwner(old); ok {
		if err := fd.Chown(uid, gid); err != nil && !errors.Is(err, fs.ErrPermission) {
			return err
		}
	}
	return fd.Sync()
}

// syncDir syncs the directory dir, so that a rename in it survives a
// crash of the machine.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// aloneWith takes the recovery lock of f's registry, if it has one, and
// returns its release, or an error matching ErrNotAlone if a process has
// the map open for writing (what says what needs the map alone), or, with
// recovered, if a process died with it open and what it held is not
// released yet. A file from before the registry has
// no record of who has it open; the creation lock the caller holds is all
// there is.
func aloneWith(f *offheap.File, what string, recovered bool) (func(), error) {
	fl, err := decodeFileLayout(f, len((&segment.Layout{}).Encode()), Options{}, nil)
	if err != nil {
		return nil, err
	}
	if fl.registry.Slots == 0 {
		return func() {}, nil
	}
	reg, err := registry.Attach(f, fl.registry)
	if err != nil {
		return nil, err
	}
	unlock, err := reg.LockRecovery(DefaultLockTimeout)
	if err != nil {
		return nil, err
	}
	slots, err := reg.Slots()
	if err != nil {
		unlock()
		return nil, err
	}
	var live, dead []int
	for _, s := range slots {
		switch {
		case s.Alive:
			live = append(live, s.PID)
		case s.Dead():
			dead = append(dead, s.PID)
		}
	}
	switch {
	case len(live) > 0:
		unlock()
		return nil, fmt.Errorf("%w (pids %v): %s only while no process has the map open for writing", ErrNotAlone, live, what)
	case len(dead) > 0 && recovered:
		unlock()
		return nil, fmt.Errorf("%w: processes died with it open (pids %v) and what they held is not released yet: run mapctl recover (or open the map for writing once) first", ErrNotAlone, dead)
	}
	return unlock, nil
}

// testResizeStep marks the steps of Resize, for tests that stop it after
// each.
var testResizeStep = func(string) {}
