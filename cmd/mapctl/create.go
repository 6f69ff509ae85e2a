package main

import (
	"errors"
	"flag"
	"fmt"
	iofs "io/fs"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/sharedmap/sharedmap/hashmap"
)

var createCmd = &command{
	name:    "create",
	args:    "PATH",
	summary: "create a new, empty map file sized for --entries",
	help: `Creates the map file PATH, sized for --entries entries whose keys and values
average --key-size and --value-size bytes. The file starts with room for
--entries times --bloat; only what every map uses (segment headers and
first tiers) takes disk (or RAM on /dev/shm) at once, and each overflow tier
is reserved when first needed. When that room is used up the file grows,
doubling its tiers each time, while every process keeps using it, up to
--max-size (default 64 times the first size, at least 64MiB, at most 1TiB);
then puts fail with "map is full", as they do at
once with --no-growth. A map that grows also splits its segments as it
fills, up to 4 times --segments (at least 1024), so that lookups stay as
short as in a map made for its size; --no-splits keeps the segments it was
made with. Past that, or without splits, each lookup walks more tiers: for
the speed of a map made for the new size, rewrite it into one (mapctl
resize PATH, whose new file splits if this one does, or with --splits). The
sizing is fixed at creation: every process that opens the file later uses
it.

--max-processes bounds how many processes may have the map open for
writing at once (readers, as get, dump and stats, do not count). A slot
takes disk only once a process uses it, so the default, 4096, costs a
small map nothing; in a map of very many segments the default is fewer,
so that the slots take at most a fifth of the file. The count cannot
grow later: a map whose slots are all taken is copied into a new one made
with more (mapctl dump OLD | mapctl load NEW -).

With --cache the map is a cache: entries may carry a time to live (mapctl
put --ttl), and a full map evicts the entries read least recently (CLOCK,
per segment) instead of failing. Each value then takes 8 bytes more.

The file is created readable and writable by its creator alone (0600),
whatever the umask. To share the map, give --mode: the users who write it
need write permission (0660 with a common group), since every process that
writes, recovery included, opens it read-write; read permission alone lets
a user read every entry, and nothing more.

PATH must not exist yet, or be an empty file (a create that failed, on a
full disk say, leaves its empty file behind: create again over it, or
remove it). Prints the number of segments and the file size.

Examples:
  mapctl create /dev/shm/store.map --entries 1000000 --key-size 16 --value-size 64
  mapctl create /dev/shm/cache.map --entries 100000 --cache
  mapctl create /srv/shared.map --mode 0660   # writable by the file's group too`,
	flags: func(fs *flag.FlagSet) any {
		o := &hashmap.Options{}
		fs.IntVar(&o.Entries, "entries", hashmap.DefaultEntries, "number of entries to size the map for")
		fs.IntVar(&o.AverageKeySize, "key-size", hashmap.DefaultAverageKeySize, "average key size in bytes")
		fs.IntVar(&o.AverageValueSize, "value-size", hashmap.DefaultAverageValueSize, "average value size in bytes")
		fs.Float64Var(&o.MaxBloatFactor, "bloat", hashmap.DefaultMaxBloatFactor, "how far past --entries the map may grow before puts fail (at least 1)")
		fs.Func("max-size", "the most bytes the file may grow to, as 64GiB or 500MB; 0: 64 times its first size, at least 64MiB, at most 1TiB. A store map grows past --entries x --bloat up to it (not caches)", func(v string) error {
			n, err := parseByteSize(v)
			if err != nil {
				return err
			}
			o.MaxSize = n
			return nil
		})
		fs.BoolFunc("no-growth", "keep the file at the size it is created with: puts fail once --entries x --bloat is used up", func(string) error {
			o.MaxSize = hashmap.NoGrowth
			return nil
		})
		fs.IntVar(&o.Segments, "segments", 0, "independently locked segments, a power of two (0: about one per 1024 entries)")
		fs.BoolVar(&o.NoSplits, "no-splits", false, "keep the segments the map is created with: by default a store map that grows also splits them as it fills, up to 4 times --segments (at least 1024), for address space laid out for them up front")
		fs.BoolVar(&o.Cache, "cache", false, "make the map a cache: entries may expire, and a full map evicts instead of failing")
		fs.IntVar(&o.MaxProcesses, "max-processes", 0, "how many processes may have the map open for writing at once, at most 65536 (0: 4096, or fewer in a map of very many segments, at least 64)")
		fs.BoolVar(&o.NoUndo, "no-undo", false, "no undo records, through which values rewritten in place go: such puts take 5-11% less time, but a process killed in the middle of one loses that key")
		fs.Func("mode", "permission bits of the file, in octal, as 0660 (default 0600: the creator's alone)", func(v string) error {
			n, err := strconv.ParseUint(v, 8, 32)
			if err != nil || n == 0 || n > 0o777 {
				return fmt.Errorf("want permission bits in octal, 0001 to 0777, as 0660")
			}
			o.Mode = iofs.FileMode(n)
			return nil
		})
		return o
	},
	run: runCreate,
}

