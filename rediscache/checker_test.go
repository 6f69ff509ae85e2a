//go:build linux

package rediscache_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The checker of the guarantee. Helper processes write versioned values
// (a key's value is its version number, counting up from 1, then padding)
// and read them back through the package, and report every write and read
// with its instants on CLOCK_MONOTONIC, which all processes of the host
// share. The history they build is checked against what the package
// promises:
//
//   - staleness: a read that began at r and returned version v of key k
//     (or "absent") is stale when an event that surely followed v (the write
//     of v+1, a FLUSHALL or a Redis restart begun after v's write
//     completed) completed before r; it must not be stale by more than
//     MaxStaleness;
//   - read-your-writes: a read that began after a Set through the package
//     returned, in any process, returns that version or a later one (or
//     "absent" by an event that may have followed that Set);
//   - TTL: a read never returns a value after the instant Redis expired it
//     (its write's completion plus its TTL, or a PEXPIRE's; a PEXPIRE is a
//     write, so an entry cached before it may be served for MaxStaleness
//     after it completed).
//
// Every instant a helper records errs on the side that makes the check
// lenient: a write's completion is taken after the call returned, and a
// read's start before the call began. A violation reported is a real one.

// A write is one completed write of a key's version.
type write struct {
	key        string
	ver        int64
	start, end int64 // monotonic ns: the call's start and return
	pkg        bool  // through the package's Set or Del (else a plain client)
	ttl        int64 // ns; 0: no expiry
	del        bool  // a delete: this version's value is absence
}

// A read is one Get through the package that returned a value or absent.
type read struct {
	key        string
	ver        int64 // -1: absent (ErrNotFound)
	start, end int64
	who        string // the helper that read
}

// A wipe is an event that removes every key: FLUSHALL or a Redis restart.
type wipe struct {
	what       string
	start, end int64
}

// A pexpire is a PEXPIRE of a key that its writers leave alone.
type pexpire struct {
	key        string
	start, end int64
	ttl        int64
}

// history gathers the events the helpers and the test report.
type history struct {
	mu       sync.Mutex
	writes   map[string][]write
	reads    []read
	wipes    []wipe
	pexpires []pexpire
	bad      []string // values that no writer wrote, helpers' failures
}

func newHistory() *history { return &history{writes: map[string][]write{}} }

func (h *history) addWrite(w write) {
	h.mu.Lock()
	h.writes[w.key] = append(h.writes[w.key], w)
	h.mu.Unlock()
}

func (h *history) addRead(r read) {
	h.mu.Lock()
	h.reads = append(h.reads, r)
	h.mu.Unlock()
}

func (h *history) addWipe(w wipe) {
	h.mu.Lock()
	h.wipes = append(h.wipes, w)
	h.mu.Unlock()
}

func (h *history) addPexpire(p pexpire) {
	h.mu.Lock()
	h.pexpires = append(h.pexpires, p)
	h.mu.Unlock()
}

func (h *history) addBad(s string) {
	h.mu.Lock()
	h.bad = append(h.bad, s)
	h.mu.Unlock()
}

// limits are what the check holds the history to.
type limits struct {
	maxStaleness time.Duration
	// ttlSlack is how far past its Redis expiry a value may be read:
	// Redis keeps expiry instants in whole milliseconds.
	ttlSlack time.Duration
}

// report is the check's outcome.
type report struct {
	violations []string
	reads      int
	absent     int
	writes     int
	plain      int
	// worst is the largest staleness of a read: how long before the read
	// began an event that surely superseded its value had completed.
	worst     time.Duration
	worstRead string
	staleN    int // reads stale by more than 0
	// lagPlain and lagPkg are, for each write, the time from its
	// completion to the start of the first read, in any reader, that
	// returned it or a later version.
	lagPlain, lagPkg []time.Duration
	// readGap is the median time between reads of one key (the lags'
	// resolution).
	readGap time.Duration
	// ttlOver is the furthest past its write's completion plus TTL that a
	// read began and still returned the value (negative: none past).
	ttlOver time.Duration
	ttlN    int // reads checked against a TTL
}

