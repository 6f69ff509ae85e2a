package hashmap

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
)

// WritePrometheus writes the metrics of several maps (see Metrics and
// MetricFamilies) in the Prometheus text exposition format; it needs no
// Prometheus library. Each map's samples are labelled map="name", with its
// key in named, and each metric's HELP and TYPE lines come once: write all
// the process's maps with one call (two calls into one exposition repeat
// them, which Prometheus rejects). Values are integers.
//
// Every process with a map open exports the same map-wide figures, read from
// the file, and its own, named sharedmap_process_* and labelled pid="its
// pid". With N processes sharing a map, aggregate map-wide series with max,
// never sum (which counts the map N times): max by (map)
// (sharedmap_stored_entries). Per-process figures add up with sum. Name a
// map alike in every process so its series line up. Map-wide counters start
// from zero only when the file is created; per-process ones at each Open.
//
// A closed map writes nothing; a nil one is an error, before anything is
// written.
func WritePrometheus(w io.Writer, named map[string]*Map) error {
	names := slices.Sorted(maps.Keys(named))
	perMap := make([][]Metric, len(names))
	for i, name := range names {
		m := named[name]
		if m == nil {
			return fmt.Errorf("write Prometheus metrics: map %q is nil", name)
		}
		perMap[i] = m.Metrics()
	}
	pid := strconv.Itoa(os.Getpid())
	var b []byte
	next := make([]int, len(names)) // each map's next Metric: they come in metricDefs's order
	for _, d := range metricDefs {
		header := false
		for i, ms := range perMap {
			if next[i] >= len(ms) || ms[next[i]].Name != d.Name {
				continue
			}
			v := ms[next[i]].Value
			next[i]++
			if !header {
				kind := "gauge"
				if d.Counter {
					kind = "counter"
				}
				b = fmt.Appendf(b, "# HELP %s %s\n# TYPE %s %s\n", d.Name, promHelp(d.Help), d.Name, kind)
				header = true
			}
			b = append(b, d.Name...)
			b = append(b, `{map="`...)
			b = append(b, promLabelValue(names[i])...)
			if d.PerProcess {
				b = append(b, `",pid="`...)
				b = append(b, pid...)
			}
			b = append(b, `"} `...)
			b = strconv.AppendInt(b, v, 10)
			b = append(b, '\n')
		}
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write Prometheus metrics: %w", err)
	}
	return nil
}

// WritePrometheus writes the metrics of this map alone, labelled
// map="name", as the package's WritePrometheus does (see it for the
// metrics' scopes and how to query them over several processes). It is
// for a program with one map: a program with several writes them with
// one call of the package's WritePrometheus, since writing them one after
// the other repeats each metric's HELP and TYPE lines.
func (m *Map) WritePrometheus(w io.Writer, name string) error {
	return WritePrometheus(w, map[string]*Map{name: m})
}

// promLabelValue is name as a label value of the Prometheus text format:
// UTF-8 (other bytes become U+FFFD) with only backslash, double quote and
// newline escaped, which is all that format knows (Go's %q would write
// escapes such as \t and \x00 that Prometheus rejects).
func promLabelValue(name string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(strings.ToValidUTF8(name, "\uFFFD"))
}

// promHelp is text as the docstring of a HELP line: backslash and newline
// escaped.
func promHelp(text string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(text)
}
