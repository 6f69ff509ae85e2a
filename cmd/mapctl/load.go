package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

var loadCmd = &command{
	name:    "load",
	args:    "PATH FILE",
	summary: `store every "key<TAB>value" line of FILE ("-" for stdin)`,
	help: `Reads FILE ("-" reads stdin) and stores each line's entry in the existing
map PATH, replacing previous values. The format is the one mapctl dump
writes: one entry per line, the key, a tab, the value:

  key<TAB>value

Inside keys and values a backslash, tab, newline and carriage return are
written \\, \t, \n and \r; any other backslash sequence is an error. A line
without a tab is an error naming the line number; empty lines are skipped;
a trailing \r (CRLF files) is dropped. Lines may be of any length. Other
bytes are stored as they are: a byte-order mark that some editors put at
the start of a file becomes part of the first key.

At the end, load prints on stdout the lines it read (empty ones too), the
keys it added (absent from the map until then) and the keys whose value it
replaced (present before, or earlier in FILE). A file holding each of
500000 keys four times, loaded into an empty map, gives:

  read 2000000 lines: 500000 keys added, 1500000 replaced

Each key is counted as it is stored, so other processes writing the map
at the same time do not change the counts.

While it runs, and only if stderr is a terminal, a progress line on stderr
shows the part of FILE read, the lines read, their rate and the time left:

  loading [######..............]  31% 620,000 lines 310,000/s ETA 4s

(without the part read and the time left when FILE is stdin or a pipe,
whose size is not known).

Loading stops at the first error (for example "map is full": create the map
with more --entries or a larger --bloat), exiting with status 3 and telling
how many entries were stored before it.

Each line read is stored before load waits for more input, so a reader of
the map sees a slow stream's entries as they come. An interrupt (Ctrl-C,
SIGTERM) stores every line parsed so far, says after which line it
stopped and what it stored, and exits with status 3; a second one ends
load at once.

In a cache map the loaded entries never expire unless --ttl gives them a
time to live (dump does not write expiry times).

Examples:
  mapctl dump /tmp/old.map | mapctl load /tmp/new.map -
  mapctl load --ttl 1h /dev/shm/cache.map sessions.tsv`,
	flags: func(fs *flag.FlagSet) any {
		ttl := new(time.Duration)
		fs.DurationVar(ttl, "ttl", 0, "time to live of every loaded entry (cache maps only); 0: they never expire")
		return ttl
	},
	run: runLoad,
}

func runLoad(e *env, c *command, opts any, args []string) int {
	if !e.wantArgs(c, args, 2) {
		return exitUsage
	}
	ttl := *opts.(*time.Duration)
	if ttl < 0 {
		return e.usageError(c, "--ttl must not be negative (0: entries never expire)")
	}
	// Interrupts are caught before the map is opened, and let go only after
	// it is closed (defers run last first): an interrupt in between would
	// leave the map looking abandoned by a dead process.
	sigs := make(chan os.Signal, 1)
	notifyInterrupts(sigs)
	defer signal.Stop(sigs)
	m, err := openExistingWith(args[0], &hashmap.Options{DefaultTTL: ttl})
	if err != nil {
		return e.fail(c, err)
	}
	defer m.Close()

	var in io.Reader = e.stdin
	var total int64 // input size for the progress line, 0 if unknown
	if args[1] != "-" {
		f, err := os.Open(args[1])
		if err != nil {
			return e.fail(c, err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			total = fi.Size()
		}
		in = f
	}
	l := &loader{m: m, p: newProgress(e.stderr, "loading", "lines", total), name: fileName(args[1])}
	// An interrupt (Ctrl-C, SIGTERM) stores what was parsed, closes the map
	// (so that no process reads as having died with it open) and says how
	// far the load got. The loop holds mu but while it waits for input,
	// and it never waits with entries unstored (see hasLine), so the
	// handler, once it holds mu, finds the map idle and nothing lost. A
	// second interrupt, while the handler waits for a lock, say, ends the
	// process at once: the handler lets interrupts go first.
	var mu sync.Mutex
	mu.Lock()
	done := make(chan struct{})
	defer close(done)
	go l.stopOnInterrupt(e, c, sigs, done, &mu)
	err = l.readAll(bufio.NewReaderSize(in, 64<<10), &mu)
	l.p.done()
	if err != nil {
		return e.fail(c, err)
	}
	fmt.Fprintf(e.stdout, "read %d %s: %d %s added, %d replaced\n", l.line, plural(l.line, "line", "lines"), l.n.added, plural(l.n.added, "key", "keys"), l.n.replaced)
	return exitOK
}

// loader is one load's state: the entries parsed and not yet stored, and
// how far it got.
//
// Entries are stored loadBatch at a time with PutManyAdded, which overlaps
// their lookups' cache misses and says which keys were new; lines
// remembers each one's line number for the error that stops the load.
type loader struct {
	m    *hashmap.Map
	p    *progress
	name string // of the input, for errors: the file's, or "stdin"

	n    loadCounts
	line int   // lines read
	read int64 // bytes read

	keys, values [][]byte
	lines        []int
	pending      int // bytes of keys and values not yet stored
}

// flush stores the entries parsed and not yet stored.
func (l *loader) flush() error {
	l.pending = 0
	if len(l.keys) == 0 {
		return nil
	}
	stored, added, err := l.m.PutManyAdded(l.keys, l.values)
	l.n.added += added
	l.n.replaced += stored - added
	if err != nil {
		// PutMany names the key by its index in the batch; the line
		// number says more.
		if inner := errors.Unwrap(err); inner != nil && stored < len(l.lines) {
			return fmt.Errorf("%s line %d: %w (loaded %d entries before it)", l.name, l.lines[stored], inner, l.n.loaded())
		}
		return fmt.Errorf("%s: %w (loaded %d entries)", l.name, err, l.n.loaded())
	}
	l.keys, l.values, l.lines = l.keys[:0], l.values[:0], l.lines[:0]
	l.p.update(l.read, int64(l.line))
	return nil
}

// readAll reads r to its end, storing each line's entry, and stores the
// last ones. The caller holds mu, and readAll lets it go only while it
// waits for input, with every entry parsed stored; it returns with mu
// held.
func (l *loader) readAll(r *bufio.Reader, mu *sync.Mutex) error {
	for {
		// Entries wait in the batch only while more lines are at hand: a
		// slow stream's lines are stored as they come, not 64 at a time.
		if len(l.keys) > 0 && !hasLine(r) {
			if err := l.flush(); err != nil {
				return err
			}
		}
		mu.Unlock()
		text, rerr := r.ReadBytes('\n')
		mu.Lock()
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			text = nil // a line cut short by the failed read is not an entry
		}
		if len(text) > 0 {
			if err := l.take(text); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			if err := l.flush(); err != nil {
				return err
			}
			return fmt.Errorf("reading %s: %w (loaded %d entries)", l.name, rerr, l.n.loaded())
		}
	}
	return l.flush()
}

