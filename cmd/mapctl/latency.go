package main

import (
	"math"
	"math/bits"
	"time"
)

// latencyHistogram counts durations in buckets an eighth of a power of two
// wide: bucket 8*(b-2)+s holds durations whose highest set bit is b and
// whose next three bits are s (exact below 8 ns), so any percentile is read
// to within 12.5%.
type latencyHistogram [64 * 8]uint64

func (h *latencyHistogram) record(d time.Duration) {
	ns := uint64(max(d, 0))
	h[bucketOf(ns)]++
}

func bucketOf(ns uint64) int {
	if ns < 8 {
		return int(ns)
	}
	b := bits.Len64(ns) - 1 // highest set bit, >= 3
	return (b-2)*8 + int(ns>>(b-3)&7)
}

// bucketLow is the smallest duration that falls in bucket i.
func bucketLow(i int) uint64 {
	if i < 8 {
		return uint64(i)
	}
	b, s := i/8+2, uint64(i%8)
	return (8 + s) << (b - 3)
}

func (h *latencyHistogram) add(o *latencyHistogram) {
	for i := range h {
		h[i] += o[i]
	}
}

func (h *latencyHistogram) count() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// percentile returns the middle of the bucket that holds percentile p of
// the recorded durations (by nearest rank), in nanoseconds (0 if none were
// recorded).
func (h *latencyHistogram) percentile(p float64) float64 {
	n := h.count()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(p/100*float64(n))) - 1 // nearest rank, from 0
	if rank >= n {
		rank = n - 1
	}
	var seen uint64
	for i, c := range h {
		if seen += c; seen > rank {
			if lo, hi := bucketLow(i), bucketLow(i+1); hi-lo > 1 {
				return float64(lo+hi) / 2
			}
			return float64(bucketLow(i)) // a bucket of one value
		}
	}
	return 0
}
