//go:build linux

package segment

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testhook"
)

// TestOverwriteInterleavings: between Put's look and its lock another
// writer runs a random batch: inserts (some linking a tier or compacting
// one), deletes that shift slots back, relocations, the key itself deleted
// or stored again elsewhere. Whether the Put takes the fast path
// (tryOverwriteOptimistic) or the general one, the map must match the model after
// every round. (Without tryOverwriteOptimistic's check of the sequence after its
// lock, it fails within a few rounds.)
func TestOverwriteInterleavings(t *testing.T) {
	rounds := 20000
	if testing.Short() {
		rounds = 3000
	}
	rng := rand.New(rand.NewPCG(testSeed(t), 7))
	tb, _ := newTable(t, Params{Entries: 128, AverageKeySize: 8, AverageValueSize: 24, MaxBloatFactor: 3, Segments: 1})
	s := tb.Segment(0)
	model := map[string][]byte{}
	put := func(k, v []byte) {
		if _, err := s.put(hashOf(k), k, v, Replace); errors.Is(err, ErrFull) {
			return
		} else if err != nil {
			t.Fatal(err)
		}
		model[string(k)] = v
	}
	del := func(k []byte) {
		if _, err := s.Delete(hashOf(k), k); err != nil {
			t.Fatal(err)
		}
		delete(model, string(k))
	}
	key := func() []byte { return []byte(fmt.Sprintf("key%03d", rng.IntN(300))) }
	for range 100 {
		put(key(), bytes.Repeat([]byte{'x'}, rng.IntN(60)))
	}
	defer func() { testAfterPreview = nil }()
	fast := 0
	for round := range rounds {
		var k []byte
		for kk := range model {
			k = []byte(kk)
			if rng.IntN(4) == 0 {
				break
			}
		}
		if k == nil {
			k = key()
		}
		v := bytes.Repeat([]byte{byte('a' + round%26)}, rng.IntN(len(model[string(k)])+1)) // fits the old run
		var batch []func()
		for n := rng.IntN(5); n > 0; n-- {
			switch kk := key(); rng.IntN(5) {
			case 0, 1:
				vv := bytes.Repeat([]byte{'i'}, rng.IntN(200))
				batch = append(batch, func() { put(kk, vv) })
			case 2:
				batch = append(batch, func() { del(kk) })
			case 3:
				vv := bytes.Repeat([]byte{'R'}, rng.IntN(200))
				batch = append(batch, func() { put(bytes.Clone(k), vv) })
			case 4:
				batch = append(batch, func() { del(bytes.Clone(k)) })
			}
		}
		testAfterPreview = func(*Segment) {
			testAfterPreview = nil
			if pc, _, _, ok := runtime.Caller(1); ok && strings.HasSuffix(runtime.FuncForPC(pc).Name(), ".tryOverwriteOptimistic") {
				fast++
			}
			for _, f := range batch {
				f()
			}
		}
		put(k, v)
		testAfterPreview = nil
		for kk, want := range model {
			got, found, err := s.get(hashOf([]byte(kk)), []byte(kk), nil)
			if err != nil || !found || !bytes.Equal(got, want) {
				t.Fatalf("round %d: %q = %q, %v, %v; want %q", round, kk, got, found, err, want)
			}
		}
	}
	checkTable(t, tb, model)
	t.Logf("%d rounds, %d of them with the batch run inside tryOverwriteOptimistic; %d compactions, %d relocations, %d tiers", rounds, fast, tb.Compactions.Load(), tb.Relocations.Load(), s.Tiers())
}

// TestOverwriteConfinedToItsRun: the fast path bounds the value by what
// its probe checked, never by a second read of the header. Here a goroutine
// keeps flipping the entry's chunk count between its true value and a huge
// one, as a writer that does not move the sequence could in a damaged file
// (an insert into chunks a bad bitmap calls free): a value larger than the
// run must never be written.
func TestOverwriteConfinedToItsRun(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	k := []byte("the-key!")
	if _, err := s.put(hashOf(k), k, []byte("small"), Replace); err != nil {
		t.Fatal(err)
	}
	_, slot, _, found, _ := tb.lookupHome(0, hashOf(k), k)
	if !found {
		t.Fatal("key not in its home tier")
	}
	g := &tb.geom
	at := g.entriesOff + uint64(slotChunk(slot))<<g.chunkShift
	w := &tb.tierWords[at>>3+1]
	good := atomic.LoadUint64(w)
	bad := good&^0xffffffff | 0xffff
	run := (good & 0xffffffff) << g.chunkShift
	value := bytes.Repeat([]byte{'V'}, int(run)+64)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				atomic.StoreUint64(w, good)
				return
			default:
				atomic.StoreUint64(w, bad)
				atomic.StoreUint64(w, good)
			}
		}
	}()
	escaped := false
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && !escaped; {
		escaped = s.tryOverwriteOptimistic(hashOf(k), k, value)
	}
	close(stop)
	<-done
	if escaped {
		t.Errorf("tryOverwriteOptimistic wrote a %d-byte value into a %d-byte run", len(value), run)
	}
}

