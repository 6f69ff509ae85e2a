//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sharedmap/sharedmap/hashmap"
)

func TestDemo(t *testing.T) {
	c, o, e := mapctl(t, "", "demo", "--procs", "3", "--goroutines", "2", "--ops", "2000")
	if c != 0 || !strings.Contains(o, "demo OK") || !strings.Contains(o, "ops/s") || !strings.Contains(o, "worker 2:") {
		t.Fatalf("demo: %d\n%s\n%s", c, o, e)
	}
	// Beyond the 64 process slots every default map has room for, the demo
	// map has one for every worker and the parent.
	if got := demoMapOptions(&demoOpts{procs: 80, goroutines: 1, ops: 10}).MaxProcesses; got < 81 {
		t.Fatalf("demo map for 80 workers has %d process slots", got)
	}
	if c, _, e := mapctl(t, "", "demo", "--procs", "257"); c != 2 || !strings.Contains(e, "--procs must be at most 256") {
		t.Fatalf("demo --procs 257: %d %q", c, e)
	}
}

// TestDemoRefusesPlansTooBig: counts whose product overflows, or that
// would size the map over the demo's 1 GiB, are refused as usage errors
// naming the flag to lower, before any directory or file is made. Before,
// the product wrapped and sized the map for 4096 entries while billions of
// puts were planned, and --goroutines 100 --ops 1000000 made a 38.9 GB
// file.
func TestDemoRefusesPlansTooBig(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--goroutines", "100", "--ops", "1000000"}, "lower --ops (at most "},
		{[]string{"--procs", "1", "--goroutines", "8192", "--ops", "1125899906842624"}, "lower --ops"}, // 2^13 x 2^50: wraps to 0
		{[]string{"--procs", "3", "--goroutines", "4096", "--ops", "3074457345618258603"}, "lower --ops"},
		{[]string{"--ops", "9223372036854775807"}, "lower --ops"},
		{[]string{"--goroutines", "2147483648"}, "--goroutines must be at most 10000"},
		{[]string{"--goroutines", "10001", "--ops", "0"}, "--goroutines must be at most 10000"},
		{[]string{"--procs", "4095", "--ops", "0"}, "--procs must be at most 256"},
	} {
		c, o, e := mapctl(t, "", append([]string{"demo"}, tc.args...)...)
		if c != exitUsage || o != "" || !strings.Contains(e, tc.want) || !strings.Contains(e, "usage: mapctl demo") {
			t.Errorf("demo %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, c, o, e, tc.want)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("refused demos left %v in TMPDIR", left)
	}
	// Every plan let through has a map sized for all its puts (30% of
	// the operations), within the limit.
	for _, o := range []demoOpts{
		{procs: 4, goroutines: 4, ops: 20000},
		{procs: 4, goroutines: 4, ops: 655200},
		{procs: 1, goroutines: 1, ops: 10_000_000},
		{procs: 256, goroutines: 10000, ops: 4},
	} {
		if msg := checkDemoPlan(&o); msg != "" {
			t.Errorf("%+v refused: %s", o, msg)
			continue
		}
		puts := o.procs * o.goroutines * o.ops * 3 / 10
		n, _ := demoMapBytes(&o)
		if e := demoMapOptions(&o).Entries; e < puts || n > maxDemoMapBytes {
			t.Errorf("%+v: map for %d entries, %d bytes; %d puts planned", o, e, n, puts)
		}
	}
	// demoMapBytes is the size of the file the demo makes.
	for _, o := range []demoOpts{{procs: 4, goroutines: 4, ops: 2000}, {procs: 200, goroutines: 1, ops: 10000}} {
		m, err := hashmap.Open(filepath.Join(t.TempDir(), "demo.map"), demoMapOptions(&o))
		if err != nil {
			t.Fatal(err)
		}
		got := m.Stats().FileSize
		m.Close()
		if n, _ := demoMapBytes(&o); n != got {
			t.Errorf("%+v: file of %d bytes, demoMapBytes says %d", o, got, n)
		}
	}
}
