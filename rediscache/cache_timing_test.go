//go:build linux

package rediscache

import (
	"strings"
	"testing"
)

// BenchmarkGetIntoHit is a hit through the cache; BenchmarkMapGetInto the
// map's own GetInto of the same entry, the floor a hit builds on (it adds
// a read of the control record and a clock read).
func BenchmarkGetIntoHit(b *testing.B) {
	c := newCache(b, nil)
	key := prefixFor(b) + "k"
	if err := c.Set(ctx, key, []byte(strings.Repeat("v", 64)), 0); err != nil {
		b.Fatal(err)
	}
	settle(b, c) // the Set's own invalidation comes back
	fillEntry(b, c, key)
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.GetInto(ctx, buf[:0], key); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if s := c.Stats(); s.StaleRefusals > 0 {
		b.Logf("%d stale refusals", s.StaleRefusals)
	}
}

func BenchmarkMapGetInto(b *testing.B) {
	c := newCache(b, nil)
	key := prefixFor(b) + "k"
	if err := c.Set(ctx, key, []byte(strings.Repeat("v", 64)), 0); err != nil {
		b.Fatal(err)
	}
	settle(b, c) // the Set's own invalidation comes back
	fillEntry(b, c, key)
	buf := make([]byte, 0, 128)
	kb := []byte(key)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Map().GetInto(buf[:0], kb); err != nil {
			b.Fatal(err)
		}
	}
}
