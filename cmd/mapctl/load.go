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

Lines are stored in batches of up to 65536, each in the order fastest for
the map rather than the file's, while the next batch is read. Loading stops
at the first error (for example "map is full": create the map with more
--entries or a larger --bloat), exiting with status 3, naming the line that
failed and telling how many entries were stored: every line of the batches
before, and perhaps other lines of that line's batch. Loading the same
input again stores each key's last value again.

Lines read are stored without waiting for more input, so a reader of the
map sees a slow stream's entries as they come. An interrupt (Ctrl-C,
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
	l := newLoader(m, newProgress(e.stderr, "loading", "lines", total), fileName(args[1]))
	// A goroutine parses the input into batches, which this one stores as
	// they fill; see loader.
	go l.parse(newAheadReader(in))
	done := make(chan struct{})
	defer close(done)
	go l.interruptOn(sigs, done)
	err = l.store()
	l.p.done()
	if err != nil {
		return e.fail(c, err)
	}
	fmt.Fprintf(e.stdout, "read %d %s: %d %s added, %d replaced\n", l.line, plural(l.line, "line", "lines"), l.n.added, plural(l.n.added, "key", "keys"), l.n.replaced)
	return exitOK
}

// loader is one load's state. Two goroutines share it: parse reads the
// input and parses its lines into a batch, and hands the batch to store
// when it is full; store stores each batch with PutAll, in the map's
// order rather than the file's, while parse fills the other. When store
// has nothing to do and parse waits for input, store takes the batch
// parse fills as it is. Of the two batches, one is being filled, the
// other stored or waiting to be (full), or free.
//
// An interrupt (interruptOn) makes store, once the batch it is storing is
// done, take mu and store every line parsed (the full batches and the
// one being filled), so that what load says it read is stored, and
// return; parse, waiting for input or for mu, does nothing more.
type loader struct {
	m    *hashmap.Map
	p    *progress
	name string     // of the input, for errors: the file's, or "stdin"
	n    loadCounts // stored, by store

	mu          sync.Mutex
	cond        sync.Cond    // on mu: a batch handed over or freed, the input's end, an interrupt, store's return
	line        int          // lines read
	read        int64        // bytes read
	cur         *loadBatch   // the batch parse fills
	full, free  []*loadBatch // handed to store, in order; for parse to fill next
	end         *loadEnd     // the input ended (once every batch is handed over)
	waiting     bool         // parse may be waiting for input, cur in store's hands
	interrupted bool         // store stores what is parsed and returns
	stored      bool         // store returned: parse stops
}

// stopping reports whether parse must stop: an interrupt came, or store
// returned. The caller holds mu.
func (l *loader) stopping() bool { return l.interrupted || l.stored }

// loadBatch is a batch of entries, keys and values pointing into arena,
// with the line of each and how far into the input its last line ends.
type loadBatch struct {
	keys, values [][]byte
	lines        []int
	arena        []byte
	line         int
	read         int64
}

// loadEnd is how the input ended: at its end (err nil), at a line that
// does not parse (line), or with a read error.
type loadEnd struct {
	line int
	err  error
	read bool
}

func newLoader(m *hashmap.Map, p *progress, name string) *loader {
	l := &loader{m: m, p: p, name: name, cur: new(loadBatch), free: []*loadBatch{new(loadBatch)}}
	l.cond.L = &l.mu
	return l
}

// parse reads ahead to its end, parsing each line into the batch it fills
// and handing the batch to store when it is full. (Before, store takes it
// as it is when parse waits for input and store has nothing else to do.)
func (l *loader) parse(ahead *aheadReader) {
	r := bufio.NewReaderSize(ahead, 64<<10)
	var long []byte // a line longer than r's buffer, put together
	l.mu.Lock()
	defer l.mu.Unlock()
	for !l.stopping() {
		// Before a read that waits for input, store may take the lines
		// parsed (see store): a slow stream's lines are stored as they
		// come, while a file or a fast pipe fills whole batches.
		l.waiting = !hasLine(r) && !ahead.ready()
		if l.waiting && len(l.cur.keys) > 0 {
			l.cond.Broadcast()
		}
		l.mu.Unlock()
		text, rerr := r.ReadSlice('\n')
		if errors.Is(rerr, bufio.ErrBufferFull) {
			long = append(long[:0], text...)
			for errors.Is(rerr, bufio.ErrBufferFull) {
				text, rerr = r.ReadSlice('\n')
				long = append(long, text...)
			}
			text = long
		}
		l.mu.Lock()
		l.waiting = false
		if l.stopping() {
			return
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			text = nil // a line cut short by the failed read is not an entry
		}
		var end *loadEnd
		if len(text) > 0 {
			switch err := l.take(text); {
			case errors.Is(err, errStopping):
				return
			case err != nil:
				end = &loadEnd{line: l.line, err: err}
			}
		}
		switch {
		case end != nil:
		case errors.Is(rerr, io.EOF):
			end = &loadEnd{}
		case rerr != nil:
			end = &loadEnd{err: rerr, read: true}
		default:
			continue
		}
		if len(l.cur.keys) > 0 && !l.handOver() {
			return
		}
		l.end = end
		l.cond.Broadcast()
		return
	}
}

