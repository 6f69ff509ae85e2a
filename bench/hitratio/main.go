// Command hitratio measures how well sharedmap's cache mode keeps the keys
// that matter when it is full, beside ristretto and fastcache given the
// same memory: a stream of requests over a Zipf-distributed key space far
// larger than the memory, each a Get and, on a miss, a Put (the usual
// read-through pattern). After a warm-up of one pass over the capacity,
// hits / requests is the hit ratio.
//
// "The same memory" is the budget each store is configured with:
// sharedmap's file size (its whole off-heap footprint: slots, bitmaps,
// entries, headers), ristretto's MaxCost in bytes of key and value (its
// per-item bookkeeping on the Go heap comes on top), and fastcache's
// maxBytes (which it rounds up to a multiple of 32 MiB: its cells say so
// where it has more than the budget). ristretto's Set drops a write when
// the buffer to its policy goroutine is full, which it is under load: its
// cells count the Sets dropped.
//
//	cd bench && go run ./hitratio -memory 64 -out results
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/fastcache"
	"github.com/dgraph-io/ristretto/v2"
	"github.com/sharedmap/sharedmap/hashmap"
)

type cache interface {
	get(k []byte) bool
	put(k, v []byte)
	close()
}

// noter is a cache with something to say in its cell after a run.
type noter interface{ note() string }

func main() {
	var (
		memoryMB  = flag.Int("memory", 64, "memory budget of each store, MiB")
		keys      = flag.Int("keys", 8_000_000, "size of the key space")
		valueSize = flag.Int("value", 64, "value size, bytes")
		requests  = flag.Int("requests", 4_000_000, "measured requests per store and skew")
		skews     = flag.String("s", "1.01,1.1,1.3", "Zipf exponents to run (each > 1)")
		out       = flag.String("out", "", "directory to write hitratio.md to (default: stdout only)")
		dir       = flag.String("dir", "/dev/shm", "where sharedmap's file goes")
	)
	flag.Parse()
	switch {
	case *memoryMB < 1 || *memoryMB > math.MaxInt>>20:
		fail(fmt.Errorf("bad -memory %d: want a number of MiB, at least 1", *memoryMB))
	case *keys < 1:
		fail(fmt.Errorf("bad -keys %d: want at least 1", *keys))
	case *valueSize < 0:
		fail(fmt.Errorf("bad -value %d: want a size in bytes, 0 or more", *valueSize))
	case *requests < 1:
		fail(fmt.Errorf("bad -requests %d: want at least 1", *requests))
	}
	removeMapFilesOnSignal()
	budget := int64(*memoryMB) << 20
	var rows []string
	for _, sv := range strings.Split(*skews, ",") {
		var s float64
		if _, err := fmt.Sscan(sv, &s); err != nil || s <= 1 {
			fail(fmt.Errorf("bad Zipf exponent %q: want a number > 1", sv))
		}
		row := fmt.Sprintf("| %.2f |", s)
		for _, name := range []string{"sharedmap", "ristretto", "fastcache"} {
			c, note, err := open(name, budget, *valueSize, *dir)
			if err != nil {
				fail(err)
			}
			ratio, took := run(c, s, *keys, *valueSize, *requests, budget)
			if n, ok := c.(noter); ok {
				note += n.note()
			}
			c.close()
			row += fmt.Sprintf(" %.3f%s |", ratio, note)
			fmt.Fprintf(os.Stderr, "s=%.2f %-9s hit ratio %.3f (%v)\n", s, name, ratio, took.Round(time.Millisecond))
		}
		rows = append(rows, row)
	}
	table := fmt.Sprintf("Hit ratio, Zipf over %d keys of 16 B with %d B values, %d MiB per store, %d requests after a warm-up (Get, then Put on a miss):\n\n"+
		"| Zipf s | sharedmap (cache mode) | ristretto | fastcache |\n|---|---:|---:|---:|\n%s\n\n"+
		"ristretto's Set drops a write when the buffer to its policy goroutine is full, as it is under load, which costs it hits: its cells count the Sets dropped, warm-up included. "+
		"fastcache rounds its size up to a multiple of 32 MiB: its cells say where that is more than the budget.\n",
		*keys, *valueSize, *memoryMB, *requests, strings.Join(rows, "\n"))
	fmt.Print(table)
	if *out != "" {
		if err := os.WriteFile(filepath.Join(*out, "hitratio.md"), []byte(table), 0o644); err != nil {
			fail(err)
		}
	}
}

