//go:build linux

package hashmap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// exposition is a text exposition read back: each family's HELP, TYPE and
// samples, in the order met.
type exposition struct {
	order    []string
	help     map[string][]string // every HELP line of the family (one, if well formed)
	kind     map[string][]string // likewise for TYPE
	samples  map[string][]promSample
	problems []string
}

type promSample struct {
	labels map[string]string
	value  string
}

// sampleLine is a sample of the text format as WritePrometheus writes it:
// name, labels, value.
var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$`)

// labelPair is one label of a sample line, its value still escaped.
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// parseExposition reads text, noting what a Prometheus parser rejects: a
// second HELP or TYPE for a family, a family's samples split by another's,
// samples before their TYPE.
func parseExposition(text string) exposition {
	e := exposition{help: map[string][]string{}, kind: map[string][]string{}, samples: map[string][]promSample{}}
	current := ""
	for line := range strings.Lines(text) {
		line = strings.TrimSuffix(line, "\n")
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			e.help[name] = append(e.help[name], help)
			current = e.start(current, name)
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, kind, _ := strings.Cut(rest, " ")
			e.kind[name] = append(e.kind[name], kind)
			current = e.start(current, name)
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			e.problems = append(e.problems, fmt.Sprintf("not a sample line: %q", line))
			continue
		}
		if len(e.kind[m[1]]) == 0 {
			e.problems = append(e.problems, fmt.Sprintf("%s: sample before its TYPE", m[1]))
		}
		current = e.start(current, m[1])
		s := promSample{labels: map[string]string{}, value: m[3]}
		for _, l := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[l[1]] = l[2]
		}
		e.samples[m[1]] = append(e.samples[m[1]], s)
	}
	for name, h := range e.help {
		if len(h) != 1 {
			e.problems = append(e.problems, fmt.Sprintf("%s: %d HELP lines", name, len(h)))
		}
	}
	for name, k := range e.kind {
		if len(k) != 1 {
			e.problems = append(e.problems, fmt.Sprintf("%s: %d TYPE lines", name, len(k)))
		}
	}
	return e
}

// start notes that the lines of family name begin or go on, and reports a
// family that comes back after another's lines.
func (e *exposition) start(current, name string) string {
	if name == current {
		return current
	}
	for _, seen := range e.order {
		if seen == name {
			e.problems = append(e.problems, fmt.Sprintf("%s: its lines are split by another family's", name))
			return name
		}
	}
	e.order = append(e.order, name)
	return name
}

// value is the sample of family name labelled map=mapName, or "" if none.
func (e *exposition) value(name, mapName string) string {
	for _, s := range e.samples[name] {
		if s.labels["map"] == mapName {
			return s.value
		}
	}
	return ""
}

// TestPrometheusSeveralMaps: two maps written into one exposition give
// each metric one HELP and one TYPE line and a sample per map, labelled
// with its name; this process's own figures carry its pid; counters are
// named _total, and every value is an integer.
func TestPrometheusSeveralMaps(t *testing.T) {
	dir := t.TempDir()
	a := mustOpen(t, filepath.Join(dir, "a"), &Options{Entries: 100})
	defer a.Close()
	b := mustOpen(t, filepath.Join(dir, "b"), &Options{Entries: 100, Cache: true})
	defer b.Close()
	if err := a.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	_, _ = a.Get([]byte("k"))
	_, _ = a.Get([]byte("nope"))

	var out strings.Builder
	if err := WritePrometheus(&out, map[string]*Map{"a": a, "b": b}); err != nil {
		t.Fatal(err)
	}
	e := parseExposition(out.String())
	for _, p := range e.problems {
		t.Error(p)
	}
	pid := strconv.Itoa(os.Getpid())
	for _, f := range MetricFamilies() {
		if f.Counter != strings.HasSuffix(f.Name, "_total") {
			t.Errorf("%s: counter %v, but a name ending in _total is for counters alone", f.Name, f.Counter)
		}
		if want := map[bool]string{true: "counter", false: "gauge"}[f.Counter]; len(e.kind[f.Name]) != 1 || e.kind[f.Name][0] != want {
			t.Errorf("%s: TYPE lines %q, want one %q", f.Name, e.kind[f.Name], want)
		}
		samples := e.samples[f.Name]
		if len(samples) != 2 || samples[0].labels["map"] != "a" || samples[1].labels["map"] != "b" {
			t.Errorf("%s: samples %v, want one for map a, then one for map b", f.Name, samples)
		}
		for _, s := range samples {
			if got := s.labels["pid"]; (got != "") != f.PerProcess || (f.PerProcess && got != pid) {
				t.Errorf("%s{map=%q}: pid label %q (PerProcess %v, pid %s)", f.Name, s.labels["map"], got, f.PerProcess, pid)
			}
			if _, err := strconv.ParseUint(s.value, 10, 64); err != nil {
				t.Errorf("%s{map=%q}: value %q is not an integer", f.Name, s.labels["map"], s.value)
			}
		}
	}
	for name, want := range map[string]string{"sharedmap_hits_total": "1", "sharedmap_misses_total": "1", "sharedmap_puts_total": "1",
		"sharedmap_process_hits_total": "1", "sharedmap_process_misses_total": "1", "sharedmap_stored_entries": "1",
		"sharedmap_lock_timeouts_total": "0", "sharedmap_overflow_tiers": "0"} {
		if got := e.value(name, "a"); got != want {
			t.Errorf("%s{map=\"a\"} = %q, want %q", name, got, want)
		}
		if got := e.value(name, "b"); got != "0" {
			t.Errorf("%s{map=\"b\"} = %q, want 0", name, got)
		}
	}
	if v := e.value("sharedmap_process_resident_bytes", "a"); v == "" || v == "0" {
		t.Errorf("sharedmap_process_resident_bytes{map=\"a\"} = %q; want the bytes mapped in", v)
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", out.String())
	}
}

// TestPrometheusValuesAreIntegers: the sizes of a map of twenty thousand
// entries, millions of bytes, are written as integers, not in exponent
// notation.
func TestPrometheusValuesAreIntegers(t *testing.T) {
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 20_000})
	defer m.Close()
	var out strings.Builder
	if err := m.WritePrometheus(&out, "big"); err != nil {
		t.Fatal(err)
	}
	integer := regexp.MustCompile(`^[a-z_]+\{[^}]*\} [0-9]+$`)
	for line := range strings.Lines(out.String()) {
		if line = strings.TrimSuffix(line, "\n"); !strings.HasPrefix(line, "#") && !integer.MatchString(line) {
			t.Errorf("not an integer sample: %q", line)
		}
	}
}

// TestPrometheusLabelEscaping: a map name with what the format escapes, a
// tab and a byte that is not UTF-8 is escaped as Prometheus reads it,
// nothing else.
func TestPrometheusLabelEscaping(t *testing.T) {
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 100})
	defer m.Close()
	if err := m.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := m.WritePrometheus(&out, "a\\b\"c\nd\te\xff"); err != nil {
		t.Fatal(err)
	}
	if want := `sharedmap_puts_total{map="a\\b\"c\nd` + "\te\uFFFD" + `"} 1`; !strings.Contains(out.String(), want) {
		t.Errorf("Prometheus text lacks %q:\n%s", want, out.String())
	}
}

// metricValue is the value of family name among ms, and whether it is
// there.
func metricValue(ms []Metric, name string) (int64, bool) {
	for _, m := range ms {
		if m.Name == name {
			return m.Value, true
		}
	}
	return 0, false
}

// TestPrometheusHeadroom: the free overflow tiers go from the whole pool
// to none as a map fills, and are none when Put fails with ErrFull; the
// free entries and bytes shrink with it, and the used bytes are Stats's.
func TestPrometheusHeadroom(t *testing.T) {
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 64, Segments: 1, MaxBloatFactor: 2, MaxSize: NoGrowth})
	defer m.Close()
	st := m.Stats()
	pool := int64(st.TiersMax - st.Segments)
	before := m.Metrics()
	if v, _ := metricValue(before, "sharedmap_free_overflow_tiers"); v != pool || pool == 0 {
		t.Fatalf("free overflow tiers of an empty map = %d, want the pool's %d (of %d tiers)", v, pool, st.TiersMax)
	}
	if v, _ := metricValue(before, "sharedmap_free_entries"); v != int64(st.TiersMax*st.EntriesPerTier) {
		t.Errorf("free entries of an empty map = %d, want %d", v, st.TiersMax*st.EntriesPerTier)
	}
	value := []byte(strings.Repeat("v", 40))
	for i := 0; ; i++ {
		err := m.Put(fmt.Appendf(nil, "k%05d", i), value)
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i > 100_000 {
			t.Fatal("the map never filled")
		}
	}
	after, st := m.Metrics(), m.Stats()
	for name, want := range map[string]int64{"sharedmap_free_overflow_tiers": 0, "sharedmap_overflow_tiers": pool,
		"sharedmap_stored_entries": int64(st.Entries), "sharedmap_used_bytes": st.BytesUsed} {
		if v, ok := metricValue(after, name); !ok || v != want {
			t.Errorf("%s of a full map = %d (%v), want %d", name, v, ok, want)
		}
	}
	for _, name := range []string{"sharedmap_free_entries", "sharedmap_free_bytes"} {
		b, _ := metricValue(before, name)
		a, _ := metricValue(after, name)
		if a >= b {
			t.Errorf("%s went from %d to %d as the map filled", name, b, a)
		}
	}
}

// TestProcessLookupsCountFromOpen: a process's own lookups count from its
// Open, though its registry slot's counters go on from the process that
// had the slot before; the map-wide ones count every process's. A
// read-only process counts none, and reports none.
func TestProcessLookupsCountFromOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	first := mustOpen(t, path, &Options{Entries: 100})
	if err := first.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, _ = first.Get([]byte("k"))
	}
	slot := first.reg.Self()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	m := mustOpen(t, path, nil)
	defer m.Close()
	if m.reg.Self() != slot {
		t.Fatalf("the second Open took slot %d, not the first's %d: nothing to test", m.reg.Self(), slot)
	}
	_, _ = m.Get([]byte("k"))
	_, _ = m.Get([]byte("nope"))
	ms := m.Metrics()
	for name, want := range map[string]int64{"sharedmap_process_hits_total": 1, "sharedmap_process_misses_total": 1,
		"sharedmap_hits_total": 4, "sharedmap_misses_total": 1} {
		if v, ok := metricValue(ms, name); !ok || v != want {
			t.Errorf("%s = %d (%v), want %d", name, v, ok, want)
		}
	}
	ro := mustOpen(t, path, &Options{ReadOnly: true})
	defer ro.Close()
	ms = ro.Metrics()
	if _, ok := metricValue(ms, "sharedmap_process_hits_total"); ok {
		t.Error("a read-only process reports lookups of its own")
	}
	if v, _ := metricValue(ms, "sharedmap_hits_total"); v != 4 {
		t.Errorf("a read-only process reports %d hits of the map, want 4", v)
	}
}

// TestPrometheusClosedAndNil: a closed map writes nothing; a nil one is an
// error, and nothing is written.
func TestPrometheusClosedAndNil(t *testing.T) {
	dir := t.TempDir()
	closed := mustOpen(t, filepath.Join(dir, "closed"), &Options{Entries: 100})
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	open := mustOpen(t, filepath.Join(dir, "open"), &Options{Entries: 100})
	defer open.Close()
	var out strings.Builder
	if err := WritePrometheus(&out, map[string]*Map{"closed": closed}); err != nil || out.Len() != 0 {
		t.Errorf("a closed map: %v, wrote %q", err, out.String())
	}
	if err := WritePrometheus(&out, map[string]*Map{"open": open, "nil": nil}); err == nil || !strings.Contains(err.Error(), `"nil"`) || out.Len() != 0 {
		t.Errorf("a nil map: %v, wrote %q", err, out.String())
	}
}
