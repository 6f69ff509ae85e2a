//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

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