const noTime = int64(-1 << 63)

// staleValue gathers the reads of one stale value.
type staleValue struct {
	n     int
	worst int64
	why   string
	at    int // its line in report.violations
}

// check checks the history against lim.
func (h *history) check(lim limits) *report {
	h.mu.Lock()
	defer h.mu.Unlock()
	rep := &report{worst: -1 << 62, ttlOver: -1 << 62}
	for _, s := range h.bad {
		rep.violations = append(rep.violations, s)
	}
	ms := int64(lim.maxStaleness)
	for k, ws := range h.writes {
		sort.Slice(ws, func(i, j int) bool { return ws[i].ver < ws[j].ver })
		for i := 1; i < len(ws); i++ {
			if ws[i].ver == ws[i-1].ver {
				rep.violations = append(rep.violations, fmt.Sprintf("%s: version %d written twice", k, ws[i].ver))
			}
		}
		rep.writes += len(ws)
		for _, w := range ws {
			if !w.pkg {
				rep.plain++
			}
		}
	}
	byKey := map[string][]read{}
	for _, r := range h.reads {
		byKey[r.key] = append(byKey[r.key], r)
	}
	staleSeen := map[string]*staleValue{}
	var gaps []time.Duration
	for k, rs := range byKey {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
		for i := 1; i < len(rs); i++ {
			gaps = append(gaps, time.Duration(rs[i].start-rs[i-1].start))
		}
		ws := h.writes[k]
		for _, r := range rs {
			rep.reads++
			if r.ver < 0 {
				rep.absent++
			} else if i := find(ws, r.ver); i < 0 || ws[i].del {
				rep.violations = append(rep.violations, fmt.Sprintf("%s read version %d of %s, which no writer wrote", r.who, r.ver, r.key))
				continue
			}
			stale, why := h.staleness(ws, r)
			if time.Duration(stale) > rep.worst {
				rep.worst, rep.worstRead = time.Duration(stale), why
			}
			if stale > 0 {
				rep.staleN++
			}
			if stale > ms {
				// One line per stale value, with its worst read.
				id := fmt.Sprintf("%s %d", r.key, r.ver)
				if n := staleSeen[id]; n == nil {
					staleSeen[id] = &staleValue{n: 1, worst: stale, at: len(rep.violations)}
					rep.violations = append(rep.violations, "")
				} else {
					n.n++
					n.worst = max(n.worst, stale)
				}
				if n := staleSeen[id]; n.worst == stale {
					n.why = why
				}
			}
			if v := h.readYourWrites(ws, r); v != "" {
				rep.violations = append(rep.violations, v)
			}
			if v := h.checkTTL(ws, r, lim, rep); v != "" {
				rep.violations = append(rep.violations, v)
			}
		}
		for _, w := range ws {
			if lag, ok := firstSeen(rs, w); ok {
				if w.pkg {
					rep.lagPkg = append(rep.lagPkg, lag)
				} else {
					rep.lagPlain = append(rep.lagPlain, lag)
				}
			}
		}
	}
	for _, n := range staleSeen {
		rep.violations[n.at] = fmt.Sprintf("stale by up to %v > MaxStaleness %v in %d reads, the worst: %s",
			time.Duration(n.worst), lim.maxStaleness, n.n, n.why)
	}
	if len(gaps) > 0 {
		slices.Sort(gaps)
		rep.readGap = gaps[len(gaps)/2]
	}
	if len(rep.violations) > 20 {
		n := len(rep.violations)
		rep.violations = append(rep.violations[:20], fmt.Sprintf("... and %d more", n-20))
	}
	return rep
}

// find returns the index of version v in ws, or -1.
func find(ws []write, v int64) int {
	i := sort.Search(len(ws), func(i int) bool { return ws[i].ver >= v })
	if i < len(ws) && ws[i].ver == v {
		return i
	}
	return -1
}

// firstAfter returns the index of the first write that began after t, or
// len(ws).
func firstAfter(ws []write, t int64) int {
	return sort.Search(len(ws), func(i int) bool { return ws[i].start > t })
}

