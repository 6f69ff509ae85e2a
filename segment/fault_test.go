//go:build linux

package segment

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testhook"
)

// errFault stands for the runtime error a fault on the file's pages
// becomes under debug.SetPanicOnFault: the goroutine unwinds, running its
// deferred calls, and the process lives on (mapctl, a server that
// recovers).
var errFault = errors.New("simulated fault on the file's pages (debug.SetPanicOnFault)")

// faultAt runs f and panics with errFault at its step-th testStep, then
// recovers, as a caller under SetPanicOnFault would. It reports whether
// the fault happened.
func faultAt(step int, f func()) (faulted bool) {
	n := 0
	testhook.OnStep = func() {
		if n++; n == step {
			panic(errFault)
		}
	}
	defer func() {
		testhook.OnStep = nil
		if r := recover(); r != nil {
			if r != errFault {
				panic(r)
			}
			faulted = true
		}
	}()
	f()
	return false
}

func smallTable(t *testing.T) (*Table, *Segment, map[string][]byte, *uint64) {
	t.Helper()
	tb, _ := newTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 40, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	ledger := new(uint64) // this process's, which lives on after the fault
	s.lock.SetLedger(ledger)
	model := map[string][]byte{}
	for i := range 20 {
		k, v := fmt.Appendf(nil, "key%04d", i), bytes.Repeat([]byte{'o'}, 30+i)
		if _, err := s.put(hashOf(k), k, v, Replace); err != nil {
			t.Fatal(err)
		}
		model[string(k)] = v
	}
	return tb, s, model, ledger
}

// TestAFaultInARewriteIsRecovered: a Compute (Put's general path, which
// rewrites in place through the undo record) faults at each of its steps
// in turn. The lock is left to recovery, which puts the entry right from
// the undo record. Before, the deferred end made the sequence even and
// released the write lock over the torn entry: readers got a value nobody
// wrote, no recovery ran, and Repair dropped the key.
func TestAFaultInARewriteIsRecovered(t *testing.T) {
	for step := 1; ; step++ {
		tb, s, model, ledger := smallTable(t)
		k := []byte("key0007")
		old := model[string(k)]
		nv := bytes.Repeat([]byte{'n'}, len(old))
		if !faultAt(step, func() {
			_ = s.compute(hashOf(k), k, func([]byte, bool) ([]byte, bool) { return nv, true })
		}) {
			if step == 1 {
				t.Fatal("the Compute passed no step: the test lost its point")
			}
			t.Logf("%d steps", step-1)
			return
		}
		// Whatever recovery the process or another one may run now.
		_, _ = s.Recover(func(dst []uint64) []uint64 { return append(dst, *ledger) }, time.Now().Add(100*time.Millisecond))
		got, found, err := s.get(hashOf(k), k, nil)
		if err != nil || !found || (!bytes.Equal(got, old) && !bytes.Equal(got, nv)) {
			t.Errorf("fault at step %d: lock %v, seq %d, undo record active %v; Get = %q, found %v, %v; want %q or %q",
				step, s.lock.State(), s.Seq(), s.undoActive(), got, found, err, old, nv)
		}
		var problems []string
		s.Check(func(err error) { problems = append(problems, err.Error()) })
		if len(problems) != 0 {
			rep, _, _ := s.Repair()
			got, found, _ = s.get(hashOf(k), k, nil)
			t.Errorf("fault at step %d: Check: %q; after Repair (%+v): found %v, %q", step, problems, rep, found, got)
		}
		_ = tb
	}
}

// TestAFaultInTryOverwriteLeavesTheLockToRecovery: Put's own fast path
// (tryOverwriteOptimistic, which PutMany, and Put on files without fast ledgers,
// take) faults in its rewrite; recovery then finds the write lock as a
// dead holder's, and another key's Put goes through. Before, this
// process's ledger, which lives on, kept accounting for the lock: every
// other writer of the segment timed out for as long as the process lived.
func TestAFaultInTryOverwriteLeavesTheLockToRecovery(t *testing.T) {
	tb, s, model, ledger := smallTable(t)
	tb.timeout = 100 * time.Millisecond
	k := []byte("key0007")
	nv := bytes.Repeat([]byte{'n'}, len(model[string(k)]))
	if !faultAt(3, func() { _, _ = s.put(hashOf(k), k, nv, Replace) }) {
		t.Fatal("no fault")
	}
	rep, err := s.Recover(func(dst []uint64) []uint64 { return append(dst, *ledger) }, time.Now().Add(100*time.Millisecond))
	t.Logf("after the fault: lock %v, seq %d; Recover: %+v, %v", s.lock.State(), s.Seq(), rep, err)
	other := []byte("key0003")
	if _, err := s.put(hashOf(other), other, []byte("x"), Replace); err != nil {
		t.Errorf("a Put of another key after the fault: %v", err)
	}
}

// TestAFaultInCompactionIsRecovered: an insert that compacts a fragmented
// tier faults at each step of the compaction in turn, recovery runs, and
// the process goes on writing: no key is lost or changed and Check finds
// nothing. Before, the deferred end released the lock with the tier half
// compacted and its bitmap not yet rewritten: the entries already slid
// down lay on chunks the bitmap called free, and the next inserts were
// written over them (174 of 232 steps lost keys).
func TestAFaultInCompactionIsRecovered(t *testing.T) {
	bad, lostSteps := 0, 0
	for step := 1; ; step++ {
		tb, s, model := fragmentedTier(t)
		ledger := new(uint64)
		s.lock.SetLedger(ledger)
		compactions := tb.Compactions.Load()
		big := bytes.Repeat([]byte{'B'}, 1500)
		faulted := faultAt(step, func() { _, _ = s.put(hashOf([]byte("big")), []byte("big"), big, Replace) })
		if tb.Compactions.Load() == compactions {
			t.Fatal("the insert did not compact: the test lost its point")
		}
		if !faulted {
			t.Logf("%d steps, %d of them leave damage, %d lose or change keys", step-1, bad, lostSteps)
			if bad == 0 {
				t.Log("no step left damage")
			}
			return
		}
		_, _ = s.Recover(func(dst []uint64) []uint64 { return append(dst, *ledger) }, time.Now().Add(100*time.Millisecond))
		// The process goes on writing.
		for i := range 40 {
			k := fmt.Appendf(nil, "new-%03d", i)
			v := bytes.Repeat([]byte{'N'}, 20)
			if _, err := s.put(hashOf(k), k, v, Replace); err != nil {
				break
			}
			model[string(k)] = v
		}
		var lost []string
		for k, want := range model {
			got, found, err := s.get(hashOf([]byte(k)), []byte(k), nil)
			if err != nil || !found || !bytes.Equal(got, want) {
				lost = append(lost, fmt.Sprintf("%s=%q(found %v, %v)", k, got, found, err))
			}
		}
		var problems []string
		s.Check(func(err error) { problems = append(problems, err.Error()) })
		if len(lost) != 0 || len(problems) != 0 {
			bad++
			if len(lost) != 0 {
				lostSteps++
			}
			if bad <= 2 || (len(lost) != 0 && lostSteps <= 2) {
				t.Errorf("fault at compaction step %d: lock %v, seq %d; %d keys lost or changed, e.g. %q; Check: %d problems, e.g. %q",
					step, s.lock.State(), s.Seq(), len(lost), lost[:min(2, len(lost))], len(problems), problems[:min(2, len(problems))])
			}
		}
	}
}
