//go:build linux

package segment

import (
	"fmt"
	"testing"
)

// BenchmarkInsertLongChain: inserts of new keys into a segment whose chain
// is about a hundred tiers long (a map of 2 segments created for 1,000
// entries that took 100 times as many), all full but the last: each
// insert looks for its key through the whole chain, then for a tier with
// room (Segment.firstFit). The segment-level view of
// BenchmarkGrownMapInsert, small enough to run many times in turn.
func BenchmarkInsertLongChain(b *testing.B) {
	tb, _ := newTable(b, Params{Entries: 1000, AverageKeySize: 16, AverageValueSize: 64, MaxBloatFactor: 1000, Segments: 2})
	value := make([]byte, 64)
	put := func(i int) {
		k := fmt.Appendf(nil, "k%015d", i)
		h := hashOf(k)
		if _, err := tb.For(h).put(h, k, value, Replace); err != nil {
			b.Fatal(err)
		}
	}
	const fill = 100_000
	for i := range fill {
		put(i)
	}
	i := fill
	for b.Loop() {
		put(i)
		i++
	}
	b.ReportMetric(float64(tb.Segment(0).Tiers()), "tiers/segment")
}