// TestOverwriteDiesAtEveryStep: a writer dies at each step of a value's
// rewrite, for each way a rewrite is made: the fast path, the general path
// in place, grown into the free chunks after the run, and moved because
// the entry is too large for the undo record. A death is the file as it was
// at that step (a snapshot, put back after the Put has run on). Recovery
// must leave the key with its old value or its new one: before the undo
// record, a death in the middle of an in-place copy left a torn entry that
// recovery dropped, key and all.
func TestOverwriteDiesAtEveryStep(t *testing.T) {
	type setup struct {
		name     string
		local    bool                               // queue writers locally: no fast path
		newValue func(tb *Table, old []byte) []byte // the rewrite
		moves    bool                               // the rewrite relocates the entry
		grows    bool                               // it takes the free chunks after its run
		ledger   bool                               // TryOverwriteFastLedger: the record staged
		large    bool                               // values of many lines (600 bytes)
	}
	for _, c := range []setup{
		{name: "fast-path", newValue: func(_ *Table, old []byte) []byte { return bytes.Repeat([]byte{'n'}, len(old)) }},
		{name: "fast-ledger-path", ledger: true, newValue: func(_ *Table, old []byte) []byte { return bytes.Repeat([]byte{'n'}, len(old)) }},
		// Values of many lines: the staged copy and the rewrite span them.
		{name: "fast-ledger-path-large", ledger: true, large: true, newValue: func(_ *Table, old []byte) []byte { return bytes.Repeat([]byte{'n'}, len(old)) }},
		// A value that needs fewer chunks than the run has: the header
		// staged on the guess that the run is as long as the value needs
		// is staged again with the run's length.
		{name: "fast-ledger-path-shorter", ledger: true, newValue: func(_ *Table, old []byte) []byte { return []byte("short") }},
		{name: "general-path", local: true, newValue: func(_ *Table, old []byte) []byte { return bytes.Repeat([]byte{'n'}, len(old)-3) }},
		{name: "grown", local: true, grows: true, newValue: func(tb *Table, old []byte) []byte {
			return bytes.Repeat([]byte{'n'}, len(old)+int(tb.layout.ChunkSize))
		}},
		{name: "too-large-to-save", moves: true, newValue: func(tb *Table, _ []byte) []byte {
			return bytes.Repeat([]byte{'n'}, int(tb.undoCap))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			deaths, restored := 0, 0
			for step := 1; ; step++ {
				valueSize := 40
				if c.large {
					valueSize = 600
				}
				tb, _ := newTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: valueSize, MaxBloatFactor: 1, Segments: 1})
				tb.SetLocalQueue(c.local)
				s := tb.Segment(0)
				model := map[string][]byte{}
				for i := range 20 {
					k, v := fmt.Appendf(nil, "key%04d", i), bytes.Repeat([]byte{'o'}, valueSize-10+i)
					if _, err := s.put(hashOf(k), k, v, Replace); err != nil {
						t.Fatal(err)
					}
					model[string(k)] = v
				}
				k := []byte("key0007")
				if c.grows {
					k = nil // a key whose run is followed by enough free chunks
					for key := range model {
						loc, found, ok := s.find(hashOf([]byte(key)), []byte(key))
						if found && ok && loc.tier.runFree(loc.chunk+loc.nch, 2) {
							k = []byte(key)
							break
						}
					}
					if k == nil {
						t.Fatal("no entry with free chunks after it")
					}
				}
				old := model[string(k)]
				nv := c.newValue(tb, old)
				before, _, _ := s.find(hashOf(k), k)
				all := tb.region.Bytes(0, tb.region.Len())
				var snapshot []byte
				n := 0
				testhook.OnStep = func() {
					if n++; n == step {
						snapshot = bytes.Clone(all)
					}
				}
				s.lock.SetLedger(new(uint64)) // the process that dies
				if c.ledger {
					fast := new(uint64)
					tb.SetFastLedgers(func(int) *uint64 { return fast }, 0)
				}
				relocations := tb.Relocations.Load()
				var err error
				if c.ledger {
					if chunks := tb.chunksFor(len(k), len(nv)); chunks == tb.chunksFor(len(k), len(old)) == (c.name == "fast-ledger-path-shorter") {
						t.Fatalf("the new value takes %d chunks: the test lost its point", chunks)
					}
					done, inserted := s.TryOverwriteFastLedger(hashOf(k), k, nv)
					if !done || inserted {
						t.Fatalf("TryOverwriteFastLedger: done %v, inserted %v; want an overwrite", done, inserted)
					}
				} else {
					_, err = s.put(hashOf(k), k, nv, Replace)
				}
				testhook.OnStep = nil
				if err != nil {
					t.Fatal(err)
				}
				if moved := tb.Relocations.Load() != relocations; moved != c.moves {
					t.Fatalf("the rewrite moved the entry: %v, want %v", moved, c.moves)
				}
				if snapshot == nil { // the Put ended before this step
					t.Logf("%d steps; %d deaths, %d restored from the undo record", step-1, deaths, restored)
					if deaths < 4 || (!c.moves && restored == 0) {
						t.Fatal("the test lost its point")
					}
					return
				}
				deaths++
				copy(all, snapshot)           // the file as the death left it
				s.lock.SetLedger(new(uint64)) // the survivor's
				rep, err := s.Recover(func(dst []uint64) []uint64 { return dst }, time.Now().Add(time.Second))
				if err != nil {
					t.Fatalf("step %d: Recover: %v", step, err)
				}
				if rep.Restored {
					restored++
				}
				got, found, err := s.get(hashOf(k), k, nil)
				if err != nil || !found || (!bytes.Equal(got, old) && !bytes.Equal(got, nv)) {
					t.Fatalf("step %d: after recovery %s = %q, found %v, %v; want its old value or its new one (recovery: %+v)", step, k, got, found, err, rep)
				}
				// A rewrite in place keeps its run, and so does its repair
				// (not the rebuild after it, which frees what no entry
				// covers).
				if loc, _, _ := s.find(hashOf(k), k); !c.moves && !c.grows && (loc.chunk != before.chunk || loc.nch != before.nch) {
					t.Fatalf("step %d: after recovery the entry is at chunk %d with %d chunks, was at %d with %d", step, loc.chunk, loc.nch, before.chunk, before.nch)
				}
				model[string(k)] = got
				checkTable(t, tb, model)
				checkClean(t, tb)
			}
		})
	}
}

