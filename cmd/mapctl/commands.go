package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/sharedmap/sharedmap/hashmap"
)

// Exit statuses.
const (
	exitOK       = 0
	exitNotFound = 1 // get or delete of an absent key
	exitUsage    = 2
	exitError    = 3
)

var stdout, stderr io.Writer = os.Stdout, os.Stderr

type command struct {
	name, args, short string
	run               func(fs *flag.FlagSet, args []string) int
	setup             func(fs *flag.FlagSet)
}

var commands []command

func init() {
	commands = []command{
		{"create", "PATH", "create a new map file sized for --entries", runCreate, setupCreate},
		{"put", "PATH KEY VALUE", "store VALUE under KEY", runPut, nil},
		{"get", "PATH KEY", "print the value of KEY (exit 1 if absent)", runGet, nil},
		{"delete", "PATH KEY", "remove KEY (exit 1 if absent)", runDelete, nil},
		{"stats", "PATH", "print the map's counters (--json for JSON)", runStats, setupJSON},
		{"inspect", "PATH", "print the layout and every segment's state", runInspect, setupJSON},
		{"demo", "", "run several worker processes on a fresh map and verify the result", runDemo, setupDemo},
	}
}

func usage() {
	fmt.Fprintln(stderr, "mapctl: create, inspect and exercise sharedmap files (a hash map in a file shared by processes)")
	fmt.Fprintln(stderr, "\nusage: mapctl COMMAND [flags] ARGS   (mapctl COMMAND --help for more)")
	for _, c := range commands {
		fmt.Fprintf(stderr, "  %-8s %-16s %s\n", c.name, c.args, c.short)
	}
	fmt.Fprintln(stderr, "\nexit status: 0 ok, 1 key not found, 2 usage error, 3 other error")
}

func run(args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage()
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if args[0] == "demo-worker" {
		return demoWorker(args[1:])
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.Usage = func() {
			fmt.Fprintf(stderr, "usage: mapctl %s [flags] %s\n\n%s.\n", c.name, c.args, c.short)
			fs.PrintDefaults()
		}
		if c.setup != nil {
			c.setup(fs)
		}
		// Flags may come before, between or after the arguments.
		var positional []string
		rest := args[1:]
		for {
			if err := fs.Parse(rest); err != nil {
				if errors.Is(err, flag.ErrHelp) {
					return exitOK
				}
				return exitUsage
			}
			if fs.NArg() == 0 {
				break
			}
			positional = append(positional, fs.Arg(0))
			rest = fs.Args()[1:]
		}
		return c.run(fs, positional)
	}
	fmt.Fprintf(stderr, "mapctl: unknown command %q\n", args[0])
	usage()
	return exitUsage
}

func fail(cmd string, err error) int {
	fmt.Fprintf(stderr, "mapctl: %s: %v\n", cmd, err)
	if errors.Is(err, hashmap.ErrNotFound) {
		return exitNotFound
	}
	return exitError
}

func wantArgs(fs *flag.FlagSet, args []string, n int) bool {
	if len(args) != n {
		fmt.Fprintf(stderr, "mapctl: %s: want %d arguments, got %d\n", fs.Name(), n, len(args))
		fs.Usage()
		return false
	}
	return true
}

// openExisting opens a map that must already exist (Open alone would create
// one).
func openExisting(path string, readOnly bool) (*hashmap.Map, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no map at %s (create it with mapctl create): %w", path, err)
	}
	return hashmap.Open(path, &hashmap.Options{ReadOnly: readOnly})
}

var createOpts hashmap.Options

func setupCreate(fs *flag.FlagSet) {
	fs.IntVar(&createOpts.Entries, "entries", hashmap.DefaultEntries, "entries to size the map for")
	fs.IntVar(&createOpts.AverageKeySize, "key-size", hashmap.DefaultAverageKeySize, "average key size in bytes")
	fs.IntVar(&createOpts.AverageValueSize, "value-size", hashmap.DefaultAverageValueSize, "average value size in bytes")
	fs.Float64Var(&createOpts.MaxBloatFactor, "bloat", hashmap.DefaultMaxBloatFactor, "how far past --entries the map may grow before puts fail")
	fs.IntVar(&createOpts.Segments, "segments", 0, "independently locked segments, a power of two (0 = about one per 1024 entries)")
}

