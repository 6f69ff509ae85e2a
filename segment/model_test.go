//go:build linux

package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/offheap"
)

var seedFlag = flag.Uint64("seed", 0, "seed for randomized segment tests (0 = from the clock, printed)")

func testSeed(t testing.TB) uint64 {
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed=%d)", s, s)
	return s
}

// newTable maps a fresh sparse file laid out for p.
func newTable(t testing.TB, p Params) (*Table, string) {
	t.Helper()
	l, err := NewLayout(p, 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	l.Stamps = l.Stamps && !testUnstamped
	path := filepath.Join(t.TempDir(), "map")
	tb := openTable(t, path, l, true)
	return tb, path
}

func openTable(t testing.TB, path string, l Layout, create bool) *Table {
	t.Helper()
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if create {
		if err := f.Truncate(l.End); err != nil {
			t.Fatal(err)
		}
	}
	r, err := offheap.MapRegion(f, l.End, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Unmap() })
	if create {
		Format(r, l)
	}
	tb, err := Open(r, l, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func hashOf(k []byte) uint64 { return xxhash.Sum64(k) }

// TestModel runs random operations against the table and a Go map side by
// side, with a geometry small enough that tiers overflow, values relocate
// and tiers compact, and checks every result and the table's invariants.
func TestModel(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	p := Params{Entries: 256, AverageKeySize: 8, AverageValueSize: 24, MaxBloatFactor: 3, Segments: 4}
	tb, path := newTable(t, p)
	model := map[string][]byte{}
	ops := 30000
	if testing.Short() {
		ops = 5000
	}
	full := 0
	for i := range ops {
		k := []byte(fmt.Sprintf("k%d", rng.IntN(600)))
		h := hashOf(k)
		s := tb.For(h)
		switch op := rng.IntN(10); {
		case op < 4:
			v := bytes.Repeat([]byte{byte(i)}, rng.IntN(80))
			inserted, err := s.put(h, k, v, Replace)
			if errors.Is(err, ErrFull) {
				full++
				continue
			}
			if err != nil {
				t.Fatalf("op %d put: %v", i, err)
			}
			_, had := model[string(k)]
			if inserted == had {
				t.Fatalf("op %d put %q: inserted=%v but model had=%v", i, k, inserted, had)
			}
			model[string(k)] = v
		case op < 5:
			v := []byte(fmt.Sprintf("abs%d", i))
			inserted, err := s.put(h, k, v, IfAbsent)
			if errors.Is(err, ErrFull) {
				full++
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, had := model[string(k)]; !had {
				model[string(k)] = v
				if !inserted {
					t.Fatalf("op %d: IfAbsent did not insert an absent key", i)
				}
			} else if inserted {
				t.Fatalf("op %d: IfAbsent inserted over a present key", i)
			}
		case op < 7:
			existed, err := s.Delete(h, k)
			if err != nil {
				t.Fatal(err)
			}
			_, had := model[string(k)]
			if existed != had {
				t.Fatalf("op %d delete %q: existed=%v model=%v", i, k, existed, had)
			}
			delete(model, string(k))
		case op < 8:
			err := s.compute(h, k, func(old []byte, found bool) ([]byte, bool) {
				if !found {
					return []byte("1"), true
				}
				if len(old) > 60 {
					return nil, false
				}
				return append(old, 'x'), true
			})
			if errors.Is(err, ErrFull) {
				full++
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			old, found := model[string(k)]
			switch {
			case !found:
				model[string(k)] = []byte("1")
			case len(old) > 60:
				delete(model, string(k))
			default:
				model[string(k)] = append(append([]byte(nil), old...), 'x')
			}
		default:
			got, found, err := s.get(h, k, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, had := model[string(k)]
			if found != had || !bytes.Equal(got, want) {
				t.Fatalf("op %d get %q = %q,%v want %q,%v", i, k, got, found, want, had)
			}
		}
		if i%1000 == 0 {
			checkTable(t, tb, model)
		}
	}
	checkTable(t, tb, model)
	t.Logf("%d ops, %d entries, %d overflow tiers, %d ErrFull", ops, len(model), tb.ExtraTiersInUse(), full)
	t.Logf("%d relocations, %d compactions", tb.Relocations.Load(), tb.Compactions.Load())
	if tb.ExtraTiersInUse() == 0 || tb.Relocations.Load() == 0 || tb.Compactions.Load() == 0 {
		t.Fatal("the test never overflowed a tier, relocated or compacted: it cannot catch bugs there")
	}
	// Reopen from the file: everything is still there.
	tb2 := openTable(t, path, tb.layout, false)
	checkTable(t, tb2, model)
}

// checkTable verifies counters, bitmaps and contents against the model.
func checkTable(t *testing.T, tb *Table, model map[string][]byte) {
	t.Helper()
	if n := tb.Len(); n != int64(len(model)) {
		t.Fatalf("Len() = %d, model has %d", n, len(model))
	}
	seen := 0
	for i := range tb.layout.Segments {
		s := tb.Segment(int(i))
		if s.Seq()&1 != 0 {
			t.Fatalf("segment %d left with an odd sequence", i)
		}
		if st := s.Lock().State(); !st.Free() {
			t.Fatalf("segment %d lock left %v", i, st)
		}
		err := s.Entries(func(k, v []byte) bool {
			seen++
			if want, ok := model[string(k)]; !ok || !bytes.Equal(v, want) {
				t.Errorf("segment %d holds %q=%q, model %q (present %v)", i, k, v, want, ok)
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		// Each tier: slot count == entries, used bits == sum of entry runs.
		tn := i
		for {
			tv := tb.tier(tn)
			var slots, chunks int64
			for _, sl := range tv.slots {
				if sl != 0 {
					slots++
					c := slotChunk(sl)
					klen, vlen, nch, ok := tb.entryAt(&tv, c)
					if !ok {
						t.Fatalf("tier %d: bad entry", tn)
					}
					off := c * tb.layout.ChunkSize
					stored := binary.LittleEndian.Uint32(tv.space[off+ehChecksum:])
					want := entryChecksum(tv.space[off:off+ehChecksum], tb.entryKey(&tv, c, klen), tb.entryValue(&tv, c, klen, vlen))
					if tb.layout.Checksums && stored != want {
						t.Fatalf("tier %d chunk %d: checksum %#x, entry hashes to %#x", tn, c, stored, want)
					}
					chunks += nch
				}
			}
			if slots != int64(tv.entries()) || chunks != tv.usedBits() || chunks != int64(tv.usedChunks()) {
				t.Fatalf("tier %d: %d slots, entries %d; chunks %d, bits %d, used %d", tn, slots, tv.entries(), chunks, tv.usedBits(), tv.usedChunks())
			}
			if nx := tv.next(); nx == 0 {
				break
			} else {
				tn = int64(nx - 1)
			}
		}
	}
	if seen != len(model) {
		t.Fatalf("iteration saw %d entries, model has %d", seen, len(model))
	}
	checkClean(t, tb) // Check must agree that a table the model accepts is sound
	_ = atomic.LoadUint64
}

// usedBits counts the chunks marked used (for checks).
func (t *tier) usedBits() int64 {
	var n int
	for _, w := range t.bitmap {
		n += bits.OnesCount64(w)
	}
	return int64(n)
}