// staleness returns how long before r began an event that surely
// superseded what r returned had completed (noTime when none had), and a
// description of r.
func (h *history) staleness(ws []write, r read) (int64, string) {
	if r.ver >= 0 {
		i := find(ws, r.ver)
		if i < 0 {
			return noTime, ""
		}
		sup, by := int64(1<<62), ""
		if i+1 < len(ws) {
			sup, by = ws[i+1].end, fmt.Sprintf("version %d", ws[i+1].ver)
		}
		for _, wp := range h.wipes {
			if wp.start > ws[i].end && wp.end < sup {
				sup, by = wp.end, wp.what
			}
		}
		if sup == 1<<62 {
			return noTime, ""
		}
		return r.start - sup, fmt.Sprintf("%s read %s version %d at %s, superseded by %s completed at %s",
			r.who, r.key, r.ver, at(r.start), by, at(sup))
	}
	// Absent: the most lenient explanation counts. Each candidate cause
	// of absence is superseded by the first write that surely followed it.
	best, bestWhy := int64(1<<62), ""
	consider := func(cause string, sup int) {
		if sup >= len(ws) {
			best, bestWhy = noTime, ""
			return
		}
		if s := r.start - ws[sup].end; s < best && best != noTime {
			best = s
			bestWhy = fmt.Sprintf("%s read %s absent at %s (%s), superseded by version %d completed at %s",
				r.who, r.key, at(r.start), cause, ws[sup].ver, at(ws[sup].end))
		}
	}
	consider("never written", 0)
	for _, wp := range h.wipes {
		if wp.start <= r.end {
			consider(wp.what, firstAfter(ws, wp.end))
		}
	}
	for j, w := range ws {
		if w.ttl > 0 && w.start+w.ttl-int64(time.Millisecond) <= r.end {
			consider(fmt.Sprintf("version %d expired", w.ver), j+1)
		}
		if w.del && w.start <= r.end {
			consider(fmt.Sprintf("deleted as version %d", w.ver), j+1)
		}
	}
	for _, p := range h.pexpires {
		if p.key == r.key && p.start+p.ttl-int64(time.Millisecond) <= r.end {
			consider("PEXPIRE", firstAfter(ws, p.end))
		}
	}
	if best == 1<<62 {
		return noTime, ""
	}
	return best, bestWhy
}

// readYourWrites checks r against the last write through the package that
// returned before r began.
func (h *history) readYourWrites(ws []write, r read) string {
	n := sort.Search(len(ws), func(i int) bool { return ws[i].end >= r.start })
	j := n - 1
	for j >= 0 && !ws[j].pkg {
		j--
	}
	if j < 0 {
		return ""
	}
	w := ws[j]
	if r.ver >= w.ver {
		return ""
	}
	if r.ver < 0 {
		for _, wp := range h.wipes {
			if wp.end > w.start && wp.start <= r.end {
				return ""
			}
		}
		for _, x := range ws[j:] {
			if x.ttl > 0 && x.start+x.ttl-int64(time.Millisecond) <= r.end || x.del && x.start <= r.end {
				return ""
			}
		}
		for _, p := range h.pexpires {
			if p.key == r.key && p.end > w.start && p.start+p.ttl-int64(time.Millisecond) <= r.end {
				return ""
			}
		}
	}
	return fmt.Sprintf("read-your-writes: %s read %s version %d at %s, after Set of version %d returned at %s",
		r.who, r.key, r.ver, at(r.start), w.ver, at(w.end))
}

