//go:build linux

package segment

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkOverwriteChurn: overwrites of random keys with values of 4 to
// 124 bytes (64 on average, what the map was sized for) in a map of 100k
// entries, so that values outgrow their runs, move, and leave the tiers
// fragmented: the allocator's and compaction's workload, which a benchmark
// of fixed-size values never reaches. It reports compactions and
// relocations per overwrite beside the time, the share of entries at
// their home runs after the fill and at the end, and the density the
// churn leaves: the tiers in use, and the share of their chunks used.
func BenchmarkOverwriteChurn(b *testing.B) {
	const n = 100_000
	tb, _ := newTable(b, Params{Entries: n, AverageKeySize: 16, AverageValueSize: 64, MaxBloatFactor: 2})
	keys := make([][]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	value := make([]byte, 124)
	put := func(k []byte) {
		h := hashOf(k)
		if _, err := tb.For(h).put(h, k, value[:4+r.IntN(121)], Replace); err != nil {
			b.Fatal(err)
		}
	}
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "k%015d", i)
		put(keys[i])
	}
	atHomeAfterFill := atHome(tb, keys)
	for range 2 * n { // into the steady state of a churned map
		put(keys[r.IntN(n)])
	}
	compactions, relocations := tb.Compactions.Load(), tb.Relocations.Load()
	for b.Loop() {
		put(keys[r.IntN(n)])
	}
	b.ReportMetric(float64(tb.Compactions.Load()-compactions)/float64(b.N), "compactions/op")
	b.ReportMetric(float64(tb.Relocations.Load()-relocations)/float64(b.N), "relocations/op")
	b.ReportMetric(atHomeAfterFill, "at-home-filled")
	b.ReportMetric(atHome(tb, keys), "at-home-churned")
	tiers := tb.layout.Segments + tb.ExtraTiersInUse()
	b.ReportMetric(float64(tiers), "tiers")
	b.ReportMetric(float64(tb.UsedChunks())/float64(tiers*tb.layout.Chunks), "fill")
}

// atHome is the share of keys whose entries start at one of their home
// runs.
func atHome(tb *Table, keys [][]byte) float64 {
	n := 0
	for _, k := range keys {
		h := hashOf(k)
		if _, slot, _, found, _ := tb.lookupHome(tb.segmentOf(h), h, k); found && atEitherHome(tb, k, slotChunk(slot)) {
			n++
		}
	}
	return float64(n) / float64(len(keys))
}