// take counts one line read, text with its newline, and adds its entry to
// the batch, storing the batch when it is full. An empty line is skipped;
// one that does not parse stores the batch before it and is the error.
func (l *loader) take(text []byte) error {
	l.line++
	l.read += int64(len(text))
	text = bytes.TrimSuffix(text, []byte("\n"))
	text = bytes.TrimSuffix(text, []byte("\r"))
	if len(text) == 0 {
		return nil
	}
	key, value, err := parseLine(text)
	if err != nil {
		if ferr := l.flush(); ferr != nil {
			return ferr // an earlier line failed first
		}
		return fmt.Errorf("%s line %d: %w (loaded %d entries before it)", l.name, l.line, err, l.n.loaded())
	}
	l.keys, l.values, l.lines = append(l.keys, key), append(l.values, value), append(l.lines, l.line)
	l.pending += len(key) + len(value)
	if len(l.keys) == loadBatch || l.pending >= loadBatchBytes {
		return l.flush()
	}
	return nil
}

// stopOnInterrupt waits for an interrupt on sigs, or for done to close.
// On an interrupt it takes mu, stores what was parsed, closes the map and
// ends the process, saying how far the load got.
func (l *loader) stopOnInterrupt(e *env, c *command, sigs chan os.Signal, done chan struct{}, mu *sync.Mutex) {
	select {
	case <-sigs:
	case <-done:
		return
	}
	signal.Stop(sigs)
	mu.Lock()
	err := l.flush()
	l.p.done()
	l.m.Close()
	if err == nil {
		err = fmt.Errorf("interrupted after %s line %d: stored %d entries (%d keys added, %d replaced); the lines after it were not stored", l.name, l.line, l.n.loaded(), l.n.added, l.n.replaced)
	}
	os.Exit(e.fail(c, err))
}

// hasLine reports whether r holds a whole line already, so that reading it
// will not wait for input.
func hasLine(r *bufio.Reader) bool {
	b, _ := r.Peek(r.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}

// loadBatch is how many entries load stores with one PutManyAdded call,
// and loadBatchBytes the most bytes of keys and values it holds for one:
// lines may be of any length.
const (
	loadBatch      = 64
	loadBatchBytes = 1 << 20
)

// loadCounts counts the entries load stored: keys that were absent, and
// keys whose value it replaced.
type loadCounts struct {
	added, replaced int
}

func (n *loadCounts) loaded() int { return n.added + n.replaced }

func fileName(name string) string {
	if name == "-" {
		return "stdin"
	}
	return name
}

// parseLine parses one "key<TAB>value" line. The key and value may share
// text's bytes.
func parseLine(text []byte) (key, value []byte, err error) {
	k, v, ok := bytes.Cut(text, []byte("\t"))
	if !ok {
		return nil, nil, errors.New(`no tab: want "key<TAB>value"`)
	}
	if key, err = unescape(k); err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	if value, err = unescape(v); err != nil {
		return nil, nil, fmt.Errorf("value: %w", err)
	}
	return key, value, nil
}