// checkTTL checks that r did not return a value Redis had expired.
func (h *history) checkTTL(ws []write, r read, lim limits, rep *report) string {
	if r.ver < 0 {
		return ""
	}
	i := find(ws, r.ver)
	if i < 0 {
		return ""
	}
	w := ws[i]
	if w.ttl > 0 {
		rep.ttlN++
		over := time.Duration(r.start - (w.end + w.ttl))
		rep.ttlOver = max(rep.ttlOver, over)
		if over > lim.ttlSlack {
			return fmt.Sprintf("TTL: %s read %s version %d at %s, %v after its TTL of %v ran out",
				r.who, r.key, r.ver, at(r.start), over, time.Duration(w.ttl))
		}
	}
	for _, p := range h.pexpires {
		if p.key != r.key || p.start <= w.end || (i+1 < len(ws) && ws[i+1].start < p.end) {
			continue // not a PEXPIRE of this version
		}
		rep.ttlN++
		over := time.Duration(r.start - (p.end + p.ttl))
		if r.start > p.end+int64(lim.maxStaleness) {
			rep.ttlOver = max(rep.ttlOver, over)
		}
		if r.start > p.end+int64(lim.maxStaleness) && over > lim.ttlSlack {
			return fmt.Sprintf("TTL: %s read %s version %d at %s, %v after its PEXPIRE %v (completed at %s) ran out",
				r.who, r.key, r.ver, at(r.start), over, time.Duration(p.ttl), at(p.end))
		}
	}
	return ""
}

// firstSeen returns the time from w's completion to the start of the
// first read of rs (sorted by start) that returned w or a later version.
func firstSeen(rs []read, w write) (time.Duration, bool) {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].start >= w.end })
	for ; i < len(rs); i++ {
		if rs[i].ver >= w.ver || rs[i].ver < 0 && w.del {
			return time.Duration(rs[i].start - w.end), true
		}
		if rs[i].ver < 0 || rs[i].start-w.end > int64(5*time.Second) {
			return 0, false // wiped or expired meanwhile: no lag to measure
		}
	}
	return 0, false
}

// at prints a monotonic instant as seconds, for messages.
func at(t int64) string { return fmt.Sprintf("%.6fs", float64(t)/1e9) }

// percentile returns the p-th percentile of ds (sorting ds).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, len(ds)*p/100)]
}

// String summarizes rep for the test log.
func (rep *report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d reads (%d absent), %d writes (%d by a plain client)", rep.reads, rep.absent, rep.writes, rep.plain)
	if rep.worst > -1<<61 {
		fmt.Fprintf(&b, "; worst staleness %v (%d stale reads; the worst: %s)", rep.worst, rep.staleN, rep.worstRead)
	} else {
		fmt.Fprintf(&b, "; no stale read")
	}
	fmt.Fprintf(&b, "; invalidation lag after plain writes p50 %v p99 %v (n=%d), after Set p50 %v p99 %v (n=%d); reads of a key every %v",
		percentile(rep.lagPlain, 50), percentile(rep.lagPlain, 99), len(rep.lagPlain),
		percentile(rep.lagPkg, 50), percentile(rep.lagPkg, 99), len(rep.lagPkg), rep.readGap)
	if rep.ttlN > 0 {
		fmt.Fprintf(&b, "; %d reads under a TTL, latest %v past it", rep.ttlN, rep.ttlOver)
	}
	return b.String()
}

