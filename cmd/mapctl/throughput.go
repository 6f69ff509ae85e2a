package main

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// throughput says how much of a file a pass went over, in how long and
// at what rate: "634.0 MiB checked in 0.25 s, 2.5 GiB/s".
func throughput(bytes int64, done string, d time.Duration) string {
	s := fmt.Sprintf("%s %s in %s", binarySize(float64(bytes)), done, seconds(d))
	if d > 0 {
		s += fmt.Sprintf(", %s/s", binarySize(float64(bytes)/d.Seconds()))
	}
	return s
}

// binarySize is n bytes in the largest binary unit it reaches, to one
// decimal: "512 bytes", "120.6 KiB", "2.5 GiB".
func binarySize(n float64) string {
	units := []string{"bytes", "KiB", "MiB", "GiB", "TiB"}
	u := 0
	for n >= 1024 && u < len(units)-1 {
		n /= 1024
		u++
	}
	if u == 0 {
		return fmt.Sprintf("%.0f bytes", n)
	}
	return fmt.Sprintf("%.1f %s", n, units[u])
}

// seconds is d in seconds, to two significant decimals under ten.
func seconds(d time.Duration) string {
	switch s := d.Seconds(); {
	case s < 10:
		return fmt.Sprintf("%.2f s", s)
	case s < 100:
		return fmt.Sprintf("%.1f s", s)
	default:
		return fmt.Sprintf("%.0f s", s)
	}
}

// fileSize is the size of the map's file, 0 if it cannot be read.
func fileSize(m *hashmap.Map) int64 {
	st, err := os.Stat(m.Path())
	if err != nil {
		return 0
	}
	return st.Size()
}

// segmentProgress draws a progress line of segments checked, for
// hashmap.CheckOptions.Progress, and says on the line's terminal (or
// stderr) when the check seems stuck: no segment done for stallAfter,
// which is a segment whose lock is held, looked at again for up to the
// lock timeout. The callbacks and the timer's goroutine share the line
// under mu.
type segmentProgress struct {
	mu    sync.Mutex
	p     *progress
	stall *time.Timer
	said  bool // the stall message is out: once is enough
}

// stallAfter is how long a check may go without finishing a segment before
// it says why it is slow.
const stallAfter = 2 * time.Second

// newSegmentProgress starts a progress line on e.stderr of a pass over
// the segments, verb saying what the pass is ("checking"), and the stall
// timer, whose message names command c.
func newSegmentProgress(e *env, c *command, verb string) *segmentProgress {
	sp := &segmentProgress{p: newProgress(e.stderr, verb, "segments", 0)}
	sp.stall = time.AfterFunc(stallAfter, func() {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		if sp.said {
			return
		}
		sp.said = true
		sp.p.done() // the message on a line of its own; the next update draws the line again
		fmt.Fprintf(e.stderr, "mapctl: %s: still checking: a segment whose lock is held is looked at again for up to the lock timeout\n", c.name)
	})
	return sp
}

// update is the hashmap.CheckOptions.Progress callback: done of total
// segments checked.
func (sp *segmentProgress) update(done, total int) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.stall.Reset(stallAfter)
	sp.p.total = int64(total)
	sp.p.update(int64(done), int64(done))
}

// stop stops the timer and erases the line.
func (sp *segmentProgress) stop() {
	sp.stall.Stop()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.p.done()
}
