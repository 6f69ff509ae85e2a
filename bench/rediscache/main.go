// Command rediscache measures sharedmap's rediscache, the host-wide cache
// in front of Redis, beside what a process would use instead, in one run:
//
//   - hit latency, 1 goroutine and GOMAXPROCS goroutines, Zipf keys over
//     -keys keys of -value bytes under one prefix: rediscache Get and
//     GetInto; rueidis DoCache (client-side caching, a cache per process);
//     a plain GET round trip (rueidis Do); and, as the reference, a plain
//     sharedmap Get and GetInto on a map of the same shape (the same keys,
//     values with rediscache's 16-byte header, the same options);
//   - memory: -procs processes holding every key through one rediscache
//     map, against as many processes each holding them in a rueidis
//     DoCache, as the sum of their Pss (/proc/PID/smaps_rollup), which
//     charges a shared page to its sharers in equal parts and so counts the
//     map once; and as many bare processes (a rueidis client, nothing
//     cached) for the part that is the Go runtime's.
//
// It prints each figure as it comes and a table, with the targets the
// cache must meet and whether it does, to -out/results.md. redis-server
// comes from PATH (apt-get install redis-server) and runs on a unix socket
// in a temporary directory, unless -redis-socket names one already up.
//
//	cd bench && go run ./rediscache -runs 5 -duration 500ms
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/rueidis"
	"github.com/sharedmap/sharedmap/hashmap"
	"github.com/sharedmap/sharedmap/rediscache"
)

// config is the run's parameters, from the flags; a child of the memory
// figure gets the same flags and so the same keys.
type config struct {
	keys, valueSize, runs, procs int
	prefix                       string
	zipfS                        float64
	duration                     time.Duration
	redisSocket, mapPath, out    string
	skipMemory, skipLatency      bool
}

func main() {
	var cfg config
	child := flag.String("child", "", "internal: run as one process of the memory figure (rediscache, docache or baseline)")
	flag.IntVar(&cfg.keys, "keys", 100_000, "keys cached")
	flag.IntVar(&cfg.valueSize, "value", 64, "value size, bytes")
	flag.StringVar(&cfg.prefix, "prefix", "rcbench:", "the one prefix every key has (rediscache's Prefixes)")
	flag.Float64Var(&cfg.zipfS, "zipf", 1.1, "Zipf exponent of the requests (> 1)")
	flag.IntVar(&cfg.runs, "runs", 5, "runs of each latency figure; the median is reported with the range")
	flag.DurationVar(&cfg.duration, "duration", 500*time.Millisecond, "least time of each latency measurement")
	flag.IntVar(&cfg.procs, "procs", 8, "processes of the memory figure")
	flag.StringVar(&cfg.redisSocket, "redis-socket", os.Getenv("BENCH_REDIS_SOCKET"), "unix socket of a running redis-server (default: start one)")
	flag.StringVar(&cfg.mapPath, "map", "", "internal: the shared map of the memory figure")
	flag.StringVar(&cfg.out, "out", "results/rediscache", "directory to write results.md to (empty: stdout only)")
	flag.BoolVar(&cfg.skipMemory, "no-memory", false, "skip the memory figure")
	flag.BoolVar(&cfg.skipLatency, "no-latency", false, "skip the latency figure")
	flag.Parse()
	if err := cfg.check(); err != nil {
		fmt.Fprintln(os.Stderr, "rediscache:", err)
		os.Exit(2)
	}
	if *child != "" {
		if err := childMain(*child, cfg); err != nil {
			fmt.Fprintf(os.Stderr, "rediscache -child %s: %v\n", *child, err)
			os.Exit(1)
		}
		return
	}
	if err := run(cfg); err != nil {
		cleanup()
		fmt.Fprintln(os.Stderr, "rediscache:", err)
		os.Exit(1)
	}
	cleanup()
}

func (cfg *config) check() error {
	switch {
	case cfg.keys < 1:
		return fmt.Errorf("bad -keys %d: want at least 1", cfg.keys)
	case cfg.valueSize < 1:
		return fmt.Errorf("bad -value %d: want at least 1 byte", cfg.valueSize)
	case cfg.prefix == "":
		return fmt.Errorf("bad -prefix: want a non-empty prefix")
	case !(cfg.zipfS > 1):
		return fmt.Errorf("bad -zipf %v: want a number > 1", cfg.zipfS)
	case cfg.runs < 1:
		return fmt.Errorf("bad -runs %d: want at least 1", cfg.runs)
	case cfg.duration <= 0:
		return fmt.Errorf("bad -duration %v: want more than 0", cfg.duration)
	case cfg.procs < 1:
		return fmt.Errorf("bad -procs %d: want at least 1", cfg.procs)
	}
	return nil
}

