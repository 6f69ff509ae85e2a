//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/internal/testutil"
	"github.com/sharedmap/sharedmap/ipc"
	"github.com/sharedmap/sharedmap/offheap"
)

// TestMain lets the demo re-execute this test binary as its worker
// processes: they come with MAPCTL_DEMO_WORKER=1 and "demo-worker ..." args.
func TestMain(m *testing.M) {
	if path := os.Getenv(stuckWorkerEnv); path != "" {
		stuckWorker(path)
	}
	if os.Getenv(demoWorkerEnv) == "1" && len(os.Args) > 1 && (os.Args[1] == "demo-worker" || os.Args[1] == "lockbench-worker" || os.Args[1] == "bench-worker") {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if args := strings.Split(os.Getenv(dieInRewriteEnv), "\t"); len(args) == 3 {
		dieInRewrite(args[0], args[1], args[2])
	}
	os.Exit(m.Run())
}

// stuckWorkerEnv makes the test binary a lockbench worker that gets ready
// and then never looks at the stop word (one stuck in Lock, say).
const stuckWorkerEnv = "MAPCTL_TEST_STUCK_WORKER"

func stuckWorker(path string) {
	b, err := openBenchFile(path)
	if err != nil {
		os.Exit(2)
	}
	atomic.AddUint64(&b.words[benchReady], 1)
	time.Sleep(time.Hour)
}

// dieInRewriteEnv makes the test binary a process that opens the map at
// its first field and dies (SIGKILL) in the middle of a Put of its second
// and third, after the entry's header is rewritten and before its value is:
// the entry is torn, and only the undo record makes it whole.
const dieInRewriteEnv = "MAPCTL_TEST_DIE_IN_REWRITE"

func dieInRewrite(path, key, value string) {
	m, err := hashmap.Open(path, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testhook.OnStep = func() {
		// The rewrite's first step: the header stored, not the value (the
		// undo record's steps and the fast path's taking of the lock come
		// before, in functions of their own).
		pc, _, _, _ := runtime.Caller(3) // OnStep, Step, testStep, then the step's function
		if name := runtime.FuncForPC(pc).Name(); strings.HasSuffix(name, ".rewriteInPlace") {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Hour)
		}
	}
	_ = m.Put([]byte(key), []byte(value))
	fmt.Fprintln(os.Stderr, "the Put ended without storing the entry's header in place")
	os.Exit(2)
}

// TestRecoverRepairsCutRewrite: a process killed in the middle of
// rewriting a value leaves the key whole: recover says it put the rewrite
// right from the undo record, get reads the value the Put was writing
// (Put's fast path stages it there before it writes: see segment.record),
// and check passes.
func TestRecoverRepairsCutRewrite(t *testing.T) {
	p := newMap(t)
	if c, _, e := mapctl(t, "", "put", p, "key", "the old value"); c != 0 {
		t.Fatalf("put: %q", e)
	}
	cmd := testutil.Self("-test.run=^$")
	cmd.Env = append(os.Environ(), dieInRewriteEnv+"="+p+"\tkey\tTHE NEW VALUE")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the writer ended with %v, not killed in its Put: %s", err, stderr.String())
	}
	if c, o, e := mapctl(t, "", "recover", p); c != 0 || !strings.Contains(o, "a rewrite it cut short put right") {
		t.Fatalf("recover after a writer died mid-rewrite: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "get", p, "key"); c != 0 || o != "THE NEW VALUE\n" {
		t.Fatalf("get after recover: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "check", p); c != 0 {
		t.Fatalf("check after recover: %d %q %q", c, o, e)
	}
}

// mapctl runs the command line args with stdin and returns the exit status,
// stdout and stderr.
func mapctl(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func newMap(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.map")
	if c, o, e := mapctl(t, "", "create", p, "--entries", "1000", "--key-size", "16", "--value-size", "32"); c != 0 || !strings.Contains(o, "created") {
		t.Fatalf("create: %d %q %q", c, o, e)
	}
	return p
}

// TestConcurrentCreates: of creates of one new path at once, one succeeds
// and the others say the file exists, as they would one after another.
func TestConcurrentCreates(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	var wg sync.WaitGroup
	codes := make([]int, 4)
	errs := make([]string, 4)
	for i := range codes {
		wg.Go(func() {
			var out, errb bytes.Buffer
			codes[i] = run([]string{"create", p, "--entries", "1000"}, strings.NewReader(""), &out, &errb)
			errs[i] = errb.String()
		})
	}
	wg.Wait()
	ok := 0
	for i, c := range codes {
		switch {
		case c == exitOK:
			ok++
		case c != exitError || !strings.Contains(errs[i], "already exists"):
			t.Errorf("create %d: %d %q", i, c, errs[i])
		}
	}
	if ok != 1 {
		t.Fatalf("%d creates succeeded, want 1", ok)
	}
}

func TestCreatePutGetDelete(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	if c, _, e := mapctl(t, "", "get", p, "k"); c != exitError || !strings.Contains(e, "no map at "+p+" (create it with mapctl create)") {
		t.Fatalf("get on a missing file: %d %q", c, e)
	}
	if _, err := os.Stat(p); err == nil {
		t.Fatal("get created the missing map")
	}
	// Neither an empty file nor someone else's is made into a map.
	empty, image := filepath.Join(t.TempDir(), "empty"), filepath.Join(t.TempDir(), "image")
	imageData := append(make([]byte, 4096), "precious"...)
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(image, imageData, 0o644); err != nil {
		t.Fatal(err)
	}
	if c, _, e := mapctl(t, "", "put", empty, "k", "v"); c != exitError || !strings.Contains(e, "is empty, not a map") {
		t.Fatalf("put on an empty file: %d %q", c, e)
	}
	if c, _, e := mapctl(t, "", "put", image, "k", "v"); c != exitError || !strings.Contains(e, "not a sharedmap file") {
		t.Fatalf("put on a file that is not a map: %d %q", c, e)
	}
	if b, _ := os.ReadFile(image); !bytes.Equal(b, imageData) {
		t.Fatal("put changed a file that is not a map")
	}
	if st, _ := os.Stat(empty); st.Size() != 0 {
		t.Fatal("put changed an empty file")
	}
	// A map whose creator died (both copies of its header say
	// "initializing": offsets 16 and 2064, 0x0F0F0F0F; docs/FORMAT.md) is
	// not created over at the default size
	// by a command that writes, and not refused as existing by create
	// without a word of what to do.
	half := filepath.Join(t.TempDir(), "half.map")
	if c, _, e := mapctl(t, "", "create", half, "--entries", "5000"); c != 0 {
		t.Fatal(e)
	}
	f, err := os.OpenFile(half, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int64{16, 2048 + 16} {
		if _, err := f.WriteAt([]byte{0x0F, 0x0F, 0x0F, 0x0F}, at); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	halfData, _ := os.ReadFile(half)
	for _, args := range [][]string{{"put", half, "k", "v"}, {"delete", half, "k"}, {"load", half, "-"}, {"recover", half}, {"get", half, "k"}} {
		if c, _, e := mapctl(t, "k\tv\n", args...); c != exitError || !strings.Contains(e, "creation did not finish") || !strings.Contains(e, "remove it, then run mapctl create") {
			t.Errorf("%s on a half-created map: %d %q", args[0], c, e)
		}
	}
	if c, _, e := mapctl(t, "", "create", half); c != exitError || !strings.Contains(e, "already exists") {
		t.Errorf("create over a half-created map: %d %q", c, e)
	}
	if b, _ := os.ReadFile(half); !bytes.Equal(b, halfData) {
		t.Fatal("a command changed a half-created map")
	}
	if c, o, e := mapctl(t, "", "create", p, "--entries", "500", "--segments", "2"); c != 0 || !strings.Contains(o, "2 segments") {
		t.Fatalf("create: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "", "create", p); c != exitError || !strings.Contains(e, "already exists") {
		t.Fatalf("create over an existing file: %d %q", c, e)
	}
	if c, _, e := mapctl(t, "", "put", p, "k", "v"); c != 0 {
		t.Fatalf("put: %q", e)
	}
	if c, _, e := mapctl(t, "", "put", p, "--", "-dash", "-v"); c != 0 {
		t.Fatalf("put after --: %q", e)
	}
	if c, o, _ := mapctl(t, "", "get", p, "k"); c != 0 || o != "v\n" {
		t.Fatalf("get: %d %q", c, o)
	}
	if c, o, _ := mapctl(t, "", "get", p, "--", "-dash"); c != 0 || o != "-v\n" {
		t.Fatalf("get -dash: %d %q", c, o)
	}
	if c, o, e := mapctl(t, "", "get", p, "absent"); c != exitNotFound || o != "" || !strings.HasPrefix(e, "mapctl: get: ") || !strings.Contains(e, "not found") {
		t.Fatalf("get absent: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "", "delete", p, "k"); c != 0 {
		t.Fatalf("delete: %q", e)
	}
	if c, _, e := mapctl(t, "", "delete", p, "k"); c != exitNotFound || !strings.Contains(e, "not found") {
		t.Fatalf("delete of an absent key: %d %q", c, e)
	}
	if c, _, _ := mapctl(t, "", "get", p, "k"); c != exitNotFound {
		t.Fatal("deleted key still there")
	}
}

func TestLoadDumpRoundTrip(t *testing.T) {
	p := newMap(t)
	entries := map[string]string{
		"plain":             "value",
		"tab\tkey":          "tab\tvalue",
		"new\nline":         "multi\nline\nvalue",
		`back\slash`:        `C:\dir\`,
		"cr\r":              "\r\n",
		"empty-value":       "",
		"":                  "empty key",
		"big":               strings.Repeat("x", 70_000), // longer than bufio.Scanner's default line
		"unicode é\x00\xff": "bytes \x01",
	}
	var in strings.Builder
	for k, v := range entries {
		in.Write(appendEscaped(nil, []byte(k)))
		in.WriteByte('\t')
		in.Write(appendEscaped(nil, []byte(v)))
		in.WriteByte('\n')
	}
	in.WriteString("\n") // empty lines are skipped
	if c, o, e := mapctl(t, in.String(), "load", p, "-"); c != 0 || o != "read 10 lines: 9 keys added, 0 replaced\n" {
		t.Fatalf("load: %d %q %q", c, o, e)
	}
	if c, o, _ := mapctl(t, "", "get", p, "tab\tkey"); c != 0 || o != "tab\tvalue\n" {
		t.Fatalf("get after load: %d %q", c, o)
	}
	c, dump, e := mapctl(t, "", "dump", p)
	if c != 0 {
		t.Fatalf("dump: %d %q", c, e)
	}
	lines := strings.Split(strings.TrimSuffix(dump, "\n"), "\n")
	if len(lines) != len(entries) {
		t.Fatalf("dump has %d lines, want %d:\n%s", len(lines), len(entries), dump)
	}
	// Load the dump, from a file, into a second map: same contents.
	f := filepath.Join(t.TempDir(), "dump.tsv")
	if err := os.WriteFile(f, []byte(dump), 0o644); err != nil {
		t.Fatal(err)
	}
	p2 := newMap(t)
	if c, o, e := mapctl(t, "", "load", p2, f); c != 0 || o != "read 9 lines: 9 keys added, 0 replaced\n" {
		t.Fatalf("load of the dump: %d %q %q", c, o, e)
	}
	for k, v := range entries {
		if c, o, e := mapctl(t, "", "get", p2, "--", k); c != 0 || o != v+"\n" {
			t.Fatalf("get %q from the reloaded map: %d %q %q; want %q", k, c, o, e, v)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	p := newMap(t)
	c, o, e := mapctl(t, "a\t1\nb\t2\nno tab here\nc\t3\n", "load", p, "-")
	if c != exitError || !strings.Contains(e, "line 3") || !strings.Contains(e, "loaded 2 entries") || o != "" {
		t.Fatalf("load with a bad line: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "a\\q\t1\n", "load", p, "-"); c != exitError || !strings.Contains(e, `unknown escape \q`) {
		t.Fatalf("load with a bad escape: %d %q", c, e)
	}
	// A full map stops the load at the first failing put.
	small := filepath.Join(t.TempDir(), "small.map")
	if c, _, e := mapctl(t, "", "create", small, "--entries", "10", "--key-size", "8", "--value-size", "8", "--bloat", "1"); c != 0 {
		t.Fatalf("create: %q", e)
	}
	var in strings.Builder
	for i := range 100000 {
		in.WriteString("key-" + strings.Repeat("k", i%7) + itoa(i) + "\t" + strings.Repeat("v", 100) + "\n")
	}
	c, _, e = mapctl(t, in.String(), "load", small, "-")
	if c != exitError || !strings.Contains(e, "map is full") || !strings.Contains(e, "before it") {
		t.Fatalf("load into a full map: %d %q", c, e)
	}
	// The count and line it reports are the map's: lines are stored in
	// batches, and the one that failed is named, not its batch.
	var line, loaded int
	if _, err := fmt.Sscanf(e[strings.Index(e, "line "):], "line %d:", &line); err != nil {
		t.Fatalf("no line number in %q: %v", e, err)
	}
	if _, err := fmt.Sscanf(e[strings.Index(e, "(loaded "):], "(loaded %d entries before it)", &loaded); err != nil {
		t.Fatalf("no count in %q: %v", e, err)
	}
	if c, o, _ := mapctl(t, "", "stats", small, "--json"); c != 0 || !strings.Contains(o, fmt.Sprintf(`"entries": %d,`, loaded)) {
		t.Fatalf("load reported %d entries loaded; stats says %q", loaded, o)
	}
	if line != loaded+1 {
		t.Fatalf("load failed at line %d after %d entries: every line before it should be stored", line, loaded)
	}
	if c, _, e := mapctl(t, "", "load", p, filepath.Join(t.TempDir(), "nonexistent")); c != exitError || !strings.Contains(e, "nonexistent") {
		t.Fatalf("load of a missing file: %d %q", c, e)
	}
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

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

func TestUsage(t *testing.T) {
	p := newMap(t)
	for _, args := range [][]string{
		{},
		{"nosuchcommand"},
		{"put", p},
		{"get", p, "a", "b"},
		{"create"},
		{"create", p, "--entries", "x"},
		{"stats", p, "--nosuchflag"},
		{"demo", "extra"},
		{"demo", "--goroutines", "10001"},
		{"demo-worker", p, "0", "10001", "1"},
		{"help", "nosuchcommand"},
		{"create", filepath.Join(t.TempDir(), "s3"), "--segments", "3"}, // refused by Open's checks
		{"create", filepath.Join(t.TempDir(), "nan"), "--bloat", "NaN"},
		{"stats", p, "--segments"},   // only adds to --json
		{"stats", p, "--count", "3"}, // only counts --watch lines
		{"put", p, "k", "v", "--ttl", "-1s"},
		{"bench", "extra"},
		{"bench", "--key-size", "7"},
		{"bench", "--reads", "101"},
		{"bench", "--batch", "0"},
		{"bench", "--batch", "5000"},
		{"bench", "--keys", "gauss"},
		{"bench", "--duration", "0s"},
		{"bench", "--procs", "0"},
	} {
		c, o, e := mapctl(t, "", args...)
		if c != exitUsage || o != "" || !strings.Contains(e, "usage") && !strings.Contains(e, "unknown command") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and a message", args, c, o, e)
		}
	}
	if c, o, _ := mapctl(t, "", "help"); c != 0 || !strings.Contains(o, "Commands:") || strings.Contains(o, "demo-worker") {
		t.Fatalf("help: %d %q", c, o)
	}
	for _, cmd := range commands() {
		for _, args := range [][]string{{cmd.name, "--help"}, {cmd.name, "-h"}, {"help", cmd.name}} {
			c, o, e := mapctl(t, "", args...)
			if c != 0 || !strings.Contains(o, "usage: mapctl "+cmd.name) || !strings.Contains(o, "Example") || !strings.Contains(o, "Exit status") || e != "" {
				t.Errorf("%q: %d %q %q", args, c, o, e)
			}
		}
	}
	if _, o, _ := mapctl(t, "", "create", "--help"); !strings.Contains(o, "-entries int") || !strings.Contains(o, "(default 65536)") {
		t.Errorf("create --help does not show the flags with defaults: %q", o)
	}
	if _, o, _ := mapctl(t, "", "dump", "--help"); !strings.Contains(o, `\t`) || !strings.Contains(o, `\\`) {
		t.Errorf("dump --help does not document the escapes: %q", o)
	}
}

func TestEscapeRoundTrip(t *testing.T) {
	for _, s := range []string{"", "a", "\t\n\r\\", `\t`, "x\\\\ty", "\x00\xff"} {
		got, err := unescape(appendEscaped(nil, []byte(s)))
		if err != nil || string(got) != s {
			t.Errorf("%q: round trip gives %q, %v", s, got, err)
		}
	}
	if _, err := unescape([]byte(`a\`)); err == nil {
		t.Error("trailing backslash accepted")
	}
}

// TestDashKeyHint: a key that looks like a flag is refused with the way
// to pass it, which then works.
func TestDashKeyHint(t *testing.T) {
	p := newMap(t)
	if c, _, e := mapctl(t, "", "get", p, "-k"); c != exitUsage || !strings.Contains(e, `goes after "--": mapctl get [flags] -- PATH KEY`) {
		t.Fatalf("get of -k: %d %q", c, e)
	}
	if c, _, e := mapctl(t, "", "put", "--", p, "-k", "-v"); c != 0 {
		t.Fatalf("put -- PATH -k -v: %d %q", c, e)
	}
	if c, o, e := mapctl(t, "", "get", "--", p, "-k"); c != 0 || o != "-v\n" {
		t.Fatalf("get -- PATH -k: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "", "stats", p, "-k"); c != exitUsage || strings.Contains(e, "goes after") {
		t.Fatalf("stats with a bad flag: %d %q (no key to hint about)", c, e)
	}
}

func TestDemo(t *testing.T) {
	c, o, e := mapctl(t, "", "demo", "--procs", "3", "--goroutines", "2", "--ops", "2000")
	if c != 0 || !strings.Contains(o, "demo OK") || !strings.Contains(o, "ops/s") || !strings.Contains(o, "worker 2:") {
		t.Fatalf("demo: %d\n%s\n%s", c, o, e)
	}
	// Beyond the default 64 process slots the demo map has one for every
	// worker and the parent (before, the 64th worker failed to open it).
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

// TestBench runs the benchmark across real worker processes, in text and
// in JSON, and checks that every worker worked and every read was right.
func TestBench(t *testing.T) {
	c, o, e := mapctl(t, "", "bench", "--entries", "5000", "--procs", "2", "--goroutines", "2", "--reads", "50", "--duration", "200ms")
	if c != 0 || !strings.Contains(o, "worker 1:") || !strings.Contains(o, "bad reads: 0, failed operations: 0") ||
		!strings.Contains(o, "read latency") || !strings.Contains(o, "write latency") {
		t.Fatalf("bench: %d\n%s\n%s", c, o, e)
	}
	c, o, e = mapctl(t, "", "bench", "--entries", "3000", "--keys", "zipf", "--reads", "100", "--duration", "100ms", "--json", "--dir", t.TempDir())
	var got struct {
		Reads, Writes, BadReads, Errors uint64
		OpsPerSecond                    float64   `json:"ops_per_second"`
		PerProcess                      []float64 `json:"ops_per_second_per_process"`
		ReadP99                         float64   `json:"read_p99_ns"`
	}
	if c != 0 || json.Unmarshal([]byte(o), &got) != nil {
		t.Fatalf("bench --json: %d %q %q", c, o, e)
	}
	if got.Reads == 0 || got.Writes != 0 || got.OpsPerSecond <= 0 || len(got.PerProcess) != 1 || got.ReadP99 <= 0 {
		t.Fatalf("bench --json reported %+v from %s", got, o)
	}
	// Batches: GetMany and PutMany from two processes, every value read checked.
	c, o, e = mapctl(t, "", "bench", "--entries", "4000", "--procs", "2", "--reads", "50", "--batch", "16", "--duration", "200ms")
	if c != 0 || !strings.Contains(o, "bad reads: 0, failed operations: 0") || !strings.Contains(o, "every call of 16 keys") ||
		!strings.Contains(o, "read latency") || !strings.Contains(o, "write latency") {
		t.Fatalf("bench --batch 16: %d\n%s\n%s", c, o, e)
	}
}

// TestBenchCatchesWrongValues: a worker on a map whose values do not match
// their keys reports bad reads, so the benchmark's check can fail.
func TestBenchCatchesWrongValues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wrong.map")
	m, err := hashmap.Open(path, &hashmap.Options{Entries: 1000, AverageKeySize: 16, AverageValueSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	key, value := make([]byte, 16), make([]byte, 16)
	for i := range uint64(1000) {
		benchKey(key, i)
		benchValue(value, i^1, 0) // another key's value
		if err := m.Put(key, value); err != nil {
			t.Fatal(err)
		}
	}
	for _, batch := range []int{1, 16} {
		rep := benchWork(m, &benchConfig{Entries: 1000, KeySize: 16, ValueSize: 16, Goroutines: 2, Reads: 100, Batch: batch, Duration: 50 * time.Millisecond})
		if rep.Reads == 0 || rep.BadReads != rep.Reads || rep.Errors != 0 {
			t.Fatalf("batch %d: reads %d, bad %d, errors %d: want every read bad", batch, rep.Reads, rep.BadReads, rep.Errors)
		}
	}
	m.Close()
}

// TestBenchChecksWholeValue: a read whose value has the key's number in
// its first 8 bytes but is wrong further on, or is torn between two
// versions, counts as a bad read, through GetInto and GetMany. Before,
// readers checked only the length and the first 8 bytes.
func TestBenchChecksWholeValue(t *testing.T) {
	for _, n := range []int{8, 9, 15, 16, 17, 24, 64, 1000} {
		v, w := make([]byte, n), make([]byte, n)
		benchValue(v, 7, 1)
		if !benchValueOK(v, 7, n) {
			t.Fatalf("%d bytes: key 7's value refused", n)
		}
		if benchValueOK(v, 6, n) || benchValueOK(v[:n-1], 7, n) {
			t.Errorf("%d bytes: key 7's value taken for key 6's, or cut short", n)
		}
		for j := range v {
			v[j] ^= 0x10
			if benchValueOK(v, 7, n) {
				t.Errorf("%d bytes: byte %d changed, not seen", n, j)
			}
			v[j] ^= 0x10
		}
		// A read torn between versions 1 and 2 (values of 24 bytes or
		// more have a version).
		benchValue(w, 7, 2)
		for k := 9; n >= 24 && k < n; k++ {
			torn := append(append([]byte(nil), v[:k]...), w[k:]...)
			if benchValueOK(torn, 7, n) {
				t.Errorf("%d bytes: torn at byte %d, not seen", n, k)
			}
		}
	}

	cfg := &benchConfig{Entries: 64, KeySize: 16, ValueSize: 64, Goroutines: 1, Reads: 100, Batch: 1, Duration: 50 * time.Millisecond}
	m, err := hashmap.Open(filepath.Join(t.TempDir(), "bench.map"), &hashmap.Options{Entries: 256, AverageKeySize: 16, AverageValueSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := fillBenchMap(context.Background(), m, cfg, io.Discard); err != nil {
		t.Fatal(err)
	}
	// Writers and readers together on the right values: no bad read.
	cfg.Reads, cfg.Goroutines = 50, 2
	for _, batch := range []int{1, 8} {
		cfg.Batch = batch
		if rep := benchWork(m, cfg); rep.Reads == 0 || rep.Writes == 0 || rep.BadReads != 0 || rep.Errors != 0 {
			t.Fatalf("batch %d on right values: %+v", batch, rep)
		}
	}
	key, value, other := make([]byte, cfg.KeySize), make([]byte, cfg.ValueSize), make([]byte, cfg.ValueSize)
	for i := range cfg.Entries {
		benchKey(key, uint64(i))
		benchValue(value, uint64(i), 3)
		if i%2 == 0 {
			value[8+i%(cfg.ValueSize-8)] ^= 0xEE // one wrong byte after the key's number
		} else {
			benchValue(other, uint64(i), 4) // torn: versions 3 and 4
			copy(value[cfg.ValueSize/2:], other[cfg.ValueSize/2:])
		}
		if err := m.Put(key, value); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Reads, cfg.Goroutines = 100, 1
	for _, batch := range []int{1, 8} {
		cfg.Batch = batch
		rep := benchWork(m, cfg)
		if rep.Reads == 0 || rep.BadReads != rep.Reads || rep.Errors != 0 {
			t.Errorf("batch %d: reads %d, bad %d, errors %d: want every read bad", batch, rep.Reads, rep.BadReads, rep.Errors)
		}
	}
}

func TestLatencyHistogram(t *testing.T) {
	var h latencyHistogram
	for ns := range 1000 {
		h.record(time.Duration(ns+1) * time.Microsecond)
	}
	for _, tc := range []struct{ p, want float64 }{{50, 500e3}, {99, 990e3}} {
		if got := h.percentile(tc.p); got < tc.want*0.88 || got > tc.want*1.13 {
			t.Errorf("p%v = %v ns, want within 12.5%% of %v", tc.p, got, tc.want)
		}
	}
	var small latencyHistogram
	small.record(10)
	small.record(1000)
	if p50, p100 := small.percentile(50), small.percentile(100); p50 != 10 || p100 < 900 || p100 > 1100 {
		t.Errorf("of 10 and 1000 ns: p50 %v (want 10, the nearest rank), p100 %v", p50, p100)
	}
	for ns := range uint64(1 << 20) {
		if b := bucketOf(ns); bucketLow(b) > ns || bucketLow(b+1) <= ns {
			t.Fatalf("%d ns in bucket %d of [%d, %d)", ns, b, bucketLow(b), bucketLow(b+1))
		}
	}
}

// TestLockbench runs every algorithm across real worker processes and
// checks the JSON report: keys present, work done, exclusion held.
func TestLockbench(t *testing.T) {
	c, o, e := mapctl(t, "", "lockbench", "--algo", "all", "--procs", "2", "--goroutines", "2", "--duration", "150ms", "--json")
	if c != 0 {
		t.Fatalf("lockbench: %d %q %q", c, o, e)
	}
	lines := strings.Split(strings.TrimSpace(o), "\n")
	if want := len(ipc.Algorithms()) + 1; len(lines) != want { // and flock
		t.Fatalf("want one line per algorithm (%d), got %q", want, o)
	}
	for _, l := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"algo", "procs", "goroutines", "ops_per_sec", "fairness", "exclusion_ok"} {
			if _, ok := r[k]; !ok {
				t.Errorf("%s: no %q in %s", r["algo"], k, l)
			}
		}
		if r["exclusion_ok"] != true || r["ops_per_sec"].(float64) <= 0 || r["procs"].(float64) != 2 {
			t.Errorf("bad result %s", l)
		}
	}
	c, o, e = mapctl(t, "", "lockbench", "--algo", "hapax-cr,ttas", "--procs", "1,3", "--runs", "2", "--duration", "50ms", "--markdown")
	if c != 0 || !strings.HasPrefix(o, "| algorithm | 1 process | 3 processes |\n|---|---|---|\n| hapax-cr | ") ||
		strings.Count(o, "(fair ") != 4 {
		t.Errorf("markdown table: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "", "lockbench", "--procs", "2,0"); c != exitUsage || !strings.Contains(e, "--procs") {
		t.Errorf("bad --procs: %d %q", c, e)
	}
	if c, _, e := mapctl(t, "", "lockbench", "--algo", "nope"); c != exitUsage || !strings.Contains(e, "unknown lock algorithm") {
		t.Errorf("unknown algorithm: %d %q", c, e)
	}
	// Too short a run to finish anything: no row of zeros, whose fairness
	// 0 would read as starvation.
	if c, _, e := mapctl(t, "", "lockbench", "--algo", "ttas", "--procs", "2", "--duration", "1ns"); c != exitError || !strings.Contains(e, "give a longer --duration") {
		t.Errorf("--duration 1ns: %d %q", c, e)
	}
}

// TestCheckAndRecover: a sound map passes check and recover; a value
// changed behind the map's back (its checksum no longer matches) makes
// check exit 3 naming the problem and leaves the file as it was.
func TestCheckAndRecover(t *testing.T) {
	p := newMap(t)
	if c, _, e := mapctl(t, "", "put", p, "key", "VALUE-TO-DAMAGE"); c != 0 {
		t.Fatalf("put: %q", e)
	}
	if c, _, e := mapctl(t, "", "put", p, "other", "intact"); c != 0 {
		t.Fatalf("put: %q", e)
	}
	if c, o, e := mapctl(t, "", "check", p); c != 0 || !strings.Contains(o, "ok: ") {
		t.Fatalf("check of a sound map: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "recover", p); c != 0 || !strings.Contains(o, "nothing held by the dead") {
		t.Fatalf("recover of a sound map: %d %q %q", c, o, e)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("VALUE-TO-DAMAGE"))
	if i < 0 {
		t.Fatal("value not found in the file")
	}
	b[i] ^= 0x20
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c, o, e := mapctl(t, "", "check", p)
	if c != exitError || !strings.Contains(o, "fails its checksum") || !strings.Contains(e, " found in ") || !strings.Contains(e, "run mapctl recover --repair "+p) {
		t.Fatalf("check of a damaged map (its error line names the next step): %d %q %q", c, o, e)
	}
	after, _ := os.ReadFile(p)
	if !bytes.Equal(after, b) {
		t.Fatal("check changed the file")
	}
	// dump leaves the damaged entry out, so that dump | load does not
	// store its bytes under a fresh checksum, and fails after the rest.
	if c, o, e := mapctl(t, "", "dump", p); c != exitError || o != "other\tintact\n" || !strings.Contains(e, `key "key"`) || !strings.Contains(e, "mapctl recover --repair") {
		t.Fatalf("dump of a damaged map: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "", "check", filepath.Join(t.TempDir(), "none")); c != exitError || !strings.Contains(e, "no map at") {
		t.Fatalf("check of a missing file: %d %q", c, e)
	}
	// Damage no dead process explains: recover alone leaves it (and says
	// so), --repair rebuilds the segment without the damaged entry.
	if c, o, e := mapctl(t, "", "recover", p); c != exitError || !strings.Contains(o, "fails its checksum") || !strings.Contains(e, "run mapctl recover --repair "+p) {
		t.Fatalf("recover without --repair of a damaged map: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "recover", "--repair", p); c != 0 || !strings.Contains(o, "damaged, rebuilt: 1 entries kept, 1 dropped") || !strings.Contains(o, "ok: ") {
		t.Fatalf("recover --repair: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "check", p); c != 0 || !strings.Contains(o, "ok: ") {
		t.Fatalf("check after repair: %d %q %q", c, o, e)
	}
	if c, o, _ := mapctl(t, "", "get", p, "other"); c != 0 || o != "intact\n" {
		t.Fatalf("get of an undamaged entry after repair: %d %q", c, o)
	}
	if c, _, _ := mapctl(t, "", "get", p, "key"); c != exitNotFound {
		t.Fatalf("get of the damaged entry after repair: exit %d, want %d", c, exitNotFound)
	}
}

// TestRepairLockTableHeader: a byte flipped in the lock table's header,
// whose sizes the file header also holds, is reported by check, leaves the
// entries readable, and recover --repair rewrites it.
func TestRepairLockTableHeader(t *testing.T) {
	p := newMap(t)
	if c, _, e := mapctl(t, "", "put", p, "key", "value"); c != 0 {
		t.Fatalf("put: %q", e)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[offheap.HeaderSize] ^= 0x10 // the lock arena's magic, right after the file header
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if c, o, e := mapctl(t, "", "check", p); c != exitError || !strings.Contains(o, "lock table") {
		t.Fatalf("check of a damaged lock table header: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "dump", p); c != 0 || o != "key\tvalue\n" {
		t.Fatalf("dump with a damaged lock table header: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "recover", "--repair", p); c != 0 || !strings.Contains(o, "mended: lock table header: 1 word rewritten") || !strings.Contains(o, "ok: ") {
		t.Fatalf("recover --repair: %d %q %q", c, o, e)
	}
	if c, o, e := mapctl(t, "", "check", p); c != 0 || !strings.Contains(o, "ok: ") {
		t.Fatalf("check after repair: %d %q %q", c, o, e)
	}
}

// TestCacheTTLCommands: create --cache, put --ttl (flags after the
// arguments too), the entry gone after its TTL; --ttl on a plain map is
// refused with a clear message.
func TestCacheTTLCommands(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.map")
	if c, o, e := mapctl(t, "", "create", p, "--entries", "1000", "--cache"); c != 0 || !strings.Contains(o, "created cache") {
		t.Fatalf("create --cache: %d %q %q", c, o, e)
	}
	if c, _, e := mapctl(t, "", "put", p, "short", "s", "--ttl", "150ms"); c != 0 {
		t.Fatalf("put --ttl: %q", e)
	}
	if c, _, e := mapctl(t, "loaded\tL\n", "load", "--ttl", "150ms", p, "-"); c != 0 {
		t.Fatalf("load --ttl: %q", e)
	}
	if c, _, e := mapctl(t, "", "put", p, "long", "l"); c != 0 {
		t.Fatalf("put: %q", e)
	}
	if c, o, _ := mapctl(t, "", "get", p, "short"); c != 0 || o != "s\n" {
		t.Fatalf("get before expiry: %d %q", c, o)
	}
	time.Sleep(300 * time.Millisecond)
	for _, k := range []string{"short", "loaded"} {
		if c, _, _ := mapctl(t, "", "get", p, k); c != exitNotFound {
			t.Fatalf("get %s after expiry: exit %d, want %d", k, c, exitNotFound)
		}
	}
	if c, o, _ := mapctl(t, "", "get", p, "long"); c != 0 || o != "l\n" {
		t.Fatalf("get of the entry without TTL: %d %q", c, o)
	}
	if c, o, _ := mapctl(t, "", "stats", p, "--json"); c != 0 || !strings.Contains(o, `"cache": true`) || !strings.Contains(o, `"expired"`) || !strings.Contains(o, `"evictions"`) {
		t.Fatalf("stats --json of a cache: %d %q", c, o)
	}
	plain := newMap(t)
	if c, _, e := mapctl(t, "", "put", "--ttl", "1m", plain, "k", "v"); c != exitError || !strings.Contains(e, "not created as a cache") {
		t.Fatalf("put --ttl on a plain map: %d %q", c, e)
	}
	if c, _, e := mapctl(t, "k\tv\n", "load", "--ttl", "1m", plain, "-"); c != exitError || !strings.Contains(e, "not created as a cache") {
		t.Fatalf("load --ttl on a plain map: %d %q", c, e)
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

// The command list of "mapctl help" is a table: every summary starts in the
// same column, however long the longest command name.
func TestHelpListAligns(t *testing.T) {
	c, out, _ := mapctl(t, "", "help")
	if c != exitOK {
		t.Fatalf("help: exit %d", c)
	}
	_, list, _ := strings.Cut(out, "Commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	column := -1
	rows := 0
	for row := range strings.SplitSeq(list, "\n") {
		var summary string
		for _, c := range commands() {
			if strings.HasPrefix(row, "  "+c.name+" ") {
				summary = c.summary
			}
		}
		if strings.HasPrefix(row, "  help ") {
			summary = "show this help"
		}
		at := strings.Index(row, summary)
		if summary == "" || at < 0 {
			t.Fatalf("row %q names no command", row)
		}
		if column >= 0 && at != column {
			t.Errorf("row %q: summary in column %d, others in %d", row, at, column)
		}
		column = at
		rows++
	}
	if rows < 10 {
		t.Fatalf("found %d rows in %q", rows, list)
	}
}

// Output that cannot be written (a full disk, a closed pipe) fails the
// command: inspect and check used to exit 0 with nothing delivered. The
// message names the command, as every other error does, and says the
// command itself completed (a create's map is there).
func TestOutputErrorFails(t *testing.T) {
	p := newMap(t)
	for _, args := range [][]string{{"inspect", p}, {"check", p}, {"stats", p}, {"help"}} {
		var stderr bytes.Buffer
		want := "mapctl: " + args[0] + ": writing the output"
		if args[0] == "help" { // help is no command of the table
			want = "mapctl: writing the output"
		}
		if c := run(args, strings.NewReader(""), failingWriter{}, &stderr); c != exitError || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "completed") {
			t.Errorf("%q to a failing writer: exit %d, %q", args, c, stderr.String())
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestCreateOverAnEmptyFile: a failed create leaves an empty file, which
// is no map, and create makes one over it; a non-empty file at the path is
// refused. create leaves the empty file in place rather than removing it
// first, which could unlink a map another process was creating in it.
func TestCreateOverAnEmptyFile(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.map")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if c, o, e := mapctl(t, "", "create", empty, "--entries", "1000"); c != exitOK {
		t.Fatalf("create over an empty file: %d %q %q", c, o, e)
	}
	if c, _, _ := mapctl(t, "", "put", empty, "k", "v"); c != exitOK {
		t.Fatal("put into the created map")
	}
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("not a map"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, _, e := mapctl(t, "", "create", other, "--entries", "1000"); c == exitOK || !strings.Contains(e, "already exists") {
		t.Fatalf("create over a non-empty file: %d %q", c, e)
	}
}

// TestLockbenchStopsWhileWorkersStart: a signal while lockbench waits for
// its workers to be ready stops it at once, not after the 30 s wait, and
// kills workers that never got ready (here a worker that only sleeps).
func TestLockbenchStopsWhileWorkersStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	err := lockbenchWithin(t, ctx, "exec sleep 40", testLockbenchOpts(time.Second), 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("lockbenchRun after the signal: %v", err)
	}
}

// testLockbenchOpts are lockbench's options for one worker of one
// goroutine running for d.
func testLockbenchOpts(d time.Duration) *lockbenchOpts {
	return &lockbenchOpts{procs: 1, goroutines: 1, cs: 1, slots: 64, duration: d, alockBudgets: "20,5"}
}

// lockbenchWithin runs lockbenchRun on hapax with workers that run the
// shell script (or, if script is empty, this test binary as a worker that
// gets ready and never stops: stuckWorker), failing the test if it has not
// returned within d, and returns its error.
func lockbenchWithin(t *testing.T, ctx context.Context, script string, o *lockbenchOpts, d time.Duration) error {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "locks")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if script == "" {
		t.Setenv(stuckWorkerEnv, path)
	} else {
		self = filepath.Join(dir, "worker.sh")
		if err := os.WriteFile(self, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := lockbenchRun(ctx, self, path, "hapax", o)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("lockbench still running after %v", d)
		return nil
	}
}

// TestLockbenchMedianIsARun: with an even number of runs the reported
// throughput is one run's, as its ops and seconds are, not the mean of the
// middle two, which would make the JSON contradict itself.
func TestLockbenchMedianIsARun(t *testing.T) {
	r := medianResult([]lockbenchResult{{Ops: 100, Seconds: 1, OpsPerSec: 100, ExclusionOK: true}, {Ops: 300, Seconds: 1, OpsPerSec: 300, ExclusionOK: true}})
	if got := float64(r.Ops) / r.Seconds; got != r.OpsPerSec {
		t.Errorf("ops/seconds %v, ops_per_sec %v", got, r.OpsPerSec)
	}
}

// TestLockbenchMedianFairnessIsTheRunsOwn: with an even count the reported
// run's own fairness goes with its min_ops and max_ops, not the lower of
// the fairness values beside another run's counts.
func TestLockbenchMedianFairnessIsTheRunsOwn(t *testing.T) {
	r := medianResult([]lockbenchResult{
		{Ops: 100, Seconds: 1, OpsPerSec: 100, Fairness: 0.9, MinOps: 90, MaxOps: 100, ExclusionOK: true},
		{Ops: 300, Seconds: 1, OpsPerSec: 300, Fairness: 0.1, MinOps: 10, MaxOps: 100, ExclusionOK: true}})
	if r.Fairness != 0.9 || r.MinOps != 90 {
		t.Errorf("fairness %v with min/max %d/%d, want the slower run's own 0.9 with 90/100", r.Fairness, r.MinOps, r.MaxOps)
	}
}

// TestLockbenchKillsUnreadyWorkers: workers that never get ready are
// killed at the ready deadline, not left running with lockbench waiting
// for them.
func TestLockbenchKillsUnreadyWorkers(t *testing.T) {
	defer func(d time.Duration) { lockbenchReadyWait = d }(lockbenchReadyWait)
	lockbenchReadyWait = 300 * time.Millisecond
	err := lockbenchWithin(t, context.Background(), "exec sleep 40", testLockbenchOpts(time.Second), 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("lockbenchRun with a worker that never gets ready: %v", err)
	}
}

// TestLockbenchEndsWhenWorkersDoNot: a worker that exits before it is
// ready is reported at once, not at the ready deadline (30 s), and one that
// never stops after the stop word does not keep lockbench waiting for
// good.
func TestLockbenchEndsWhenWorkersDoNot(t *testing.T) {
	o := testLockbenchOpts(100 * time.Millisecond)
	t.Run("exits before ready", func(t *testing.T) {
		err := lockbenchWithin(t, context.Background(), "echo cannot-open >&2\nexit 2", o, 5*time.Second)
		if err == nil || !strings.Contains(err.Error(), "cannot-open") {
			t.Errorf("lockbenchRun with a worker that exits: %v", err)
		}
	})
	t.Run("never stops", func(t *testing.T) {
		defer func(d time.Duration) { lockbenchStopGrace = d }(lockbenchStopGrace)
		lockbenchStopGrace = 500 * time.Millisecond
		err := lockbenchWithin(t, context.Background(), "", o, 10*time.Second)
		if err == nil || !strings.Contains(err.Error(), "after the stop") {
			t.Errorf("lockbenchRun with a worker that never stops: %v", err)
		}
	})
}

// TestRecoverResetLocks: --reset-locks frees the map's locks when it has
// the map to itself, and refuses while another process has it open.
func TestRecoverResetLocks(t *testing.T) {
	p := newMap(t)
	other, err := hashmap.Open(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, o, e := mapctl(t, "", "recover", "--reset-locks", p); c == 0 || !strings.Contains(e, "other processes have the map open") {
		t.Fatalf("recover --reset-locks beside another open handle: %d %q %q", c, o, e)
	}
	other.Close()
	if c, o, e := mapctl(t, "", "recover", "--reset-locks", p); c != 0 || !strings.Contains(o, "locks reset: ") {
		t.Fatalf("recover --reset-locks: %d %q %q", c, o, e)
	}
}

// TestCreateSaysOneSegment: create's summary agrees in number with a map
// of one segment.
func TestCreateSaysOneSegment(t *testing.T) {
	p := filepath.Join(t.TempDir(), "one.map")
	c, o, e := mapctl(t, "", "create", p, "--entries", "100")
	if c != 0 || !strings.Contains(o, " 1 segment,") {
		t.Fatalf("create of one segment: %d %q %q", c, o, e)
	}
}

// TestCreateRefusesAverageSizesBeyondAnEntry: an average key and value
// that together exceed the largest entry are a usage error naming the
// flags, the values given and the largest accepted, and create leaves no
// file.
func TestCreateRefusesAverageSizesBeyondAnEntry(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.map")
	c, o, e := mapctl(t, "", "create", p, "--entries", "4", "--key-size", "536870912", "--value-size", "536870912")
	if c != exitUsage || o != "" {
		t.Fatalf("create: exit %d, stdout %q, stderr %q; want exit %d", c, o, e, exitUsage)
	}
	for _, want := range []string{"--key-size 536870912", "--value-size 536870912", "the largest --value-size accepted with this --key-size is 536870896"} {
		if !strings.Contains(e, want) {
			t.Errorf("stderr %q does not say %q", e, want)
		}
	}
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused create left a file: %v", err)
	}
}

// TestLockbenchHelpSaysSlotsZero: --slots 0 runs with the default array,
// which the help has to say, since no power of two is 0.
func TestLockbenchHelpSaysSlotsZero(t *testing.T) {
	_, o, _ := mapctl(t, "", "lockbench", "--help")
	if want := fmt.Sprintf("0 means the default, %d", ipc.DefaultSlots); !strings.Contains(o, want) {
		t.Errorf("lockbench --help does not say %q: %q", want, o)
	}
}

// TestBenchBadParamsAreUsageErrors: bench refuses what create refuses, and
// goroutine counts demo refuses, as usage errors before any work.
func TestBenchBadParamsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--entries", "1000000000000"},
		{"bench", "--goroutines", "1000000"},
	} {
		c, o, e := mapctl(t, "", args...)
		if c != exitUsage || o != "" || !strings.Contains(e, "usage") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and a usage message", args, c, o, e)
		}
		if strings.Contains(e, "sharedmap-bench-") {
			t.Errorf("%q names the temporary directory, gone by now: %q", args, e)
		}
	}
}

// TestBenchInterruptedSaysSo: an interrupted bench says "interrupted",
// not the context's "context canceled".
func TestBenchInterruptedSaysSo(t *testing.T) {
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"bench", "--entries", "1000", "--duration", "1m", "--dir", t.TempDir()}, strings.NewReader(""), pw, &stderr)
		pw.Close()
	}()
	// The second line comes after bench has taken SIGINT over, which keeps
	// the signal from ending this test binary.
	b := make([]byte, 1)
	for n := 0; n < 2; {
		if _, err := pr.Read(b); err != nil {
			t.Fatalf("bench ended before its second line: %v: %s", err, stderr.String())
		}
		if b[0] == '\n' {
			n++
		}
	}
	go io.Copy(io.Discard, pr)
	time.Sleep(200 * time.Millisecond) // into the run, past the workers' start
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-done:
		if got := stderr.String(); c != exitError || got != "mapctl: bench: interrupted\n" {
			t.Errorf("interrupted bench: exit %d, stderr %q; want exit %d and just \"interrupted\"", c, got, exitError)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("bench still running 30 s after SIGINT")
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

// TestLongKeyShortenedInErrors: an error about a 100 KB key quotes its
// first bytes and says how long it is, rather than echoing all of it.
func TestLongKeyShortenedInErrors(t *testing.T) {
	p := newMap(t)
	key := strings.Repeat("k", 100_000)
	for _, args := range [][]string{{"put", p, key, "v"}, {"get", p, key}, {"delete", p, key}} {
		c, _, e := mapctl(t, "", args...)
		if c == 0 || len(e) > 1000 || !strings.Contains(e, `"`+key[:maxQuoted]+`"… (100000 bytes)`) {
			t.Errorf("%s of a 100 KB key: exit %d, stderr of %d bytes, %.300q", args[0], c, len(e), e)
		}
	}
	// The flag package's errors name the argument they reject: a long one
	// that starts with "-" is cut the same way, one word or many, and so
	// is a long unknown command.
	spaced := strings.Repeat("k ", 50_000)
	hundredKB := regexp.MustCompile(`… \(10000[01] bytes\)`) // the argument's own length, said
	for _, args := range [][]string{
		{"get", p, "-" + key}, {"create", p, "--entries", key}, {"stats", p, "--json=" + key},
		{"get", p, "-" + spaced}, {"create", p, "--entries", spaced}, {"stats", p, "--json=" + spaced},
		{key}, {"help", key},
	} {
		c, _, e := mapctl(t, "", args...)
		if c != exitUsage || len(e) > 1000 || !hundredKB.MatchString(e) {
			t.Errorf("%.20q with a 100 KB argument: exit %d, stderr of %d bytes, %.300q", args[0], c, len(e), e)
		}
	}
	// A cut inside a character backs up to its start.
	if got, want := quoteShort(strings.Repeat("k", maxQuoted-1)+"é"+"tail"), `"`+strings.Repeat("k", maxQuoted-1)+`"… (69 bytes)`; got != want {
		t.Errorf("quoteShort cutting é: %s, want %s", got, want)
	}
	if got := quoteShort("short\n"); got != `"short\n"` {
		t.Errorf("quoteShort of a short key: %s", got)
	}
}

// TestErrorsNameFlags: errors that hashmap words with Options fields
// (MaxBloatFactor, Cache, DefaultTTL) name the flags that set them.
func TestErrorsNameFlags(t *testing.T) {
	full := filepath.Join(t.TempDir(), "full.map")
	if c, _, e := mapctl(t, "", "create", full, "--entries", "4", "--key-size", "4", "--value-size", "4"); c != 0 {
		t.Fatalf("create: %q", e)
	}
	var lines strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&lines, "key%d\tvalue\n", i)
	}
	p := newMap(t)
	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{lines.String(), []string{"load", full, "-"}, "more --entries or a larger --bloat"},
		{"", []string{"put", full, "one", "more"}, "more --entries or a larger --bloat"},
		{"", []string{"put", "--ttl", "1m", p, "k", "v"}, "not created as a cache (mapctl create --cache)"},
		{"k\tv\n", []string{"load", "--ttl", "1m", p, "-"}, "--ttl: the map was not created as a cache (mapctl create --cache)"},
	} {
		c, _, e := mapctl(t, tc.stdin, tc.args...)
		if c != exitError || !strings.Contains(e, tc.want) || strings.Contains(e, "MaxBloatFactor") || strings.Contains(e, "Options.") || strings.Contains(e, "DefaultTTL") {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q, no Options field", tc.args, c, e, exitError, tc.want)
		}
	}
}

// TestHelpHelp: help, which "mapctl help" lists, has a help of its own
// like every other command.
func TestHelpHelp(t *testing.T) {
	for _, args := range [][]string{{"help", "help"}, {"help", "--help"}, {"help", "-h"}} {
		c, o, e := mapctl(t, "", args...)
		if c != 0 || !strings.Contains(o, "usage: mapctl help") || !strings.Contains(o, "Example") || !strings.Contains(o, "Exit status") || e != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want help's usage and exit 0", args, c, o, e)
		}
	}
	// "--help COMMAND" is "help COMMAND"; a second command is a usage error.
	for _, args := range [][]string{{"--help", "create"}, {"-h", "create"}, {"help", "create"}} {
		if c, o, e := mapctl(t, "", args...); c != 0 || !strings.Contains(o, "usage: mapctl create") || e != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want create's usage", args, c, o, e)
		}
	}
	for _, args := range [][]string{{"help", "create", "extra"}, {"--help", "zz"}} {
		if c, o, e := mapctl(t, "", args...); c != exitUsage || o != "" || e == "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want a usage error", args, c, o, e)
		}
	}
}

// TestTimeoutSaysWhatReleases: a lock timeout in a command that only
// reads, which waits out a lock a dead process left, names the commands
// that find and release such a lock; a writer releases it itself.
func TestTimeoutSaysWhatReleases(t *testing.T) {
	timeout := fmt.Errorf("segment 35: %w", hashmap.ErrTimeout)
	for _, c := range []*command{getCmd, dumpCmd, statsCmd, inspectCmd, checkCmd, putCmd} {
		var errb bytes.Buffer
		e := &env{stderr: &errb}
		e.fail(c, timeout)
		if hint := strings.Contains(errb.String(), "mapctl recover releases it"); hint != c.readOnly {
			t.Errorf("%s: %q; want the hint %v", c.name, errb.String(), c.readOnly)
		}
	}
}

// TestBadFlagValuesSayWhatTheFlagTakes: a flag value that does not parse
// is answered with what the flag takes and an example, where the flag
// package says only "parse error", which gives no clue that --ttl wants a
// unit or that --entries takes no exponent.
func TestBadFlagValuesSayWhatTheFlagTakes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.map")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", p, "--entries", "1e6"}, `invalid value "1e6" for flag --entries: want a whole number in digits`},
		{[]string{"create", p, "--bloat", "lots"}, `invalid value "lots" for flag --bloat: want a number`},
		{[]string{"put", "--ttl", "5", p, "k", "v"}, `invalid value "5" for flag --ttl: want a duration with its unit, as 90s`},
		{[]string{"create", p, "--entries", "-5"}, `--entries -5: want at least 1`},
		{[]string{"create", p, "--bloat", "0.5"}, `--bloat 0.5: want a number at least 1`},
	} {
		if c, _, e := mapctl(t, "", tc.args...); c != exitUsage || !strings.Contains(e, tc.want) {
			t.Errorf("mapctl %v: status %d, stderr %q; want %d and %q", tc.args, c, e, exitUsage, tc.want)
		}
	}
}
