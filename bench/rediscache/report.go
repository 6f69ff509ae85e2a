package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
)

type memoryRow struct {
	kind string
	s    smaps
}

// report is what a run measured, written out as markdown.
type report struct {
	cfg          config
	redisVersion string
	gomaxprocs   int
	latency      []figure
	hitNote      string
	memory       []memoryRow
	loadBefore   string // /proc/loadavg's 1-minute figure at the start and the end
	loadAfter    string
}

func (r *report) fig(name string) *figure {
	for i := range r.latency {
		if r.latency[i].name == name {
			return &r.latency[i]
		}
	}
	return nil
}

func (r *report) mem(kind string) *smaps {
	for i := range r.memory {
		if r.memory[i].kind == kind {
			return &r.memory[i].s
		}
	}
	return nil
}

// target is one of the goals rediscache is held to.
type target struct {
	what     string
	measured string
	met      bool
}

// targets are the goals: a hit within 2x a plain sharedmap Get, at least
// 100x faster than a GET round trip, at least 5x less memory than one
// client-side cache per process. Each latency goal is judged on the
// medians, for 1 goroutine and for GOMAXPROCS.
func (r *report) targets() []target {
	var ts []target
	ratio := func(what, num, den string, limit float64, atMost bool) {
		a, b := r.fig(num), r.fig(den)
		if a == nil || b == nil {
			return
		}
		for _, p := range []struct {
			label  string
			xs, ys []float64
		}{{"1 goroutine", a.one, b.one}, {fmt.Sprintf("%d goroutines", r.gomaxprocs), a.par, b.par}} {
			x := median(p.xs) / median(p.ys)
			t := target{what: fmt.Sprintf("%s, %s", what, p.label)}
			if atMost {
				t.measured = fmt.Sprintf("%.2fx (%s / %s)", x, ns(median(p.xs)), ns(median(p.ys)))
				t.met = x <= limit
			} else {
				x = 1 / x
				t.measured = fmt.Sprintf("%.0fx (%s / %s)", x, ns(median(p.ys)), ns(median(p.xs)))
				t.met = x >= limit
			}
			ts = append(ts, t)
		}
	}
	ratio("rediscache Get within 2x sharedmap Get", nameRCGet, nameMapGet, 2, true)
	ratio("rediscache GetInto within 2x sharedmap GetInto", nameRCGetInto, nameMapGetInto, 2, true)
	ratio("rediscache Get at least 100x faster than a GET round trip", nameRCGet, nameDoRoundTrip, 100, false)
	ratio("rediscache GetInto at least 100x faster than a GET round trip", nameRCGetInto, nameDoRoundTrip, 100, false)
	if rc, dc := r.mem(kindRediscache), r.mem(kindDoCache); rc != nil && dc != nil {
		x := float64(dc.pss) / float64(rc.pss)
		ts = append(ts, target{
			what:     fmt.Sprintf("%d processes: at least 5x less memory than %d DoCaches (total Pss)", r.cfg.procs, r.cfg.procs),
			measured: fmt.Sprintf("%.1fx (%.1f MiB / %.1f MiB)", x, mib(dc.pss), mib(rc.pss)),
			met:      x >= 5,
		})
	}
	return ts
}

func (r *report) markdown() string {
	var b strings.Builder
	cfg := r.cfg
	fmt.Fprintf(&b, "# rediscache: hit latency and memory beside rueidis\n\n")
	fmt.Fprintf(&b, "`cd bench && go run ./rediscache -keys %d -value %d -runs %d -duration %v -procs %d -zipf %s`: "+
		"redis-server %s on a unix socket; %s, GOMAXPROCS %d, %s %s/%s. "+
		"%d keys of %d B under the prefix %q, requests Zipf-distributed (s = %s) over them.\n\n",
		cfg.keys, cfg.valueSize, cfg.runs, cfg.duration, cfg.procs, trimFloat(cfg.zipfS),
		r.redisVersion, cpuModel(), r.gomaxprocs, runtime.Version(), runtime.GOOS, runtime.GOARCH,
		cfg.keys, cfg.valueSize, cfg.prefix, trimFloat(cfg.zipfS))
	fmt.Fprintf(&b, "The machine's load average (1 minute) was %s at the start and %s at the end: "+
		"on a machine shared with other work, the spread of the runs says how far to trust a median.\n\n", r.loadBefore, r.loadAfter)
	if ts := r.targets(); len(ts) > 0 {
		fmt.Fprintf(&b, "## Targets\n\n| target | measured | |\n|---|---|---|\n")
		for _, t := range ts {
			verdict := "met"
			if !t.met {
				verdict = "**unmet**"
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", t.what, t.measured, verdict)
		}
		b.WriteString("\n")
	}
	if len(r.latency) > 0 {
		fmt.Fprintf(&b, "## Hit latency\n\nns per read, median of %d runs (min–max); each measurement lasts at least %v, "+
			"the contenders taking turns within a run. With %d goroutines it is wall time over all their reads, "+
			"so perfect scaling divides it by %d.\n\n", cfg.runs, cfg.duration, r.gomaxprocs, r.gomaxprocs)
		fmt.Fprintf(&b, "| read | 1 goroutine | %d goroutines |\n|---|---:|---:|\n", r.gomaxprocs)
		for _, f := range r.latency {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", f.name, cell(f.one), cell(f.par))
		}
		fmt.Fprintf(&b, "\nThe reference map has the rediscache map's shape: the same keys and options, "+
			"values of %d B (the cache's %d-byte header and the value). DoCache returns the value as a string (no copy); "+
			"Get returns a new slice; GetInto appends to the caller's buffer. %s\n\n", headerSize+cfg.valueSize, headerSize, r.hitNote)
	}
	if len(r.memory) > 0 {
		fmt.Fprintf(&b, "## Memory\n\n%d processes, each holding all %d keys (checked: a second pass hits every key), "+
			"after a GC that returns their garbage to the system. Pss from /proc/PID/smaps_rollup, summed over the processes: "+
			"a shared page counts once in all.\n\n", cfg.procs, cfg.keys)
		b.WriteString("| processes | total Pss | Pss per process | of it anonymous | of it file and shmem | total Rss |\n|---|---:|---:|---:|---:|---:|\n")
		labels := map[string]string{
			kindRediscache: "rediscache, one shared map",
			kindDoCache:    "rueidis DoCache, one cache each",
			kindBaseline:   "baseline: a rueidis client, nothing cached",
		}
		for _, m := range r.memory {
			s := m.s
			fmt.Fprintf(&b, "| %d × %s | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB |\n", cfg.procs, labels[m.kind],
				mib(s.pss), mib(s.pss)/float64(cfg.procs), mib(s.pssAnon), mib(s.pssFile+s.pssShmem), mib(s.rss))
		}
		if rc, dc, base := r.mem(kindRediscache), r.mem(kindDoCache), r.mem(kindBaseline); rc != nil && dc != nil && base != nil {
			fmt.Fprintf(&b, "\nAbove the baseline, the cached keys cost %.1f MiB through rediscache and %.1f MiB in %d DoCaches "+
				"(%.0f B a key and %.0f B a key in each process).\n",
				mib(rc.pss-base.pss), mib(dc.pss-base.pss), cfg.procs,
				float64(rc.pss-base.pss)*1024/float64(cfg.keys), float64(dc.pss-base.pss)*1024/float64(cfg.keys)/float64(cfg.procs))
		}
	}
	return b.String()
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), ":"))
		}
	}
	return "unknown CPU"
}

// loadAverage is the 1-minute load average from /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "unknown"
}