func runCreate(e *env, c *command, opts any, args []string) int {
	if !e.wantArgs(c, args, 1) {
		return exitUsage
	}
	o := opts.(*hashmap.Options)
	if bad := badCreateFlag(o); bad != "" {
		return e.usageError(c, bad)
	}
	path := args[0]
	// An empty file is no map (a failed creation leaves one) and is created
	// over; anything else at the path is left alone. A failed creation's
	// empty file stays: another process may already have it open to create
	// the map in it, and a removal would leave that map under no name.
	// (A symbolic link to a file is followed, as every other command
	// follows it; Open refuses one whose target does not exist.)
	exists := fmt.Errorf("%s already exists; remove it first or pick another path", path)
	if st, err := os.Stat(path); err == nil && !(st.Mode().IsRegular() && st.Size() == 0) {
		return e.fail(c, exists)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return e.fail(c, err)
	}
	// CreateNew checks again under the creation lock: of two creates of
	// one new path at once, the second finds the first's map there.
	o.CreateNew = true
	m, err := hashmap.Open(path, o)
	if errors.Is(err, os.ErrExist) {
		return e.fail(c, exists)
	}
	if errors.Is(err, hashmap.ErrBadOptions) {
		return e.usageError(c, createFlagNames.Replace(err.Error())) // e.g. --segments not a power of two
	}
	if err != nil {
		return e.fail(c, err)
	}
	defer m.Close()
	st := m.Stats()
	kind := ""
	if st.Cache {
		kind = "cache "
	}
	reserved := "" // of the file, how much is on disk already (the rest is a hole until used)
	if fi, err := os.Stat(path); err == nil {
		if n, ok := diskBytes(fi); ok {
			reserved = fmt.Sprintf(", %s of it on disk now", humanBytes(n))
		}
	}
	grows := ""
	if st.MaxFileSize > st.FileSize {
		grows = fmt.Sprintf("; grows past x%g up to %s", st.MaxBloatFactor, humanBytes(st.MaxFileSize))
	}
	fmt.Fprintf(e.stdout, "created %s%s: sized for %d %s (up to x%g), %d %s, file size %s%s%s\n",
		kind, path, st.Capacity, plural(st.Capacity, "entry", "entries"), st.MaxBloatFactor,
		st.Segments, plural(st.Segments, "segment", "segments"), humanBytes(st.FileSize), reserved, grows)
	return exitOK
}

// parseByteSize reads a size in bytes: a whole number with an optional
// unit, KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024).
func parseByteSize(v string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = rest, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("want a size in bytes, as 64GiB, 500MB or 1000000")
	}
	return n * mult, nil
}

// humanBytes formats n bytes as "123456 bytes (120.6 KiB)".
func humanBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%d bytes (%s)", n, shortBytes(n))
}

// shortBytes formats n bytes as "120.6 KiB" (or "512 bytes").
func shortBytes(n int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	if n < 1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	f := float64(n)
	u := -1
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	return fmt.Sprintf("%.1f %s", f, units[u])
}

// createFlagNames rewrites the hashmap.Options fields an error names as
// the create flags that set them.
var createFlagNames = strings.NewReplacer(
	"Entries ", "--entries ",
	"AverageKeySize ", "--key-size ",
	"AverageValueSize ", "--value-size ",
	"MaxBloatFactor ", "--bloat ",
	"Segments ", "--segments ",
	"MaxProcesses ", "--max-processes ",
)

// badCreateFlag names the first of create's flags whose value the map
// cannot take, and what it takes; "" when all are good. (A size of 0 is
// refused rather than passed on: in Options it asks for the default.)
func badCreateFlag(o *hashmap.Options) string {
	switch {
	case o.Entries <= 0:
		return fmt.Sprintf("--entries %d: want at least 1", o.Entries)
	case o.AverageKeySize <= 0:
		return fmt.Sprintf("--key-size %d: want an average key size of at least 1 byte", o.AverageKeySize)
	case o.AverageValueSize <= 0:
		return fmt.Sprintf("--value-size %d: want an average value size of at least 1 byte (for values mostly empty, 1)", o.AverageValueSize)
	case !(o.MaxBloatFactor >= 1) || math.IsInf(o.MaxBloatFactor, 1):
		return fmt.Sprintf("--bloat %v: want a number at least 1, as 2", o.MaxBloatFactor)
	case o.Segments < 0:
		return fmt.Sprintf("--segments %d: want 0 (chosen for --entries) or a power of two", o.Segments)
	case o.MaxProcesses < 0:
		return fmt.Sprintf("--max-processes %d: want 0 (the default) or a count of processes", o.MaxProcesses)
	}
	return ""
}