// cleanups are undone on exit and on SIGINT or SIGTERM: the Redis server
// this program started and the directory of its maps.
var cleanups struct {
	sync.Mutex
	fns []func()
}

func atCleanup(fn func()) {
	cleanups.Lock()
	cleanups.fns = append(cleanups.fns, fn)
	cleanups.Unlock()
}

func cleanup() {
	cleanups.Lock() // held to the exit: nothing is added after
	for i := len(cleanups.fns) - 1; i >= 0; i-- {
		cleanups.fns[i]()
	}
	cleanups.fns = nil
}

func run(cfg config) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		cleanup()
		fmt.Fprintf(os.Stderr, "rediscache: %v: stopped\n", sig)
		os.Exit(3)
	}()
	if cfg.redisSocket == "" {
		srv, err := startRedis()
		if err != nil {
			return err
		}
		atCleanup(srv.stop)
		cfg.redisSocket = srv.sock
	}
	dir, err := os.MkdirTemp("", "rcbench-")
	if err != nil {
		return err
	}
	atCleanup(func() { os.RemoveAll(dir) })

	ctx := context.Background()
	client, err := rueidis.NewClient(clientOption(cfg.redisSocket))
	if err != nil {
		return fmt.Errorf("redis at %s: %w", cfg.redisSocket, err)
	}
	defer client.Close()
	ks := newKeyset(cfg.prefix, cfg.keys, cfg.valueSize, cfg.zipfS)
	if err := preload(ctx, client, ks); err != nil {
		return err
	}
	rep := report{cfg: cfg, redisVersion: serverVersion(ctx, client), gomaxprocs: runtime.GOMAXPROCS(0), loadBefore: loadAverage()}
	progress := func(s string) { fmt.Fprintln(os.Stderr, s) }
	if !cfg.skipLatency {
		if rep.latency, rep.hitNote, err = latencyFigure(ctx, cfg, client, ks, dir, progress); err != nil {
			return err
		}
	}
	if !cfg.skipMemory {
		args := []string{"-keys", fmt.Sprint(cfg.keys), "-value", fmt.Sprint(cfg.valueSize), "-prefix", cfg.prefix,
			"-zipf", fmt.Sprint(cfg.zipfS), "-redis-socket", cfg.redisSocket}
		for _, kind := range []string{kindRediscache, kindDoCache, kindBaseline} {
			s, err := processes(kind, cfg.procs, append(args, "-map", filepath.Join(dir, "memory-"+kind+".map")))
			if err != nil {
				return err
			}
			progress(fmt.Sprintf("memory: %d %s processes: Pss %.1f MiB, Rss %.1f MiB", cfg.procs, kind, mib(s.pss), mib(s.rss)))
			rep.memory = append(rep.memory, memoryRow{kind, s})
		}
	}
	rep.loadAfter = loadAverage()
	md := rep.markdown()
	fmt.Print(md)
	if cfg.out != "" {
		if err := os.MkdirAll(cfg.out, 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(cfg.out, "results.md"), []byte(md), 0o644)
	}
	return nil
}

// mapOptions is the shape of the rediscache map and of the reference map:
// room for every key with a quarter to spare (a cache map evicts when
// full), values of the cache's 16-byte header and the value.
func mapOptions(cfg config) *hashmap.Options {
	return &hashmap.Options{
		Entries:          cfg.keys + cfg.keys/4 + 16,
		AverageKeySize:   len(cfg.prefix) + 8,
		AverageValueSize: headerSize + cfg.valueSize,
		Cache:            true,
	}
}

// headerSize is the header rediscache puts before each value in the map
// (its epoch and kind).
const headerSize = 16

// maxStaleness is rediscache's default, written out so that waitFresh
// can wait for a lag well inside it.
const maxStaleness = 250 * time.Millisecond

// openCache opens the rediscache map at cfg.mapPath over client.
func openCache(ctx context.Context, cfg config, client rueidis.Client, noTracker bool) (*rediscache.Cache, error) {
	return rediscache.Open(ctx, rediscache.Options{
		Path:         cfg.mapPath,
		Map:          mapOptions(cfg),
		Client:       client,
		ClientOption: clientOption(cfg.redisSocket),
		Prefixes:     []string{cfg.prefix},
		MaxStaleness: maxStaleness,
		NoTracker:    noTracker,
	})
}

func mib(kB int64) float64 { return float64(kB) / 1024 }

// trimFloat prints x without trailing zeros.
func trimFloat(x float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", x), "0"), ".")
}
