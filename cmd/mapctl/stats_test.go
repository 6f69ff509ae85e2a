//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

func TestStatsInspect(t *testing.T) {
	p := newMap(t)
	mapctl(t, "", "put", p, "k", "v")
	c, o, e := mapctl(t, "", "stats", "--json", p)
	if c != 0 {
		t.Fatalf("stats --json: %d %q", c, e)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(o), &st); err != nil {
		t.Fatalf("stats --json output %q: %v", o, err)
	}
	for _, k := range []string{"entries", "capacity", "segments", "tiers_in_use", "bytes_used", "file_size"} {
		if _, ok := st[k]; !ok {
			t.Errorf("stats --json lacks %q: %s", k, o)
		}
	}
	if st["entries"] != 1.0 {
		t.Errorf("entries = %v, want 1", st["entries"])
	}
	if c, o, _ := mapctl(t, "", "stats", p); c != 0 || !strings.Contains(o, "Entries: 1\n") || !strings.Contains(o, "Segments: ") {
		t.Fatalf("stats: %d %q", c, o)
	}
	if c, o, _ := mapctl(t, "", "inspect", p); c != 0 || !strings.Contains(o, "SEGMENT") || !strings.Contains(o, "LOCK") {
		t.Fatalf("inspect: %d %q", c, o)
	}
	if c, o, _ := mapctl(t, "", "inspect", "--json", p); c != 0 || json.Unmarshal([]byte(o), new(any)) != nil {
		t.Fatalf("inspect --json: %d %q", c, o)
	}
	// More than 64 segments: limited unless --all.
	big := filepath.Join(t.TempDir(), "big.map")
	if c, _, e := mapctl(t, "", "create", big, "--entries", "200000", "--segments", "128", "--key-size", "8", "--value-size", "8"); c != 0 {
		t.Fatalf("create: %q", e)
	}
	if _, o, _ := mapctl(t, "", "inspect", big); !strings.Contains(o, "64 of 128 segments shown") {
		t.Fatalf("inspect of 128 segments: %q", o)
	}
	if _, o, _ := mapctl(t, "", "inspect", big, "--all"); strings.Contains(o, "shown") || !strings.Contains(o, "\n127 ") {
		t.Fatalf("inspect --all: %q", o)
	}
}

// TestStatsCounters: stats --json has the counters under their keys, with
// per_segment on request, and --watch prints a table of rates. (mapctl get
// maps the file read-only, and read-only lookups are not counted.)
func TestStatsCounters(t *testing.T) {
	p := newMap(t)
	mapctl(t, "", "put", p, "k", "v")
	mapctl(t, "", "get", p, "k")
	mapctl(t, "", "get", p, "absent")
	c, o, e := mapctl(t, "", "stats", p, "--json", "--segments")
	if c != 0 {
		t.Fatalf("stats: %d %q", c, e)
	}
	var st struct {
		Counters           bool
		Hits, Misses, Puts int64
		Evictions, Expired *int64
		LockWaits          *int64           `json:"lock_waits"`
		LockTimeouts       *int64           `json:"lock_timeouts"`
		PerSegment         []map[string]any `json:"per_segment"`
	}
	if err := json.Unmarshal([]byte(o), &st); err != nil {
		t.Fatal(err)
	}
	if !st.Counters || st.Hits != 0 || st.Misses != 0 || st.Puts != 1 || st.Evictions == nil || st.Expired == nil ||
		st.LockWaits == nil || st.LockTimeouts == nil || len(st.PerSegment) == 0 || st.PerSegment[0]["hits"] == nil {
		t.Fatalf("stats --json: %s", o)
	}
	c, o, e = mapctl(t, "", "stats", p, "--watch", "20ms", "--count", "2")
	if c != 0 || strings.Count(o, "gets/s") != 1 || strings.Count(o, "\n") != 3 {
		t.Fatalf("stats --watch: %d %q %q", c, o, e)
	}
	c, o, _ = mapctl(t, "", "stats", p, "--watch", "20ms", "--count", "1", "--json")
	if c != 0 || !strings.Contains(o, `"hits_per_s"`) {
		t.Fatalf("stats --watch --json: %d %q", c, o)
	}
}

