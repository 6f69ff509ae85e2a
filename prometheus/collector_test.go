package prometheus_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/sharedmap/sharedmap/hashmap"
	smprom "github.com/sharedmap/sharedmap/prometheus"
)

// openMaps opens two maps, a plain one with an entry, a hit and a miss,
// and an empty cache map, closed when the test ends.
func openMaps(t *testing.T) map[string]*hashmap.Map {
	t.Helper()
	dir := t.TempDir()
	open := func(name string, o *hashmap.Options) *hashmap.Map {
		m, err := hashmap.Open(filepath.Join(dir, name), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	sessions := open("sessions.map", &hashmap.Options{Entries: 1000})
	users := open("users.map", &hashmap.Options{Entries: 1000, Cache: true})
	if err := sessions.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	_, _ = sessions.Get([]byte("k"))
	_, _ = sessions.Get([]byte("nope"))
	return map[string]*hashmap.Map{"sessions": sessions, "users": users}
}

// labels is a metric's labels as a map.
func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// value is a counter's or a gauge's value.
func value(m *dto.Metric) float64 {
	if m.Counter != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// checkFamilies checks families, gathered or parsed, against
// hashmap.MetricFamilies: each family once, of its type and help, with a
// metric per map labelled with its name (and the pid, for per-process
// figures), the puts and hits of the maps opened by openMaps.
func checkFamilies(t *testing.T, families map[string]*dto.MetricFamily) {
	t.Helper()
	pid := strconv.Itoa(os.Getpid())
	for _, f := range hashmap.MetricFamilies() {
		mf := families[f.Name]
		if mf == nil {
			t.Errorf("%s missing", f.Name)
			continue
		}
		want := dto.MetricType_GAUGE
		if f.Counter {
			want = dto.MetricType_COUNTER
		}
		if mf.GetType() != want || mf.GetHelp() != f.Help {
			t.Errorf("%s: type %v, help %q; want %v, %q", f.Name, mf.GetType(), mf.GetHelp(), want, f.Help)
		}
		var names []string
		for _, m := range mf.GetMetric() {
			l := labels(m)
			names = append(names, l["map"])
			if got := l["pid"]; (got != "") != f.PerProcess || (f.PerProcess && got != pid) {
				t.Errorf("%s{map=%q}: pid label %q, PerProcess %v", f.Name, l["map"], got, f.PerProcess)
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"sessions", "users"}) {
			t.Errorf("%s: metrics of maps %q, want one each of sessions and users", f.Name, names)
		}
	}
	for name, want := range map[string]float64{"sharedmap_puts_total": 1, "sharedmap_hits_total": 1, "sharedmap_process_misses_total": 1, "sharedmap_stored_entries": 1} {
		for _, m := range families[name].GetMetric() {
			if l := labels(m); l["map"] == "sessions" && value(m) != want {
				t.Errorf("%s{map=\"sessions\"} = %v, want %v", name, value(m), want)
			}
		}
	}
}

// TestCollectorLints: client_golang's linter finds nothing to say of the
// Collector's metrics (names, units, _total on counters, help).
func TestCollectorLints(t *testing.T) {
	c, err := smprom.NewCollector(openMaps(t))
	if err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestCollectorRegisters: a pedantic registry takes the Collector (its
// metrics are consistent with its descriptions) and gathers every family
// with a metric per map.
func TestCollectorRegisters(t *testing.T) {
	c, err := smprom.NewCollector(openMaps(t))
	if err != nil {
		t.Fatal(err)
	}
	reg := prom.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	gathered, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]*dto.MetricFamily{}
	for _, mf := range gathered {
		families[mf.GetName()] = mf
	}
	checkFamilies(t, families)
}

// TestTextOfTwoMapsParses: hashmap.WritePrometheus's exposition of two
// maps parses with Prometheus's own parser (which rejects a family's
// second HELP or TYPE line) into what the Collector gathers, and lints
// clean.
func TestTextOfTwoMapsParses(t *testing.T) {
	named := openMaps(t)
	var text strings.Builder
	if err := hashmap.WritePrometheus(&text, named); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(strings.NewReader(text.String()))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, text.String())
	}
	checkFamilies(t, parsed)
	problems, err := promlint.New(strings.NewReader(text.String())).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}

	// The same figures, as the Collector gathers them.
	c, err := smprom.NewCollector(named)
	if err != nil {
		t.Fatal(err)
	}
	reg := prom.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	gathered, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gathered {
		p := parsed[g.GetName()]
		if p == nil || len(p.GetMetric()) != len(g.GetMetric()) {
			t.Errorf("%s: gathered %d metrics, parsed %v", g.GetName(), len(g.GetMetric()), p)
			continue
		}
		if strings.HasSuffix(g.GetName(), "_bytes") && strings.Contains(g.GetName(), "_process_") {
			continue // what is mapped in may change between the two reads
		}
		for i, m := range g.GetMetric() {
			if pm := p.GetMetric()[i]; value(pm) != value(m) || fmt.Sprint(labels(pm)) != fmt.Sprint(labels(m)) {
				t.Errorf("%s: the text has %v %v, the Collector %v %v", g.GetName(), labels(pm), value(pm), labels(m), value(m))
			}
		}
	}
}

// TestOneCallPerExposition: writing two maps with a call each repeats the
// HELP and TYPE lines, which Prometheus's parser rejects; hence
// hashmap.WritePrometheus, which writes them all in one call.
func TestOneCallPerExposition(t *testing.T) {
	named := openMaps(t)
	var text strings.Builder
	for _, name := range []string{"sessions", "users"} {
		if err := named[name].WritePrometheus(&text, name); err != nil {
			t.Fatal(err)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	if _, err := parser.TextToMetricFamilies(strings.NewReader(text.String())); err == nil {
		t.Error("two expositions one after the other parse as one")
	}
}

// TestCollectorOfClosedAndNilMaps: a map closed after NewCollector reports
// nothing, and the others go on; a nil map is an error of NewCollector.
func TestCollectorOfClosedAndNilMaps(t *testing.T) {
	named := openMaps(t)
	c, err := smprom.NewCollector(named)
	if err != nil {
		t.Fatal(err)
	}
	if err := named["users"].Close(); err != nil {
		t.Fatal(err)
	}
	if n, want := testutil.CollectAndCount(c, "sharedmap_puts_total"), 1; n != want {
		t.Errorf("%d puts_total metrics with a map closed, want %d", n, want)
	}
	if _, err := smprom.NewCollector(map[string]*hashmap.Map{"sessions": named["sessions"], "gone": nil}); err == nil || !strings.Contains(err.Error(), `"gone"`) {
		t.Errorf("NewCollector with a nil map: %v", err)
	}
}