// fail reports err and exits, removing the map files first.
func fail(err error) {
	mapFiles.Lock() // held to the exit: no map file is made after the removal
	removeMapFiles()
	fmt.Fprintln(os.Stderr, "hitratio:", err)
	os.Exit(1)
}

// mapFiles are the paths of the sharedmap files made and not yet removed,
// removed on SIGINT, SIGTERM or fail (each as large as -memory, by default
// in /dev/shm, which is RAM). The lock is held while a file is made, so a
// removal comes before or after it, never in between.
var mapFiles struct {
	sync.Mutex
	m map[string]bool
}

// removeMapFiles removes mapFiles; the caller holds the lock.
func removeMapFiles() {
	for path := range mapFiles.m {
		os.Remove(path)
		delete(mapFiles.m, path)
	}
}

// removeMapFilesOnSignal removes mapFiles and exits when the run is
// interrupted or terminated.
func removeMapFilesOnSignal() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		mapFiles.Lock()
		removeMapFiles()
		fmt.Fprintf(os.Stderr, "hitratio: %v: stopped, map files removed\n", sig)
		os.Exit(3)
	}()
}

// openMap opens a new map at path, replacing any file there, with the path
// in mapFiles until removeMap.
func openMap(path string, o *hashmap.Options) (*hashmap.Map, error) {
	mapFiles.Lock()
	defer mapFiles.Unlock()
	if mapFiles.m == nil {
		mapFiles.m = map[string]bool{}
	}
	mapFiles.m[path] = true
	os.Remove(path)
	return hashmap.Open(path, o)
}

// removeMap removes the file at path and takes it out of mapFiles.
func removeMap(path string) {
	mapFiles.Lock()
	defer mapFiles.Unlock()
	os.Remove(path)
	delete(mapFiles.m, path)
}

// run warms c up and returns its hit ratio over the measured requests.
func run(c cache, s float64, keys, valueSize, requests int, budget int64) (float64, time.Duration) {
	rng := rand.New(rand.NewSource(1))
	z := rand.NewZipf(rng, s, 1, uint64(keys-1))
	value := make([]byte, valueSize)
	key := make([]byte, 16)
	request := func() bool {
		k := z.Uint64()
		// Spread Zipf ranks over the key space so that popular keys are not
		// neighbours in any hash.
		key = fmt.Appendf(key[:0], "%016x", k*0x9e3779b97f4a7c15)
		if c.get(key) {
			return true
		}
		c.put(key, value)
		return false
	}
	warm := int(budget / int64(16+valueSize))
	for range warm {
		request()
	}
	start := time.Now()
	hits := 0
	for range requests {
		if request() {
			hits++
		}
	}
	return float64(hits) / float64(requests), time.Since(start)
}

func open(name string, budget int64, valueSize int, dir string) (cache, string, error) {
	switch name {
	case "sharedmap":
		return openSharedmap(budget, valueSize, dir)
	case "ristretto":
		c, err := ristretto.NewCache(&ristretto.Config[string, []byte]{
			NumCounters: budget / int64(16+valueSize) * 10, MaxCost: budget, BufferItems: 64, IgnoreInternalCost: true})
		if err != nil {
			return nil, "", err
		}
		return &ristrettoCache{c: c}, "", nil
	case "fastcache":
		c := fastcache.New(int(budget))
		var st fastcache.Stats
		c.UpdateStats(&st)
		note := ""
		if int64(st.MaxBytesSize) != budget { // a multiple of 32 MiB
			note = fmt.Sprintf(" (has %d MiB)", st.MaxBytesSize>>20)
		}
		return fastCache{c}, note, nil
	}
	return nil, "", fmt.Errorf("unknown store %q", name)
}

