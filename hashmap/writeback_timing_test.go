//go:build linux

package hashmap

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkPutAfterWriteback: whether page faults reach Put. Overwriting
// Puts on a freshly filled map, then on one left idle until the kernel has
// written its dirty pages back (and write-protected them again, so that the
// next write to each faults), reporting minor faults per Put. It idles
// about 40 s: run it alone,
// go test -run='^$' -bench=PutAfterWriteback ./hashmap
func BenchmarkPutAfterWriteback(b *testing.B) {
	m, keys := openFilledBenchMap(b)
	puts := func(b *testing.B) {
		b.ReportAllocs()
		before := minorFaults(b)
		i := 0
		for b.Loop() {
			if err := m.Put(nextKey(keys, i), benchValue); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(minorFaults(b)-before)/float64(i), "faults/op")
	}
	b.Run("fresh", puts)
	b.Run("after-writeback", func(b *testing.B) {
		time.Sleep(writebackDelay())
		puts(b)
	})
}

// minorFaults is this process's count of minor page faults so far.
func minorFaults(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return int64(ru.Minflt) // int32 on 386
}

// writebackDelay is how long dirty pages may wait before the kernel's
// flusher writes them (vm.dirty_expire_centisecs plus one flusher
// interval), with a margin: 40 s with Linux's defaults.
func writebackDelay() time.Duration {
	centisecs := func(name string, fallback int) time.Duration {
		s, err := os.ReadFile("/proc/sys/vm/" + name)
		n, perr := strconv.Atoi(strings.TrimSpace(string(s)))
		if err != nil || perr != nil {
			n = fallback
		}
		return time.Duration(n) * 10 * time.Millisecond
	}
	return centisecs("dirty_expire_centisecs", 3000) + centisecs("dirty_writeback_centisecs", 500) + 5*time.Second
}