// TestStatsHelpListsTheJSONKeys: the keys stats --help lists are those of
// stats --json, in its order, so that a new Stats field cannot go
// undocumented again (fast_ledgers did).
func TestStatsHelpListsTheJSONKeys(t *testing.T) {
	p := newMap(t)
	_, help, _ := mapctl(t, "", "stats", "--help")
	help = strings.Join(strings.Fields(help), " ") // the list wraps
	_, list, ok := strings.Cut(help, "with the keys ")
	list, _, ok2 := strings.Cut(list, " (and per_segment")
	if !ok || !ok2 {
		t.Fatalf(`stats --help has no "with the keys ... (and per_segment" list: %q`, help)
	}
	var documented []string
	for _, w := range strings.Fields(strings.ReplaceAll(list, ",", " ")) {
		if w != "and" {
			documented = append(documented, w)
		}
	}
	jsonKeys := func(args ...string) []string {
		t.Helper()
		c, o, e := mapctl(t, "", args...)
		if c != 0 {
			t.Fatalf("%q: %d %q", args, c, e)
		}
		dec := json.NewDecoder(strings.NewReader(o))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Fatalf("%q printed %q, not a JSON object", args, o)
		}
		var keys []string
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				t.Fatalf("%q: %v in %q", args, err, o)
			}
			keys = append(keys, tok.(string))
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("%q: %v in %q", args, err, o)
			}
		}
		return keys
	}
	if got := jsonKeys("stats", "--json", p); strings.Join(got, " ") != strings.Join(documented, " ") {
		t.Errorf("stats --json keys:\n  %s\nstats --help lists:\n  %s", strings.Join(got, " "), strings.Join(documented, " "))
	}
	if got, want := jsonKeys("stats", "--json", "--segments", p), append(documented, "per_segment"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("stats --json --segments keys:\n  %s\nwant:\n  %s", strings.Join(got, " "), strings.Join(want, " "))
	}
}

// TestStatsWatchUsage: --count with --watch 0s asks for an interval (the
// flag was given), and --segments, which --watch lines cannot carry, is
// refused with --watch rather than ignored.
func TestStatsWatchUsage(t *testing.T) {
	p := newMap(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stats", p, "--watch", "0s", "--count", "2"}, "give --watch an interval of at least 10ms"},
		{[]string{"stats", p, "--watch", "10ms", "--count", "1", "--json", "--segments"}, "--segments works only without --watch"},
	} {
		c, o, e := mapctl(t, "", tc.args...)
		if c != exitUsage || o != "" || !strings.Contains(e, tc.want) || !strings.Contains(e, "usage: ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, c, o, e, tc.want)
		}
	}
	if c, o, e := mapctl(t, "", "stats", p, "--watch", "10ms", "--count", "2", "--json"); c != 0 || strings.Count(o, "\n") != 2 {
		t.Errorf("stats --watch 10ms --count 2 --json: %d %q %q", c, o, e)
	}
}

// TestInspectListsGrowthSteps: inspect lists every growth step of a map
// whose file grew, in its table and under "growth" with --json, as the
// map's own log has them.
func TestInspectListsGrowthSteps(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	m, err := hashmap.Open(p, &hashmap.Options{Entries: 100, AverageKeySize: 8, AverageValueSize: 24, NoSplits: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20000 {
		if err := m.Put(fmt.Appendf(nil, "k%07d", i), []byte("a value of 24 bytes here")); err != nil {
			t.Fatal(err)
		}
	}
	steps, err := m.Growth()
	m.Close()
	if err != nil || len(steps) < 2 {
		t.Fatalf("the map grew %d times (%v), want 2 or more", len(steps), err)
	}
	c, o, e := mapctl(t, "", "inspect", p)
	if c != 0 || !strings.Contains(o, "GROWN AT") {
		t.Fatalf("inspect: %d %q %q", c, o, e)
	}
	for _, s := range steps {
		row := s.At.UTC().Format(time.RFC3339Nano)
		if !strings.Contains(o, row) || !strings.Contains(o, fmt.Sprintf(" %d ", s.Tiers)) {
			t.Errorf("inspect lacks the growth step at %s to %d tiers:\n%s", row, s.Tiers, o)
		}
	}
	c, o, e = mapctl(t, "", "inspect", "--json", p)
	var doc struct {
		Growth []hashmap.GrowthStep `json:"growth"`
	}
	if c != 0 || json.Unmarshal([]byte(o), &doc) != nil || len(doc.Growth) != len(steps) {
		t.Fatalf("inspect --json: %d, %d growth steps, want %d: %q %q", c, len(doc.Growth), len(steps), o, e)
	}
}
