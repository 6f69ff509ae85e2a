//go:build linux

package main

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// TestWatchTable: stats --watch prints a header, then rows within 80
// columns whose counts are grouped in thousands, with "-" for the hit
// ratio of an interval without lookups; a cache map has two more columns,
// still within 80. The example in stats --help is the code's output.
func TestWatchTable(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	fillNumbered(t, p, 1500, "--entries", "2000")
	c, o, e := mapctl(t, "", "stats", p, "--watch", "10ms", "--count", "2")
	if c != exitOK || e != "" {
		t.Fatalf("stats --watch: exit %d, stderr %q", c, e)
	}
	lines := strings.Split(strings.TrimSuffix(o, "\n"), "\n")
	if len(lines) != 3 || lines[0] != "time         entries   gets/s   hit%   puts/s dels/s waits/s tmo" {
		t.Fatalf("stats --watch --count 2: %q; want a header and 2 rows", o)
	}
	for _, row := range lines[1:] {
		if !strings.HasSuffix(row, "     1,500        0      -        0      0       0   0") || len(row) != len(lines[0]) {
			t.Errorf("row %q: want 1,500 entries, no rates, hit ratio -, under the header", row)
		}
	}

	at := time.Date(2030, 1, 2, 14, 2, 31, 0, time.UTC)
	prev := hashmap.Stats{Entries: 1_000_000, Hits: 5_000_000, Misses: 300, Puts: 10, LockTimeouts: 7}
	st := hashmap.Stats{Entries: 1_234_567, Hits: 5_792_032, Misses: 20_608, Puts: 40_122, Deletes: 103, LockWaits: 2, LockTimeouts: 7}
	row := watchRow(at, st, prev, 1)
	if want := "14:02:31   1,234,567  812,340  97.5%   40,112    103       2   0"; row != want {
		t.Errorf("watchRow =\n%q, want\n%q", row, want)
	}
	_, help, _ := mapctl(t, "", "stats", "--help")
	if !strings.Contains(help, "\n  "+watchHeader(false)+"\n  "+row+"\n") {
		t.Errorf("stats --help does not show the table as watch prints it:\n  %s\n  %s", watchHeader(false), row)
	}

	// At their widest, in a cache map, with counts beyond every column.
	big := hashmap.Stats{Cache: true, Entries: math.MaxInt32, Hits: 1 << 50, Puts: 1 << 50, Deletes: 1 << 50, Evictions: 1 << 50, Expired: 1 << 50, LockWaits: 1 << 50, LockTimeouts: 1 << 40}
	for _, line := range []string{watchHeader(true), watchRow(at, big, hashmap.Stats{Cache: true}, 1), watchRow(at, st, prev, 1)} {
		if len(line) >= 80 {
			t.Errorf("%d columns, want fewer than 80: %q", len(line), line)
		}
	}
	if got, want := watchRow(at, big, hashmap.Stats{Cache: true}, 1), "14:02:31       2.15G    1126T 100.0%    1126T  1126T   1126T  1126T   1126T  1T"; got != want {
		t.Errorf("widest row =\n%q, want\n%q", got, want)
	}
}

func TestFitCount(t *testing.T) {
	for _, tc := range []struct {
		n     int64
		width int
		want  string
	}{
		{0, 3, "0"}, {999, 3, "999"}, {1000, 5, "1,000"}, {1000, 3, "1k"}, {1_234_567, 9, "1,234,567"},
		{1_234_567, 8, "1.23M"}, {12_345_678, 8, "12.3M"}, {123_456_789, 8, "123M"}, {999_600, 6, "1.00M"},
		{12_345, 3, "12k"}, {123_456, 3, "123k"}, {-5, 3, "0"},
	} {
		if got := fitCount(tc.n, tc.width); got != tc.want {
			t.Errorf("fitCount(%d, %d) = %q, want %q", tc.n, tc.width, got, tc.want)
		}
	}
}
