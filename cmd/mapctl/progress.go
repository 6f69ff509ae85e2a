package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// progress draws a one-line progress report on a terminal (stderr: the
// data goes to stdout), at most ten times a second, redrawn in place with
// a carriage return:
//
//	loading [######..............]  31% 1,234,567 lines 456,789/s ETA 6s
//
// The bar, percentage and ETA need total, the size of the whole job in the
// units of update's done (bytes of input for load); without it the line
// says the count and the rate. The rate is the count over the time since
// the job began (newProgress), and the ETA that time scaled by the work
// left: steady once the job is, without the jumps of a rate over the last
// interval.
// Every line fits 80 columns.
type progress struct {
	w     io.Writer
	on    bool      // draw at all: w is a terminal
	total int64     // size of the job, in units of done; 0 if unknown
	verb  string    // what is going on; "loading" if empty
	unit  string    // what the count counts; "entries" if empty
	start time.Time // when the job began
	last  time.Time // when the line was last drawn
	drawn bool
}

// newProgress returns a progress line drawn on w if w is a terminal; its
// clock starts now.
func newProgress(w io.Writer, verb, unit string, total int64) *progress {
	now := time.Now()
	return &progress{w: w, on: isTerminal(w), total: total, verb: verb, unit: unit, start: now, last: now}
}

// update redraws the line, if progressEvery (a tenth of a second) has
// passed since the last time: done of total is finished, and count things were handled.
func (p *progress) update(done, count int64) {
	if !p.on {
		return
	}
	now := time.Now()
	if now.Sub(p.last) < progressEvery {
		return
	}
	p.last = now
	p.drawn = true
	line := progressLine(cmp.Or(p.verb, "loading"), cmp.Or(p.unit, "entries"), done, p.total, count, now.Sub(p.start))
	fmt.Fprintf(p.w, "\r%s\033[K", line[:min(len(line), progressMax)])
}

// done erases the line, if one is drawn, for what the command prints next.
// A later update draws it again.
func (p *progress) done() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}

// progressEvery is how often, at most, a progress line is drawn.
var progressEvery = 100 * time.Millisecond

// progressWidth is how many columns the bar takes: with a count under a
// billion and a rate under a hundred million a second, the line stays
// within progressMax, where larger figures are cut off.
// progressMax is one less than 80, the narrowest terminal commonly met:
// some terminals wrap a line that reaches their last column, and the
// carriage return would then redraw only the wrapped part.
const (
	progressWidth = 20
	progressMax   = 79
)

// progressLine is the line progress draws, after elapsed time.
func progressLine(verb, unit string, done, total, count int64, elapsed time.Duration) string {
	var b strings.Builder
	b.WriteString(verb)
	if total > 0 {
		frac := min(float64(done)/float64(total), 1)
		n := int(frac * progressWidth)
		fmt.Fprintf(&b, " [%s%s] %3.0f%%", strings.Repeat("#", n), strings.Repeat(".", progressWidth-n), frac*100)
	}
	fmt.Fprintf(&b, " %s %s", thousands(uint64(count)), unit)
	if secs := elapsed.Seconds(); secs > 0 {
		fmt.Fprintf(&b, " %s/s", thousands(uint64(float64(count)/secs)))
	}
	if total > 0 && done > 0 {
		left := elapsed.Seconds() * float64(max(total-done, 0)) / float64(done)
		b.WriteString(" ETA " + shortDuration(left))
	}
	return b.String()
}

// shortDuration writes secs seconds rounded to what an ETA needs: 45s,
// 3m05s, 2h07m, or >99h.
func shortDuration(secs float64) string {
	switch s := int64(math.Round(secs)); {
	case secs >= 100*3600:
		return ">99h"
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	default:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
}
