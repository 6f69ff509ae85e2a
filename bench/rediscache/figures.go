package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/redis/rueidis"
	"github.com/sharedmap/sharedmap/hashmap"
	"github.com/sharedmap/sharedmap/rediscache"
	"golang.org/x/sys/unix"
)

// The contenders' names, which the report and the targets look up.
const (
	nameMapGet      = "sharedmap Get (reference)"
	nameMapGetInto  = "sharedmap GetInto (reference)"
	nameRCGet       = "rediscache Get"
	nameRCGetInto   = "rediscache GetInto"
	nameDoCache     = "rueidis DoCache (client-side hit)"
	nameDoRoundTrip = "rueidis Do GET (round trip)"
)

// latencyFigure fills the reference map, the rediscache map and the
// client's DoCache with every key, measures each contender's hits, and
// says how many of rediscache's reads during the measurement were hits.
func latencyFigure(ctx context.Context, cfg config, client rueidis.Client, ks *keyset, dir string, progress func(string)) ([]figure, string, error) {
	ref, err := hashmap.Open(filepath.Join(dir, "reference.map"), mapOptions(cfg))
	if err != nil {
		return nil, "", err
	}
	defer ref.Close()
	header := make([]byte, headerSize)
	for i, k := range ks.keyBytes {
		if err := ref.Put(k, append(header[:headerSize:headerSize], ks.value(i)...)); err != nil {
			return nil, "", fmt.Errorf("reference map: %w", err)
		}
	}
	cfg.mapPath = filepath.Join(dir, "latency.map")
	rc, err := openCache(ctx, cfg, client, false)
	if err != nil {
		return nil, "", err
	}
	defer rc.Close()
	progress("filling rediscache and DoCache")
	if _, err := fillRediscache(ctx, rc, ks); err != nil {
		return nil, "", err
	}
	if _, err := fillDoCache(ctx, client, ks); err != nil {
		return nil, "", err
	}
	cs := contenders(ctx, ks, ref, rc, client)
	before := rc.Stats()
	figs, err := latencies(cs, cfg.runs, cfg.duration, progress)
	if err != nil {
		return nil, "", err
	}
	after := rc.Stats()
	clock := clockFigure(cfg.runs, cfg.duration/4)
	hits := after.Hits - before.Hits
	misses := after.Misses - before.Misses
	stale := after.StaleRefusals - before.StaleRefusals
	bumps := after.EpochBumps - before.EpochBumps
	note := fmt.Sprintf("Of rediscache's %d reads while measured, %d were hits, %d misses and %d stale refusals (reads sent to Redis while the tracker's watermark was older than MaxStaleness); "+
		"the epoch was bumped %d times meanwhile (each time the tracker lost or renewed its connection, everything cached became a miss), "+
		"and the rediscache figures include those misses' round trips.",
		hits+misses+stale, hits, misses, stale, bumps) + " " + clock
	return figs, note, nil
}

// contenders are the ways of reading a key the latency figure compares.
// Each checks the size of what it read, so that a miss cannot pass for a
// hit.
func contenders(ctx context.Context, ks *keyset, ref *hashmap.Map, rc *rediscache.Cache, client rueidis.Client) []contender {
	want := ks.valueSize
	check := func(name string, i, n int, err error, size int) error {
		if err != nil {
			return fmt.Errorf("%s %s: %w", name, ks.keys[ks.key(i)], err)
		}
		if n != size {
			return fmt.Errorf("%s %s: %d bytes, want %d", name, ks.keys[ks.key(i)], n, size)
		}
		return nil
	}
	buffered := func(get func(dst []byte, i int) ([]byte, error), size int) func() func(int) error {
		return func() func(int) error {
			buf := make([]byte, 0, 2*size)
			return func(i int) error {
				v, err := get(buf[:0], i)
				return check("GetInto", i, len(v), err, size)
			}
		}
	}
	return []contender{
		{nameMapGet, func() func(int) error {
			return func(i int) error {
				v, err := ref.Get(ks.keyBytes[ks.key(i)])
				return check("Get", i, len(v), err, headerSize+want)
			}
		}},
		{nameMapGetInto, buffered(func(dst []byte, i int) ([]byte, error) {
			return ref.GetInto(dst, ks.keyBytes[ks.key(i)])
		}, headerSize+want)},
		{nameRCGet, func() func(int) error {
			return func(i int) error {
				v, err := rc.Get(ctx, ks.keys[ks.key(i)])
				return check("Get", i, len(v), err, want)
			}
		}},
		{nameRCGetInto, buffered(func(dst []byte, i int) ([]byte, error) {
			return rc.GetInto(ctx, dst, ks.keys[ks.key(i)])
		}, want)},
		{nameDoCache, func() func(int) error {
			return func(i int) error {
				s, err := client.DoCache(ctx, client.B().Get().Key(ks.keys[ks.key(i)]).Cache(), docacheTTL).ToString()
				return check("DoCache", i, len(s), err, want)
			}
		}},
		{nameDoRoundTrip, func() func(int) error {
			return func(i int) error {
				s, err := client.Do(ctx, client.B().Get().Key(ks.keys[ks.key(i)]).Build()).ToString()
				return check("Do GET", i, len(s), err, want)
			}
		}},
	}
}

// clockFigure says what reading CLOCK_MONOTONIC costs on this machine as
// a system call (golang.org/x/sys/unix.ClockGettime), against time.Now,
// which the runtime serves from the vDSO: a hit that reads the clock pays
// the one or the other.
func clockFigure(runs int, d time.Duration) string {
	var sys, vdso []float64
	for range runs {
		var ts unix.Timespec
		x, _ := measure(d, 1, contender{"clock_gettime", func() func(int) error {
			return func(int) error { return unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) }
		}})
		sys = append(sys, x)
		var sink int64
		y, _ := measure(d, 1, contender{"time.Now", func() func(int) error {
			return func(int) error { sink += time.Now().UnixNano(); return nil }
		}})
		vdso = append(vdso, y)
	}
	return fmt.Sprintf("On this machine clock_gettime(CLOCK_MONOTONIC) as a system call (golang.org/x/sys/unix) costs %s, time.Now (vDSO) %s (medians).",
		ns(median(sys)), ns(median(vdso)))
}
