//go:build linux

package segment

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testhook"
)

// readAllEntries is every key and value the table holds, by Entries,
// failing the test on a key seen twice.
func readAllEntries(t *testing.T, tb *Table) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := range tb.layout.Segments {
		if err := tb.Segment(int(i)).Entries(func(k, v []byte) bool {
			if _, dup := out[string(k)]; dup {
				t.Errorf("key %q seen twice", k)
			}
			out[string(k)] = string(v)
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// crashOp is one random write for TestRandomWritesDieAtEveryStep.
type crashOp struct {
	kind int // 0 put, 1 delete, 2 compute (grow), 3 put if absent
	key  []byte
	val  []byte
}

func (o crashOp) run(tb *Table) error {
	h := hashOf(o.key)
	s := tb.For(h)
	switch o.kind {
	case 0:
		_, err := s.put(h, o.key, o.val, Replace)
		return err
	case 1:
		_, err := s.Delete(h, o.key)
		return err
	case 2:
		return s.compute(h, o.key, func(old []byte, found bool) ([]byte, bool) {
			return append(append([]byte(nil), old...), o.val...), true
		})
	default:
		_, err := s.put(h, o.key, o.val, IfAbsent)
		return err
	}
}

// TestRandomWritesDieAtEveryStep runs
// random writes (puts that grow, shrink and move values, deletes, computes
// that grow values, inserts that link tiers, compact and evict) and kills
// each at every testStep in turn, the eviction hand's steps included:
// after recovery every key holds its value from before the write or after
// it, and Check finds nothing. At every third death the recoverer dies
// too, at each of its own steps, and a second recovery must keep what the
// first would have (in -short mode, every ninth, over fewer writes). SHAREDMAP_CRASH_SEED
// picks another sequence of writes.
func TestRandomWritesDieAtEveryStep(t *testing.T) {
	seed := uint64(11)
	if v := os.Getenv("SHAREDMAP_CRASH_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("SHAREDMAP_CRASH_SEED: %v", err)
		}
	}
	nestedEvery := 3
	if testing.Short() {
		nestedEvery = 9
	}
	for _, c := range []struct {
		name string
		p    Params
		keys int
	}{
		{"plain", Params{Entries: 48, AverageKeySize: 8, AverageValueSize: 24, MaxBloatFactor: 3, Segments: 1}, 140},
		{"cache", Params{Entries: 16, AverageKeySize: 8, AverageValueSize: 24, MaxBloatFactor: 1, Segments: 1, Cache: true}, 300},
		{"plain-noundo", Params{Entries: 48, AverageKeySize: 8, AverageValueSize: 24, MaxBloatFactor: 3, Segments: 1, NoUndo: true}, 140},
		{"plain-tiers", Params{Entries: 24, AverageKeySize: 8, AverageValueSize: 24, MaxBloatFactor: 8, Segments: 1}, 200},
		{"cache-tiers", Params{Entries: 24, AverageKeySize: 8, AverageValueSize: 24, MaxBloatFactor: 4, Segments: 1, Cache: true}, 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb, _ := newTable(t, c.p)
			tb.SetClock(func() int64 { return 1 })
			testHookEvictStep = testStep // a death before each step of the eviction hand too
			defer func() { testHookEvictStep = nil }()
			rng := rand.New(rand.NewPCG(seed, 12))
			all := tb.region.Bytes(0, tb.region.Len())
			ops := 400
			if testing.Short() {
				ops = 120
			}
			deaths := 0
			for i := range ops {
				o := crashOp{kind: rng.IntN(4), key: fmt.Appendf(nil, "k%03d", rng.IntN(c.keys))}
				if o.kind == 1 && rng.IntN(3) != 0 {
					o.kind = 0
				}
				o.val = bytes.Repeat([]byte{byte('a' + i%26)}, rng.IntN(90))
				if o.kind == 2 {
					o.val = o.val[:min(len(o.val), rng.IntN(30))]
				}
				base := bytes.Clone(all)
				pre := readAllEntries(t, tb)
				for step := 1; ; step++ {
					copy(all, base)
					var snapshot []byte
					n := 0
					testhook.OnStep = func() {
						if n++; n == step {
							snapshot = bytes.Clone(all)
						}
					}
					tb.Segment(0).lock.SetLedger(new(uint64)) // the process that dies
					err := o.run(tb)
					testhook.OnStep = nil
					if err != nil && !errors.Is(err, ErrFull) {
						t.Fatalf("op %d %+v: %v", i, o, err)
					}
					if snapshot == nil {
						break // the op ended before this step: the file is as it left it
					}
					post := readAllEntries(t, tb)
					deaths++
					// The recoverer dies too, at each of its steps, now and then:
					// a second recovery must find what the first would have kept.
					if deaths%nestedEvery == 0 {
						for r := 1; ; r++ {
							copy(all, snapshot)
							tb.Segment(0).lock.SetLedger(new(uint64)) // the recoverer that dies
							var snap2 []byte
							m := 0
							testhook.OnStep = func() {
								if m++; m == r {
									snap2 = bytes.Clone(all)
								}
							}
							_, err := tb.Segment(0).Recover(func(dst []uint64) []uint64 { return dst }, time.Now().Add(time.Second))
							testhook.OnStep = nil
							if err != nil {
								t.Fatalf("op %d step %d: first Recover: %v", i, step, err)
							}
							if snap2 == nil {
								break
							}
							copy(all, snap2)
							tb.Segment(0).lock.SetLedger(new(uint64))
							rep, err := tb.Segment(0).Recover(func(dst []uint64) []uint64 { return dst }, time.Now().Add(time.Second))
							if err != nil {
								t.Fatalf("op %d step %d/%d: Recover: %v", i, step, r, err)
							}
							got := readAllEntries(t, tb)
							for k, g := range got {
								if a, aok := pre[k]; aok && a == g {
									continue
								}
								if b, bok := post[k]; bok && b == g {
									continue
								}
								t.Errorf("op %d step %d, recoverer died at %d: key %q = %q, before %q after %q (%+v)", i, step, r, k, g, pre[k], post[k], rep)
							}
							for k, a := range pre {
								if _, ok := got[k]; !ok && k != string(o.key) {
									if _, inPost := post[k]; inPost {
										t.Errorf("op %d step %d, recoverer died at %d: key %q (%q) lost (%+v)", i, step, r, k, a, rep)
									}
								}
							}
							tb.Segment(0).Check(func(err error) { t.Errorf("op %d step %d/%d: check: %v", i, step, r, err) })
							if t.Failed() {
								t.FailNow()
							}
						}
					}
					copy(all, snapshot)
					tb.Segment(0).lock.SetLedger(new(uint64)) // the survivor's
					rep, err := tb.Segment(0).Recover(func(dst []uint64) []uint64 { return dst }, time.Now().Add(time.Second))
					if err != nil {
						t.Fatalf("op %d step %d: Recover: %v", i, step, err)
					}
					got := readAllEntries(t, tb)
					keys := map[string]bool{}
					for k := range pre {
						keys[k] = true
					}
					for k := range post {
						keys[k] = true
					}
					for k := range got {
						keys[k] = true
					}
					for k := range keys {
						g, gok := got[k]
						a, aok := pre[k]
						b, bok := post[k]
						if (gok == aok && g == a) || (gok == bok && g == b) {
							continue
						}
						if c.p.Cache && k == string(o.key) && !gok {
							continue // a cache map's move by removal and insert: documented
						}
						if c.p.NoUndo && k == string(o.key) && !gok {
							continue // torn in place without a record: documented
						}
						t.Errorf("op %d (%d %q, %d bytes) step %d: key %q = %q (present %v); before %q (%v), after %q (%v); recovery %+v", i, o.kind, o.key, len(o.val), step, k, g, gok, a, aok, b, bok, rep)
					}
					tb.Segment(0).Check(func(err error) { t.Errorf("op %d step %d: check: %v", i, step, err) })
					if t.Failed() {
						t.FailNow()
					}
				}
				tb.Segment(0).Check(func(err error) { t.Errorf("op %d: check after the op: %v", i, err) })
			}
			t.Logf("%d ops, %d deaths, %d tiers, %d compactions, %d relocations, %d evicted", ops, deaths, tb.Segment(0).Tiers(), tb.Compactions.Load(), tb.Relocations.Load(), tb.Segment(0).evictedCount())
		})
	}
}