// take counts one line read, text with its newline, and adds its entry to
// the batch, which it hands over when full. An empty line is skipped; one
// that does not parse is the error. The caller holds mu.
func (l *loader) take(text []byte) error {
	l.line++
	l.read += int64(len(text))
	b := l.cur
	b.line, b.read = l.line, l.read
	text = bytes.TrimSuffix(text, []byte("\n"))
	text = bytes.TrimSuffix(text, []byte("\r"))
	if len(text) == 0 {
		return nil
	}
	at := len(b.arena)
	b.arena = append(b.arena, text...) // text is r's buffer, read again next
	key, value, err := parseLine(b.arena[at:len(b.arena):len(b.arena)])
	if err != nil {
		b.arena = b.arena[:at]
		return err
	}
	b.keys, b.values, b.lines = append(b.keys, key), append(b.values, value), append(b.lines, l.line)
	if len(b.keys) == loadBatchLines || len(b.arena) >= loadBatchBytes {
		if !l.handOver() {
			return errStopping
		}
	}
	return nil
}

// errStopping ends parse's work once an interrupt came or store
// returned: store says what was stored.
var errStopping = errors.New("stopping")

// handOver gives the batch parse fills to store and takes a free one,
// waiting for store to free one if need be. It reports false, handing
// nothing over, if parse must stop (an interrupt came, and store then
// takes the batch itself; or store returned). The caller holds mu.
func (l *loader) handOver() bool {
	for len(l.free) == 0 && !l.stopping() {
		l.cond.Wait()
	}
	if l.stopping() {
		return false
	}
	l.full = append(l.full, l.cur)
	l.cur = l.free[len(l.free)-1]
	l.free = l.free[:len(l.free)-1]
	l.cond.Broadcast()
	return true
}

// store stores each batch parse hands over, until the input's end, an
// error or an interrupt, and returns how the load ended.
func (l *loader) store() error {
	l.mu.Lock()
	defer func() {
		l.stored = true
		l.cond.Broadcast()
		l.mu.Unlock()
	}()
	for {
		for len(l.full) == 0 && !l.takeable() && l.end == nil && !l.interrupted {
			l.cond.Wait()
		}
		var b *loadBatch
		switch {
		case l.interrupted:
			return l.storeParsed()
		case len(l.full) > 0:
			b = l.full[0]
			l.full = l.full[1:]
		case l.takeable():
			// Parse waits for input: its lines are stored now, not when
			// more come.
			b = l.cur
			l.cur = l.free[len(l.free)-1]
			l.free = l.free[:len(l.free)-1]
		default:
			return l.endErr()
		}
		l.mu.Unlock()
		err := l.storeBatch(b)
		l.mu.Lock()
		if err != nil {
			return err
		}
		b.keys, b.values, b.lines, b.arena = b.keys[:0], b.values[:0], b.lines[:0], b.arena[:0]
		l.free = append(l.free, b)
		l.cond.Broadcast()
	}
}

// takeable reports whether store may take the batch parse fills: it
// holds lines, parse waits for input, and a free batch can take its
// place (one is, when no batch is full and store holds none). The caller
// holds mu.
func (l *loader) takeable() bool { return l.waiting && len(l.cur.keys) > 0 && len(l.free) > 0 }

// storeParsed stores, after an interrupt, every line parsed and not yet
// stored, and says how far the load got. The caller holds mu, so parse
// reads and parses nothing more.
func (l *loader) storeParsed() error {
	for _, b := range append(l.full, l.cur) {
		if err := l.storeBatch(b); err != nil {
			return err
		}
	}
	return fmt.Errorf("interrupted after %s line %d: stored %d entries (%d keys added, %d replaced); the lines after it were not stored", l.name, l.line, l.n.loaded(), l.n.added, l.n.replaced)
}