func runCreate(fs *flag.FlagSet, args []string) int {
	if !wantArgs(fs, args, 1) {
		return exitUsage
	}
	if _, err := os.Stat(args[0]); err == nil {
		return fail("create", fmt.Errorf("%s already exists", args[0]))
	}
	m, err := hashmap.Open(args[0], &createOpts)
	if err != nil {
		return fail("create", err)
	}
	defer m.Close()
	st := m.Stats()
	fmt.Fprintf(stdout, "created %s: %d segments, sized for %d entries, %d bytes reserved (sparse)\n", args[0], st.Segments, st.Capacity, st.FileSize)
	return exitOK
}

func runPut(fs *flag.FlagSet, args []string) int {
	if !wantArgs(fs, args, 3) {
		return exitUsage
	}
	m, err := openExisting(args[0], false)
	if err != nil {
		return fail("put", err)
	}
	defer m.Close()
	if err := m.Put([]byte(args[1]), []byte(args[2])); err != nil {
		return fail("put", err)
	}
	return exitOK
}

func runGet(fs *flag.FlagSet, args []string) int {
	if !wantArgs(fs, args, 2) {
		return exitUsage
	}
	m, err := openExisting(args[0], true)
	if err != nil {
		return fail("get", err)
	}
	defer m.Close()
	v, err := m.Get([]byte(args[1]))
	if err != nil {
		return fail("get", fmt.Errorf("%q: %w", args[1], err))
	}
	fmt.Fprintf(stdout, "%s\n", v)
	return exitOK
}

func runDelete(fs *flag.FlagSet, args []string) int {
	if !wantArgs(fs, args, 2) {
		return exitUsage
	}
	m, err := openExisting(args[0], false)
	if err != nil {
		return fail("delete", err)
	}
	defer m.Close()
	existed, err := m.Delete([]byte(args[1]))
	if err != nil {
		return fail("delete", err)
	}
	if !existed {
		return fail("delete", fmt.Errorf("%q: %w", args[1], hashmap.ErrNotFound))
	}
	return exitOK
}

var asJSON bool

func setupJSON(fs *flag.FlagSet) { fs.BoolVar(&asJSON, "json", false, "print JSON") }

func printStats(st hashmap.Stats) {
	w := tabwriter.NewWriter(stdout, 0, 4, 1, ' ', 0)
	fmt.Fprintf(w, "Path:\t%s\n", st.Path)
	fmt.Fprintf(w, "Entries:\t%d\n", st.Entries)
	fmt.Fprintf(w, "Capacity:\t%d (max bloat factor %v)\n", st.Capacity, st.MaxBloatFactor)
	fmt.Fprintf(w, "Segments:\t%d\n", st.Segments)
	fmt.Fprintf(w, "Tiers in use:\t%d of %d\n", st.TiersInUse, st.TiersMax)
	fmt.Fprintf(w, "Bytes used:\t%d of %d allocatable\n", st.BytesUsed, st.BytesAllocatable)
	fmt.Fprintf(w, "File size:\t%d (sparse)\n", st.FileSize)
	fmt.Fprintf(w, "Chunk size:\t%d\n", st.ChunkSize)
	fmt.Fprintf(w, "Slots per tier:\t%d (up to %d entries)\n", st.SlotsPerTier, st.EntriesPerTier)
	w.Flush()
}

func runStats(fs *flag.FlagSet, args []string) int {
	if !wantArgs(fs, args, 1) {
		return exitUsage
	}
	m, err := openExisting(args[0], true)
	if err != nil {
		return fail("stats", err)
	}
	defer m.Close()
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(m.Stats())
		return exitOK
	}
	printStats(m.Stats())
	return exitOK
}

func runInspect(fs *flag.FlagSet, args []string) int {
	if !wantArgs(fs, args, 1) {
		return exitUsage
	}
	m, err := openExisting(args[0], true)
	if err != nil {
		return fail("inspect", err)
	}
	defer m.Close()
	segs := m.Segments()
	if asJSON {
		_ = json.NewEncoder(stdout).Encode(struct {
			Stats    hashmap.Stats         `json:"stats"`
			Segments []hashmap.SegmentInfo `json:"segments"`
		}{m.Stats(), segs})
		return exitOK
	}
	printStats(m.Stats())
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nSEGMENT\tENTRIES\tTIERS\tSEQ\tLOCK")
	for _, s := range segs {
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%s\n", s.Index, s.Entries, s.Tiers, s.Seq, s.LockStr)
	}
	w.Flush()
	return exitOK
}