// openSharedmap creates a cache map whose file is as large as the budget
// allows: the largest entry count whose layout fits.
func openSharedmap(budget int64, valueSize int, dir string) (c cache, note string, err error) {
	path := filepath.Join(dir, fmt.Sprintf("hitratio-%d.map", os.Getpid()))
	defer func() {
		if c == nil {
			removeMap(path)
		}
	}()
	size := func(entries int) (int64, error) {
		m, err := openMap(path, opts(entries, valueSize))
		if err != nil {
			return 0, err
		}
		defer m.Close()
		return m.Stats().FileSize, nil
	}
	lo, hi := 1, int(budget/int64(16+valueSize))*2
	for lo < hi {
		mid := (lo + hi + 1) / 2
		n, err := size(mid)
		if err != nil {
			return nil, "", err
		}
		if n <= budget {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == 1 {
		if n, err := size(1); err != nil {
			return nil, "", err
		} else if n > budget {
			return nil, "", fmt.Errorf("-memory %d MiB is too small for sharedmap: a map of one entry of %d B takes %d B", budget>>20, valueSize, n)
		}
	}
	m, err := openMap(path, opts(lo, valueSize))
	if err != nil {
		return nil, "", err
	}
	return &sharedCache{m: m, path: path, sized: lo}, "", nil
}

func opts(entries, valueSize int) *hashmap.Options {
	return &hashmap.Options{Entries: entries, AverageKeySize: 16, AverageValueSize: valueSize, MaxBloatFactor: 1,
		Cache: true, NoPrefault: true}
}

type sharedCache struct {
	m     *hashmap.Map
	path  string
	buf   []byte
	sized int // the Entries its file was sized for
}

func (c *sharedCache) get(k []byte) bool {
	var err error
	c.buf, err = c.m.GetInto(c.buf[:0], k)
	return err == nil
}
func (c *sharedCache) put(k, v []byte) {
	if err := c.m.Put(k, v); err != nil {
		fail(err)
	}
}

// note says how many entries the map was sized for and how many it held
// at the end: a cache map keeps per-segment headroom, and holds more than
// its Entries once full.
func (c *sharedCache) note() string {
	return fmt.Sprintf(" (sized for %d entries, held %d at the end)", c.sized, c.m.Len())
}

func (c *sharedCache) close() {
	fmt.Fprintf(os.Stderr, "sharedmap held %d entries at the end (%d evicted)\n", c.m.Len(), c.m.Stats().Evictions)
	c.m.Close()
	removeMap(c.path)
}

type ristrettoCache struct {
	c             *ristretto.Cache[string, []byte]
	sets, dropped int
}

func (c *ristrettoCache) get(k []byte) bool { _, ok := c.c.Get(string(k)); return ok }

// put counts the Sets ristretto drops: Set returns false for a new key
// its buffer has no room for (its Metrics.SetsDropped, without the cost
// of Metrics on every Get).
func (c *ristrettoCache) put(k, v []byte) {
	c.sets++
	if !c.c.Set(string(k), append([]byte(nil), v...), int64(len(k)+len(v))) {
		c.dropped++
	}
}
func (c *ristrettoCache) note() string {
	return fmt.Sprintf(" (%d of %d Sets dropped)", c.dropped, c.sets)
}
func (c *ristrettoCache) close() { c.c.Close() }

type fastCache struct{ c *fastcache.Cache }

func (c fastCache) get(k []byte) bool { return c.c.Has(k) }
func (c fastCache) put(k, v []byte)   { c.c.Set(k, v) }
func (c fastCache) close()            { c.c.Reset() }