// endErr is the error that ended the input, once every entry before it
// is stored: nil at its end.
func (l *loader) endErr() error {
	switch e := l.end; {
	case e.err == nil:
		return nil
	case e.read:
		return fmt.Errorf("reading %s: %w (loaded %d entries)", l.name, e.err, l.n.loaded())
	default:
		return fmt.Errorf("%s line %d: %w (loaded %d entries before it)", l.name, e.line, e.err, l.n.loaded())
	}
}

// storeBatch stores b's entries with PutAll and counts them.
func (l *loader) storeBatch(b *loadBatch) error {
	if len(b.keys) == 0 {
		return nil
	}
	stored, added, err := l.m.PutAll(b.keys, b.values)
	l.n.added += added
	l.n.replaced += stored - added
	if err != nil {
		// PutAll names the key by its index in the batch; the line
		// number says more. It stores a batch in the map's order, not
		// the file's, so which of the batch's other lines it stored
		// before it stopped is not known.
		var be *hashmap.BatchError
		if errors.As(err, &be) && be.Index < len(b.lines) {
			return fmt.Errorf("%s line %d: %w (loaded %d entries; lines %d to %d were stored together, in another order, and others of them may be stored or not)",
				l.name, b.lines[be.Index], be.Err, l.n.loaded(), b.lines[0], b.lines[len(b.lines)-1])
		}
		return fmt.Errorf("%s: %w (loaded %d entries)", l.name, err, l.n.loaded())
	}
	l.p.update(b.read, int64(b.line))
	return nil
}

// interruptOn waits for an interrupt on sigs, or for done to close. On an
// interrupt it stops catching them (a second one ends the process at
// once) and tells store to store what was parsed and return.
func (l *loader) interruptOn(sigs chan os.Signal, done chan struct{}) {
	select {
	case <-sigs:
	case <-done:
		return
	}
	signal.Stop(sigs)
	l.mu.Lock()
	l.interrupted = true
	l.cond.Broadcast()
	l.mu.Unlock()
}

// hasLine reports whether r holds a whole line already, so that reading it
// will not wait for input.
func hasLine(r *bufio.Reader) bool {
	b, _ := r.Peek(r.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}

// aheadReader reads its input in a goroutine of its own, a few chunks
// ahead, so that parse can tell whether a read will wait for input
// (ready): it hands its batch over only then, and otherwise fills it. A
// look at the bytes at hand alone (hasLine) said "wait" at the end of
// each buffer of a file or fast pipe.
type aheadReader struct {
	chunks chan []byte // read, in order; closed after the last
	free   chan []byte // chunks read to their end, to read into again
	err    error       // why reading stopped (io.EOF at the end), once chunks is closed
	cur    []byte      // the rest of the chunk being read
	buf    []byte      // all of cur's chunk
}

// aheadChunk is how many bytes aheadReader asks its input for at once,
// and aheadChunks how many chunks it reads ahead.
const (
	aheadChunk  = 256 << 10
	aheadChunks = 4
)

func newAheadReader(r io.Reader) *aheadReader {
	a := &aheadReader{chunks: make(chan []byte, aheadChunks), free: make(chan []byte, aheadChunks+2)}
	go func() {
		for {
			var buf []byte
			select {
			case buf = <-a.free:
			default:
				buf = make([]byte, aheadChunk)
			}
			n, err := r.Read(buf)
			if n > 0 {
				a.chunks <- buf[:n]
			}
			if err != nil {
				a.err = err
				close(a.chunks)
				return
			}
		}
	}()
	return a
}

func (a *aheadReader) Read(p []byte) (int, error) {
	if len(a.cur) == 0 {
		if a.buf != nil {
			select {
			case a.free <- a.buf[:cap(a.buf)]:
			default:
			}
		}
		c, ok := <-a.chunks
		if !ok {
			return 0, a.err
		}
		a.cur, a.buf = c, c
	}
	n := copy(p, a.cur)
	a.cur = a.cur[n:]
	return n, nil
}

// ready reports whether a Read returns without waiting for input.
func (a *aheadReader) ready() bool { return len(a.cur) > 0 || len(a.chunks) > 0 }

// loadBatchLines is how many entries load stores with one PutAll call,
// and loadBatchBytes about the most bytes of keys and values it holds for
// one (lines may be of any length): large enough that PutAll's sort into
// the map's order and its goroutines pay, small enough that the two
// batches stay a few tens of MiB.
const (
	loadBatchLines = 64 << 10
	loadBatchBytes = 16 << 20
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