// TestCheckerFindsViolations feeds the checker histories that break each
// rule, so that a fault test passing means the rule held, not that the
// checker looked away.
func TestCheckerFindsViolations(t *testing.T) {
	msec := int64(time.Millisecond)
	ms := 250 * msec
	lim := limits{maxStaleness: time.Duration(ms), ttlSlack: 2 * time.Millisecond}
	base := func() *history {
		h := newHistory()
		h.addWrite(write{key: "k", ver: 1, start: 0, end: 10 * msec})
		h.addWrite(write{key: "k", ver: 2, start: 1000 * msec, end: 1010 * msec})
		h.addWrite(write{key: "k", ver: 3, start: 2000 * msec, end: 2010 * msec, pkg: true})
		return h
	}
	cases := []struct {
		name  string
		build func(h *history)
		want  string // "" : no violation
	}{
		{"fresh", func(h *history) { h.addRead(read{key: "k", ver: 3, start: 3000 * msec, end: 3010 * msec}) }, ""},
		{"stale within bound", func(h *history) { h.addRead(read{key: "k", ver: 1, start: 1010*msec + ms - 1, end: 1010*msec + ms}) }, ""},
		{"stale past bound", func(h *history) {
			h.addRead(read{key: "k", ver: 1, start: 1010*msec + ms + 1, end: 1010*msec + ms + 2})
		}, "stale by"},
		{"read your writes", func(h *history) { h.addRead(read{key: "k", ver: 2, start: 2011 * msec, end: 2020 * msec}) }, "read-your-writes"},
		{"absent never written", func(h *history) { h.addRead(read{key: "k", ver: -1, start: 10*msec + ms + 1, end: 10*msec + ms + 2}) }, "stale by"},
		{"absent after flush", func(h *history) {
			h.addWipe(wipe{what: "FLUSHALL", start: 2500 * msec, end: 2600 * msec})
			h.addRead(read{key: "k", ver: -1, start: 2700*msec + ms*4, end: 2700*msec + ms*4})
		}, ""},
		{"value after flush", func(h *history) {
			h.addWipe(wipe{what: "FLUSHALL", start: 2500 * msec, end: 2600 * msec})
			h.addRead(read{key: "k", ver: 3, start: 2600*msec + ms + 1, end: 2600*msec + ms + 2})
		}, "stale by"},
		{"absent after Del", func(h *history) {
			h.addWrite(write{key: "k", ver: 4, start: 3000 * msec, end: 3010 * msec, pkg: true, del: true})
			h.addRead(read{key: "k", ver: -1, start: 3020 * msec, end: 3030 * msec})
		}, ""},
		{"value after Del", func(h *history) {
			h.addWrite(write{key: "k", ver: 4, start: 3000 * msec, end: 3010 * msec, pkg: true, del: true})
			h.addRead(read{key: "k", ver: 3, start: 3020 * msec, end: 3030 * msec})
		}, "read-your-writes"},
		{"absent after a write that followed a delete", func(h *history) {
			h.addWrite(write{key: "k", ver: 4, start: 3000 * msec, end: 3010 * msec, del: true})
			h.addWrite(write{key: "k", ver: 5, start: 3100 * msec, end: 3110 * msec})
			h.addRead(read{key: "k", ver: -1, start: 3110*msec + ms + 1, end: 3110*msec + ms + 2})
		}, "stale by"},
		{"unwritten version", func(h *history) { h.addRead(read{key: "k", ver: 9, start: 3000 * msec, end: 3010 * msec}) }, "no writer wrote"},
		{"past TTL", func(h *history) {
			h.addWrite(write{key: "t", ver: 1, start: 0, end: 10 * msec, ttl: msec})
			h.addRead(read{key: "t", ver: 1, start: 10*msec + msec + 3*msec, end: 10*msec + msec + 3*msec})
		}, "TTL"},
		{"past PEXPIRE", func(h *history) {
			h.addWrite(write{key: "p", ver: 1, start: 0, end: 10 * msec})
			h.addPexpire(pexpire{key: "p", start: 100 * msec, end: 110 * msec, ttl: msec})
			h.addRead(read{key: "p", ver: 1, start: 110*msec + ms + 1, end: 110*msec + ms + 2})
		}, "PEXPIRE"},
		{"PEXPIRE within bound", func(h *history) {
			h.addWrite(write{key: "p", ver: 1, start: 0, end: 10 * msec})
			h.addPexpire(pexpire{key: "p", start: 100 * msec, end: 110 * msec, ttl: msec})
			h.addRead(read{key: "p", ver: 1, start: 110*msec + ms - 1, end: 110*msec + ms})
		}, ""},
	}
	for _, c := range cases {
		h := base()
		c.build(h)
		rep := h.check(lim)
		got := strings.Join(rep.violations, "\n")
		switch {
		case c.want == "" && got != "":
			t.Errorf("%s: unexpected violation: %s", c.name, got)
		case c.want != "" && !strings.Contains(got, c.want):
			t.Errorf("%s: want a violation %q, got %q", c.name, c.want, got)
		}
	}
}