// TestPutOfAnotherSegmentsHash: Segment.Put given a hash of another
// segment looks in its own segment only, on the fast path as on the
// general one, and never writes over an entry of its own found by the
// other segment's probe.
func TestPutOfAnotherSegmentsHash(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 256, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 1, Segments: 2})
	var k0, k1 []byte
	for i := 0; k0 == nil || k1 == nil; i++ {
		k := []byte(fmt.Sprintf("key%05d", i))
		switch {
		case hashOf(k)&1 == 0 && k0 == nil:
			k0 = k
		case hashOf(k)&1 == 1 && k1 == nil:
			k1 = k
		}
	}
	for _, p := range []struct {
		seg int
		k   []byte
		v   string
	}{{0, k0, "value in segment 0"}, {1, k1, "value in segment 1"}, {1, k0, "XXXXXXXXXXXXXXXXXX"}} {
		if _, err := tb.Segment(p.seg).put(hashOf(p.k), p.k, []byte(p.v), Replace); err != nil {
			t.Fatal(err)
		}
	}
	for seg, want := range map[int]struct {
		k []byte
		v string
	}{0: {k0, "value in segment 0"}, 1: {k1, "value in segment 1"}} {
		if v, found, err := tb.Segment(seg).get(hashOf(want.k), want.k, nil); err != nil || !found || string(v) != want.v {
			t.Errorf("%s in segment %d = %q, %v, %v; want %q", want.k, seg, v, found, err, want.v)
		}
	}
}
