//go:build linux

package hashmap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/internal/testutil"
)

// Repair may run while other goroutines write: it finds nothing to rebuild
// in a sound map, and when it does rebuild (forced here on every segment)
// the writers wait for it and nothing they stored is lost.
func TestRepairWhileBusy(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 4000, AverageKeySize: 8, AverageValueSize: 40, Segments: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const writers, keys = 3, 400
	stop := make(chan struct{})
	var wg sync.WaitGroup
	final := make([]map[string][]byte, writers)
	for w := range writers {
		final[w] = map[string][]byte{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; ; round++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Appendf(nil, "w%d-%d", w, round%keys)
				if round%7 == 3 {
					if _, err := m.Delete(k); err != nil {
						t.Error(err)
						return
					}
					delete(final[w], string(k))
					continue
				}
				v := bytes.Repeat([]byte{byte(round)}, round%90) // sizes that relocate
				if err := m.Put(k, v); err != nil {
					t.Error(err)
					return
				}
				final[w][string(k)] = v
			}
		}()
	}
	deadline := time.Now().Add(time.Second)
	repairs, rebuilt := 0, 0
	for time.Now().Before(deadline) {
		rep, err := m.Repair()
		if err != nil || len(rep.Failed) > 0 {
			t.Fatalf("Repair: %v, failed %v", err, rep.Failed)
		}
		repairs++
		if len(rep.Rebuilt) > 0 {
			problems, _ := m.Check()
			t.Errorf("Repair rebuilt %d segments of a sound map: %+v; Check now %v", len(rep.Rebuilt), rep.Rebuilt, problems)
		}
		for i := range 8 {
			r, err := m.table.Segment(i).Rebuild()
			if err != nil || r.Dropped+r.Doubled > 0 {
				t.Fatalf("Rebuild of sound segment %d: %v, %+v", i, err, r)
			}
			rebuilt++
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d repairs and %d forced rebuilds among the writers", repairs, rebuilt)
	n := 0
	for _, want := range final {
		for k, v := range want {
			got, err := m.Get([]byte(k))
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("Get(%q) = %q, %v; want %q", k, got, err, v)
			}
			n++
		}
	}
	if m.Len() != n {
		t.Fatalf("Len %d, want %d", m.Len(), n)
	}
	if problems, err := m.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("Check: %v %v", problems, err)
	}
}

// Sync writes the map to disk; on a closed map it says so.
func TestSync(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if err := m.Sync(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after Close: %v, want ErrClosed", err)
	}
	if _, err := m.Repair(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Repair after Close: %v, want ErrClosed", err)
	}
}

// Check of a map that writers are changing reports nothing: a pass that
// overlapped a change is done again. Inserts change no sequence, so
// before the pass also compared the count of entries, this reported chunks
// and counts of half-done inserts every few passes.
func TestCheckWhileBusy(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 4000, AverageKeySize: 8, AverageValueSize: 40, Segments: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for round := 0; ; round++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Appendf(nil, "k%d", round%500)
			var err error
			if round%3 == 0 {
				_, err = m.Delete(k)
			} else {
				err = m.Put(k, bytes.Repeat([]byte{1}, round%90))
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	passes := 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); passes++ {
		problems, err := m.Check()
		if err != nil || len(problems) > 0 {
			t.Errorf("pass %d: Check of a sound map: %v %v", passes, problems, err)
			break
		}
	}
	close(stop)
	<-done
	t.Logf("%d passes", passes)
}

// TestCheckNamesALiveHolder: a lock a live process keeps past the lock
// timeout (busy, or stopped) is reported with that process named, so that
// it is not taken for a dead one's, which recover would release.
func TestCheckNamesALiveHolder(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000, Segments: 2, LockTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- m.Compute([]byte("k"), func([]byte, bool) ([]byte, bool) {
			close(holding)
			<-release
			return []byte("v"), true
		})
	}()
	<-holding
	problems, err := m.Check()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("held by a live process (pid %d, slot ", os.Getpid())
	var named bool
	for _, p := range problems {
		named = named || strings.Contains(p.Err.Error(), want)
	}
	if !named {
		t.Fatalf("Check while a Compute holds its segment: %v; want one naming %q", problems, want)
	}
	if problems, err := m.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("Check after the Compute: %v %v", problems, err)
	}
}

// TestCheckSaysAHolderPassedItsDescriptorOn: a process that handed the
// map's descriptor to a child and died holding a segment lock keeps its
// registry slot alive through the child (liveness follows the open file
// description), so recovery leaves its lock alone. Check says so, naming
// the gone pid, instead of calling it a live process to wait for; and the
// lock is recovered once the child is gone. (Check said "a live
// process" for a pid that no longer existed.)
func TestCheckSaysAHolderPassedItsDescriptorOn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	opts := *helperOpts
	opts.LockTimeout = 100 * time.Millisecond
	m, err := Open(path, &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cmd := helperCmd("pass-on-and-hold", path)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var child int
	held := testutil.WaitFor(20*time.Second, func() bool {
		v, err := m.Get([]byte("child"))
		if err != nil {
			return false
		}
		child, _ = strconv.Atoi(string(v))
		return !m.table.For(xxhash.Sum64([]byte("k"))).Lock().State().Free()
	})
	if !held {
		t.Fatalf("the helper never held the lock; its output: %s", out.String())
	}
	defer func() { _ = syscall.Kill(child, syscall.SIGKILL) }()
	holder := cmd.Process.Pid
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	problems, err := m.Check()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("no longer running (pid %d, slot ", holder)
	var named bool
	for _, p := range problems {
		named = named || strings.Contains(p.Err.Error(), want)
		if strings.Contains(p.Err.Error(), fmt.Sprintf("live process (pid %d,", holder)) {
			t.Errorf("Check calls the dead holder live: %v", p.Err)
		}
	}
	if !named {
		t.Errorf("Check with the holder dead and its child holding its descriptor: %v; want one containing %q", problems, want)
	}
	// The child gone, the slot dies with it, and the next writer recovers
	// the lock.
	_ = syscall.Kill(child, syscall.SIGKILL)
	ok := testutil.WaitFor(20*time.Second, func() bool { return m.Put([]byte("k"), []byte("v")) == nil })
	if !ok {
		t.Error("Put of k still failing after the child was killed")
	}
}

// TestRepairSaysWithoutRegistry: in a file without a process registry
// (made before it; here the map's handle on it is taken away) Repair
// cannot run Recover, and says so instead of reporting nothing held by
// the dead; the segments are still checked.
func TestRepairSaysWithoutRegistry(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 1000})
	if err := m.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if rep, err := m.Repair(); err != nil || rep.NoRegistry {
		t.Fatalf("Repair with a registry: %+v, %v", rep, err)
	}
	reg := m.reg
	m.reg = nil
	defer func() { m.reg = reg }()
	rep, err := m.Repair()
	if err != nil || !rep.NoRegistry || len(rep.Failed) != 0 {
		t.Fatalf("Repair without a registry: %+v, %v; want NoRegistry", rep, err)
	}
	if _, err := m.Recover(); !errors.Is(err, ErrNoRegistry) {
		t.Fatalf("Recover without a registry: %v", err)
	}
}

// TestRepairMendsThePoolCount: damage to the count of overflow tiers
// handed out (the global state's first word). Raised beyond the pool,
// every Put that needs a tier fails with ErrFull; lowered, the next link
// hands out a tier a segment already uses, and Check had found nothing
// wrong. Check now reports both, Repair sets the count back to the tiers
// in use, and the map takes as many keys as an undamaged copy. (Repair
// left the count as it was.)
func TestRepairMendsThePoolCount(t *testing.T) {
	for _, damaged := range []uint64{48, 0} {
		m, path, keys := fillTwoOverflowTiers(t)
		l := *m.layout
		m.Close()
		undamaged := filepath.Join(t.TempDir(), "copy")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(undamaged, b, 0o644); err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint64(b[l.GlobalOff:], damaged)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err = Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if problems, err := m.Check(); err != nil || len(problems) != 1 || !strings.Contains(problems[0].Err.Error(), "overflow tiers handed out") {
			t.Errorf("count %d: Check = %v, %v; want the count named", damaged, problems, err)
		}
		rep, err := m.Repair()
		if err != nil || !strings.Contains(strings.Join(rep.Recovery.Mended, "; "), fmt.Sprintf("overflow tiers handed out: %d, now 2", damaged)) {
			t.Errorf("count %d: Repair = %+v, %v; want the count mended to 2", damaged, rep, err)
		}
		if problems, err := m.Check(); err != nil || len(problems) != 0 {
			t.Errorf("count %d: Check after Repair = %v, %v", damaged, problems, err)
		}
		// As many more keys as the undamaged copy takes.
		if got, want := fillUntilFull(t, m, keys), fillUntilFull(t, openOrFail(t, undamaged), keys); got != want {
			t.Errorf("count %d: after Repair the map took %d more keys, the undamaged copy %d", damaged, got, want)
		}
		m.Close()
	}
}

// fillUntilFull puts keys from "key-<from>" on (24-byte values) into m
// until the map is full (ErrFull; any other error fails the test), and
// returns how many it took.
func fillUntilFull(t *testing.T, m *Map, from int) int {
	t.Helper()
	for i := from; ; i++ {
		err := m.Put([]byte(fmt.Sprintf("key-%d", i)), bytes.Repeat([]byte("v"), 24))
		if errors.Is(err, ErrFull) {
			return i - from
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// openOrFail opens path with default options, closed when the test ends.
func openOrFail(t *testing.T, path string) *Map {
	t.Helper()
	m, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// copyOf copies the file at path into the test's temporary directory and
// returns the copy's path.
func copyOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dup := filepath.Join(t.TempDir(), "copy")
	if err := os.WriteFile(dup, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dup
}

// fillTwoOverflowTiers fills a new small map (2 segments, 5 overflow
// tiers) until two overflow tiers are linked, and returns it, its path and
// how many keys ("key-0" on, 24-byte values) it holds.
func fillTwoOverflowTiers(t *testing.T) (*Map, string, int) {
	m, path := openTemp(t, &Options{Entries: 64, Segments: 2, MaxBloatFactor: 3, MaxSize: NoGrowth})
	var keys int
	for ; tiersInUse(m) < 4; keys++ {
		if err := m.Put([]byte(fmt.Sprintf("key-%d", keys)), bytes.Repeat([]byte("v"), 24)); err != nil {
			t.Fatal(err)
		}
	}
	return m, path, keys
}

// damageWord closes m and sets the little-endian word at off of its file.
func damageWord(t *testing.T, m *Map, path string, off int64, v uint64) {
	t.Helper()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	writeWord(t, path, off, v)
}

// tierOwnerOff is the offset in the file of tier idx's owner word.
const tierOwnerOff = 32

// TestCheckSeesAnOwnedTierBeyondTheCount: an owner word set by damage in a
// tier the pool has not handed out makes the link that takes it fail with
// ErrCorrupt; Check reports the count as short of it, as Repair judges it
// (before, Check found nothing).
func TestCheckSeesAnOwnedTierBeyondTheCount(t *testing.T) {
	m, path, _ := fillTwoOverflowTiers(t)
	l := *m.layout
	damageWord(t, m, path, l.TiersOff+(l.Segments+2)*l.TierSize+tierOwnerOff, 1) // the next tier the pool hands out
	m, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if problems, err := m.Check(); err != nil || len(problems) != 1 || !strings.Contains(problems[0].Err.Error(), "overflow tier 4 is not zero, but the pool has not handed it out") {
		t.Errorf("Check = %v, %v; want the stray owner named", problems, err)
	}
}

// Damage that names a tier the pool has not handed out, as a chain's next
// link or as an owner word, must cost Repair nothing but that name: the
// count must not be raised over the tiers between, which no chain would
// ever get again. Before, Repair raised it to the whole pool, and the map
// took 124 more keys before ErrFull against an undamaged copy's 267,
// while Check after Repair found nothing.
func TestRepairSpendsNoTierOnAStrayName(t *testing.T) {
	withoutStamps(t) // the owner and position words of a file without stamps
	for _, damage := range []string{"a link to the pool's last tier", "an owner on the pool's last tier"} {
		m, path, keys := fillTwoOverflowTiers(t)
		l := *m.layout
		undamaged := copyOf(t, path)
		if damage == "a link to the pool's last tier" {
			damageWord(t, m, path, l.TiersOff+(l.Segments+1)*l.TierSize, uint64(l.Tiers)) // the second overflow tier's next link
		} else {
			damageWord(t, m, path, l.TiersOff+(l.Tiers-1)*l.TierSize+tierOwnerOff, 1)
		}
		m = openOrFail(t, path)
		rep, err := m.Repair()
		if err != nil {
			t.Fatal(err)
		}
		if problems, err := m.Check(); err != nil || len(problems) != 0 {
			t.Errorf("%s: Check after Repair = %v, %v", damage, problems, err)
		}
		for i := range keys {
			if _, err := m.Get([]byte(fmt.Sprintf("key-%d", i))); err != nil {
				t.Fatalf("%s: key-%d after Repair: %v", damage, i, err)
			}
		}
		if got, want := fillUntilFull(t, m, keys), fillUntilFull(t, openOrFail(t, undamaged), keys); got != want {
			t.Errorf("%s: after Repair (mended %q) the map took %d more keys before ErrFull, an undamaged copy %d", damage, rep.Recovery.Mended, got, want)
		}
	}
}

// TestRepairKeepsATierWhoseOwnerNamesAnother: a linked overflow tier whose
// owner word names the other segment, while only this segment's chain
// links it, its position word agrees and every key in it hashes here.
// Repair takes the owner word for the damaged one and keeps the tier
// (before, it cut the chain there: 5 of 138 keys lost, reported as none
// dropped).
func TestRepairKeepsATierWhoseOwnerNamesAnother(t *testing.T) {
	m, path, keys := fillTwoOverflowTiers(t)
	l := *m.layout
	off := l.TiersOff + l.Segments*l.TierSize + tierOwnerOff
	m.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	writeWord(t, path, off, uint64(3-b[off])) // segment 0's (owner 1) <-> segment 1's (owner 2)
	m = openOrFail(t, path)
	repairKeepsAll(t, m, numberedKeys(keys))
}

// TestRepairKeepsALinkedTierWithoutItsOwner: a linked overflow tier whose
// owner word was zeroed, with the pool's count damaged to 0 as well. The
// rebuild keeps an owner-less linked tier only if the count covers it, so
// Repair mends the count first and keeps every key (before, it mended the
// count after the rebuild had cut the chain there: 5 of 138 keys lost,
// reported as none dropped).
func TestRepairKeepsALinkedTierWithoutItsOwner(t *testing.T) {
	m, path, keys := fillTwoOverflowTiers(t)
	l := *m.layout
	damageWord(t, m, path, l.TiersOff+l.Segments*l.TierSize+tierOwnerOff, 0)
	writeWord(t, path, l.GlobalOff, 0) // the pool's count
	repairKeepsAll(t, openOrFail(t, path), numberedKeys(keys))
}

// TestRepairRelinksTiersCutLoose: both first tiers' next links damaged
// (out of the pool). Each overflow tier still says whose it is and where
// in the chain (its stamp), and no link reaches it, so Repair links it
// again and keeps every key, and says so (before, the rebuild cut the
// chain at the bad link: the fuzz target's silent-loss oracle found 41 of
// 201 keys gone, none reported dropped). In a file without stamps the
// chains are cut there and the tiers' entries reported dropped.
func TestRepairRelinksTiersCutLoose(t *testing.T) {
	m, path, keys := fillTwoOverflowTiers(t)
	l := *m.layout
	m.Close()
	for seg := range l.Segments {
		writeWord(t, path, l.TiersOff+seg*l.TierSize, 999) // tier seg's next link
	}
	m = openOrFail(t, path)
	if problems, err := m.Check(); err != nil || len(problems) == 0 {
		t.Fatalf("Check of the damaged map = %v, %v; want the links named", problems, err)
	}
	rep, err := m.Repair()
	if err != nil {
		t.Fatal(err)
	}
	if relinked := relinkedIn(rep); relinked == 0 && m.layout.Stamps {
		t.Errorf("Repair = %+v; want overflow tiers relinked", rep)
	}
	keptAndClean(t, m, numberedKeys(keys), rep)
}

// TestRepairFollowsTheTiersOwnWords: the first tier's link damaged to name the chain's second
// overflow tier, skipping the first, which still links the second; a tier
// cut from its chain (owner word zeroed, position word damaged) with the
// pool's count damaged to 0; and segment 0's link damaged to name segment
// 1's overflow tier, emptied, at the same position. Repair links the
// skipped tier back (before: 66 of 133 keys lost, none reported), zeroes
// the cut tier beyond the mended count rather than let the pool hand it
// out again with its old slots (before: Check of the map filled after
// Repair found a key counted twice), and does not take the other
// segment's empty tier for segment 0's (the check that a tier holds
// entries, and only this segment's, before a damaged owner word is
// overruled; before it: keys lost and the tier in both chains).
func TestRepairFollowsTheTiersOwnWords(t *testing.T) {
	t.Run("link skips a tier", func(t *testing.T) {
		m, path := openTemp(t, &Options{Entries: 64, Segments: 2, MaxBloatFactor: 3, MaxSize: NoGrowth})
		var keys []string
		for i := 0; tiersInUse(m) < 4; i++ { // segment 0's keys only
			k := fmt.Sprintf("key-%d", i)
			if xxhash.Sum64String(k)&m.segMask != 0 {
				continue
			}
			if err := m.Put([]byte(k), bytes.Repeat([]byte("v"), 24)); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		l := *m.layout
		m.Close()
		a := int64(readWord(t, path, l.TiersOff)) - 1
		b := int64(readWord(t, path, l.TiersOff+a*l.TierSize)) - 1
		writeWord(t, path, l.TiersOff, uint64(b)+1)
		m = openOrFail(t, path)
		repairKeepsAll(t, m, keys)
	})
	t.Run("tier cut loose, count 0", func(t *testing.T) {
		m, path, n := fillTwoOverflowTiers(t)
		l := *m.layout
		hi := l.Segments + 1
		damageWord(t, m, path, l.TiersOff+hi*l.TierSize+tierOwnerOff, 0)
		writeWord(t, path, l.TiersOff+hi*l.TierSize+tierOwnerOff+8, 7) // position word
		writeWord(t, path, l.GlobalOff, 0)                             // count
		m = openOrFail(t, path)
		if _, err := m.Repair(); err != nil {
			t.Fatal(err)
		}
		fillUntilFull(t, m, n)
		if problems, err := m.Check(); err != nil || len(problems) > 0 {
			t.Errorf("Check after filling the repaired map: %v %v", problems, err)
		}
	})
	t.Run("link to another segment's empty tier", func(t *testing.T) {
		m, path := openTemp(t, &Options{Entries: 64, Segments: 2, MaxBloatFactor: 3, MaxSize: NoGrowth})
		var zero, one []string
		for i := 0; tiersInUse(m) < 4; i++ {
			k := fmt.Sprintf("key-%d", i)
			if err := m.Put([]byte(k), bytes.Repeat([]byte("v"), 24)); err != nil {
				t.Fatal(err)
			}
			if xxhash.Sum64String(k)&m.segMask == 0 {
				zero = append(zero, k)
			} else {
				one = append(one, k)
			}
		}
		l := *m.layout
		a0 := int64(readWord(t, path, l.TiersOff)) - 1
		a1 := int64(readWord(t, path, l.TiersOff+l.TierSize)) - 1
		if a0 < l.Segments || a1 < l.Segments {
			t.Fatal("the fill gave a segment no overflow tier: the damage below needs both")
		}
		for _, k := range one { // segment 1's tiers emptied
			if _, err := m.Delete([]byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		m.Close()
		writeWord(t, path, l.TiersOff, uint64(a1)+1) // segment 0's first link -> segment 1's tier, position 1
		m = openOrFail(t, path)
		repairKeepsAll(t, m, zero)
	})
}

// repairKeepsAll repairs m and fails the test unless every one of keys
// reads back afterwards and Check then finds nothing.
func repairKeepsAll(t *testing.T, m *Map, keys []string) {
	t.Helper()
	rep, err := m.Repair()
	if err != nil {
		t.Fatal(err)
	}
	keptAndClean(t, m, keys, rep)
}

// keptAndClean fails the test unless every one of keys reads back from m,
// which rep repaired, and Check then finds nothing. In a file without
// stamps, whose Repair infers nothing of a tier its words do not place,
// the keys lost must instead be no more, in each segment, than rep
// reports dropped there.
func keptAndClean(t *testing.T, m *Map, keys []string, rep Repaired) {
	t.Helper()
	if !m.layout.Stamps {
		bySeg := map[int64][]string{}
		for _, k := range keys {
			seg := int64(xxhash.Sum64String(k) & m.segMask)
			bySeg[seg] = append(bySeg[seg], k)
		}
		for seg, ks := range bySeg {
			lossReported(t, m, ks, seg, rep.Recovery.Segments, rep.Rebuilt)
		}
	} else if lost := lostOf(m, keys); lost > 0 {
		t.Errorf("Repair lost %d of %d keys (Rebuilt %+v, Mended %q)", lost, len(keys), rep.Rebuilt, rep.Recovery.Mended)
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Errorf("Check after Repair: %v, %v", problems, err)
	}
}

// numberedKeys is "key-0" to "key-<n-1>", the keys fillTwoOverflowTiers
// and fillUntilFull put.
func numberedKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	return keys
}

// TestRecoverRelinksATierCutLoose: a segment's lock word damaged to read as held for update by a dead
// process, and its first tier's next link out of range. Repair's Recover
// rebuilds that segment first, without salvage; it now links the tier
// back too (before, it cut the chain and rewrote the counts, so the
// segment checked clean and 34 keys were gone with nothing reported).
func TestRecoverRelinksATierCutLoose(t *testing.T) {
	img := getDamageImage(false)
	if img.err != nil {
		t.Fatal(img.err)
	}
	b := bytes.Clone(img.file)
	applyDamage(b, img.layout, []byte("0\x038&A2\x00\x0000"))
	path := filepath.Join(t.TempDir(), "m")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := damagedTrial(path, img); msg != "" {
		t.Error(msg)
	}
}

// putSegment0 is putSeg for segment 0.
func putSegment0(t *testing.T, m *Map, from int, tiers int64, atLast int) map[int64]map[string][]byte {
	t.Helper()
	return putSeg(t, m, 0, from, tiers, atLast)
}

// dieHolding opens path and leaves it as a process that died holding
// segment seg's update lock: the lock taken, the file closed under it.
func dieHolding(t *testing.T, path string, seg int) {
	t.Helper()
	m, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.table.Segment(seg).Lock().UpdateLock(0); err != nil {
		t.Fatal(err)
	}
	m.file.Close()
}

// repairedEmptyFirstTier builds segment 0's chain first -> T1 -> T2, empties
// T1 by deletes, damages T1's owner word to name segment 1, and repairs:
// it returns the path, T2's keys and values, the open map and the report.
func repairedEmptyFirstTier(t *testing.T) (string, map[string][]byte, *Map, Repaired) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, &Options{Entries: 64, Segments: 2, MaxBloatFactor: 3, MaxSize: NoGrowth})
	if err != nil {
		t.Fatal(err)
	}
	byPos := putSegment0(t, m, 0, 3, 8)
	for k := range byPos[1] {
		if _, err := m.Delete([]byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	l := *m.layout
	m.Close()
	t1 := int64(readWord(t, path, l.TiersOff)) - 1
	writeWord(t, path, l.TiersOff+t1*l.TierSize+tierOwnerOff, 2)
	m = openOrFail(t, path)
	rep, err := m.Repair()
	if err != nil {
		t.Fatal(err)
	}
	return path, byPos[2], m, rep
}

// TestRepairAndRecoverLeaveNoStaleTier: an empty overflow tier whose owner word damage made segment
// 1's, linked only from segment 0's chain: Repair keeps it and the tier
// after it (before: it cut the chain there, 8 of 8 keys after it lost,
// none reported). A key of that later tier put again and deleted, then
// processes dying in segments 1 and 0: the deleted key stays deleted
// (before: the two recoveries linked the old tier back, and the key
// came back with its old value). A chain cut by damage and then
// recovered: Recover reports the tier it linked back. And a live tier
// whose position word alone is damaged is kept, not swapped for another
// (before: its 8 keys were lost, none reported). In a file without stamps
// the chains are cut at the damaged word instead, and what the tiers after
// it held is reported dropped.
func TestRepairAndRecoverLeaveNoStaleTier(t *testing.T) {
	t.Run("empty tier, owner names the other segment", func(t *testing.T) {
		_, inT2, m, rep := repairedEmptyFirstTier(t)
		if !m.layout.Stamps {
			lossReported(t, m, mapKeys(inT2), 0, rep.Recovery.Segments, rep.Rebuilt)
			return
		}
		for k := range inT2 {
			if _, err := m.Get([]byte(k)); err != nil {
				t.Fatalf("%s after Repair (%+v): %v", k, rep.Rebuilt, err)
			}
		}
	})
	t.Run("deleted key stays deleted", func(t *testing.T) {
		path, inT2, m, _ := repairedEmptyFirstTier(t)
		var victim string
		for victim = range inT2 {
			break
		}
		if err := m.Put([]byte(victim), []byte("new")); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Delete([]byte(victim)); err != nil {
			t.Fatal(err)
		}
		m.Close()
		dieHolding(t, path, 1)
		m = openOrFail(t, path)
		putSegment0(t, m, 5000, 2, 0) // the chain grown back, if Repair had cut it
		m.Close()
		dieHolding(t, path, 0)
		m = openOrFail(t, path)
		if v, err := m.Get([]byte(victim)); !errors.Is(err, ErrNotFound) {
			t.Errorf("deleted %s after Recover: Get = %q, %v (Recover: %+v)", victim, v, err, m.RecoveredAtOpen().Segments)
		}
	})
	t.Run("Recover reports its relink", func(t *testing.T) {
		m, path, n := fillTwoOverflowTiers(t)
		l := *m.layout
		m.Close()
		writeWord(t, path, l.TiersOff, 999)
		dieHolding(t, path, 0)
		m = openOrFail(t, path)
		if !m.layout.Stamps {
			var keys []string
			for i := range n {
				if k := fmt.Sprintf("key-%d", i); xxhash.Sum64String(k)&m.segMask == 0 {
					keys = append(keys, k)
				}
			}
			lossReported(t, m, keys, 0, m.RecoveredAtOpen().Segments)
			return
		}
		for i := range n {
			if _, err := m.Get([]byte(fmt.Sprintf("key-%d", i))); err != nil {
				t.Fatalf("key-%d: %v", i, err)
			}
		}
		if s := m.RecoveredAtOpen().Segments; len(s) != 1 || s[0].Relinked == 0 {
			t.Errorf("Recover linked the cut tier back (every key reads) but reports %+v", s)
		}
	})
	t.Run("position word damaged in a live tier", func(t *testing.T) {
		path, _, m, _ := repairedEmptyFirstTier(t)
		l := *m.layout
		m.Close()
		dieHolding(t, path, 1)
		m = openOrFail(t, path)
		fresh := putSegment0(t, m, 5000, 3, 8)[2]
		m.Close()
		a := int64(readWord(t, path, l.TiersOff)) - 1
		b := int64(readWord(t, path, l.TiersOff+a*l.TierSize)) - 1
		writeWord(t, path, l.TiersOff+b*l.TierSize+tierOwnerOff+8, 9)
		m = openOrFail(t, path)
		repairKeepsAll(t, m, mapKeys(fresh))
	})
}

// mapKeys returns m's keys.
func mapKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// TestRepairDisownsATierItCannotPlace: the first tier's link damaged out
// of the pool and the overflow tier after it given a wrong position word
// too, so nothing says where it belongs. Repair cuts the chain there,
// counts the tier's sound entries as dropped, and clears its owner word,
// so that no later recovery links it back with values since rewritten or
// keys since deleted (before, the tier kept its words).
func TestRepairDisownsATierItCannotPlace(t *testing.T) {
	m, path, keys := fillTwoOverflowTiers(t)
	l := *m.layout
	m.Close()
	var seg, t1 int64 = -1, -1
	for s := range l.Segments {
		if n := int64(readWord(t, path, l.TiersOff+s*l.TierSize)); n != 0 {
			seg, t1 = s, n-1
			break
		}
	}
	if seg < 0 {
		t.Fatal("no segment links an overflow tier")
	}
	writeWord(t, path, l.TiersOff+seg*l.TierSize, 999)
	writeWord(t, path, l.TiersOff+t1*l.TierSize+tierOwnerOff+8, 7) // its position word
	m = openOrFail(t, path)
	rep, err := m.Repair()
	if err != nil {
		t.Fatal(err)
	}
	var dropped int64
	for _, r := range rep.Rebuilt {
		if r.Segment == seg {
			dropped += r.Dropped
		}
	}
	lost := 0
	for i := range keys {
		if _, err := m.Get([]byte(fmt.Sprintf("key-%d", i))); errors.Is(err, ErrNotFound) {
			lost++
		}
	}
	if lost == 0 || dropped < int64(lost) {
		t.Errorf("Repair lost %d keys and reported %d dropped in segment %d (%+v)", lost, dropped, seg, rep.Rebuilt)
	}
	if owner := readWord(t, path, l.TiersOff+t1*l.TierSize+tierOwnerOff); owner != 0 {
		t.Errorf("the tier cut loose still says it is segment %d's", owner-1)
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Errorf("Check after Repair: %v, %v", problems, err)
	}
}

// TestAPoolTierNotZeroIsRefused: one word other than the owner damaged in
// the tier the pool hands out next (its entry count). Check names it,
// the Put that needs that tier fails with ErrCorrupt rather than link a
// tier that is not blank, and after Repair, which zeroes it, the map
// takes as many keys as an undamaged copy.
func TestAPoolTierNotZeroIsRefused(t *testing.T) {
	m, path, keys := fillTwoOverflowTiers(t)
	l := *m.layout
	undamaged := copyOf(t, path)
	damageWord(t, m, path, l.TiersOff+(l.Segments+2)*l.TierSize+8, 5) // the next tier's entry count
	m = openOrFail(t, path)
	if problems, err := m.Check(); err != nil || len(problems) != 1 || !strings.Contains(problems[0].Err.Error(), "is not zero, but the pool has not handed it out") {
		t.Errorf("Check = %v, %v; want the tier named", problems, err)
	}
	var err error
	for i := keys; err == nil; i++ {
		err = m.Put([]byte(fmt.Sprintf("key-%d", i)), bytes.Repeat([]byte("v"), 24))
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("the Put that needed the damaged tier: %v, want ErrCorrupt", err)
	}
	m.Close()
	writeWord(t, path, l.TiersOff+(l.Segments+2)*l.TierSize+8, 5) // in case a Put took it
	m = openOrFail(t, path)
	if _, err := m.Repair(); err != nil {
		t.Fatal(err)
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Errorf("Check after Repair: %v, %v", problems, err)
	}
	if got, want := fillUntilFull(t, m, keys), fillUntilFull(t, openOrFail(t, undamaged), keys); got < want-20 {
		t.Errorf("after Repair the map took %d more keys, an undamaged copy %d", got, want)
	}
}

// TestCheckNamesAWrongPositionWord: a linked overflow tier's position word
// alone damaged, in a file without stamps. Check names it, says that
// Repair cuts the chain there and how to save what that drops, and names
// the tier no chain then reaches; Repair cuts the chain and reports what
// it drops (keptAndClean).
func TestCheckNamesAWrongPositionWord(t *testing.T) {
	withoutStamps(t) // the owner and position words of a file without stamps
	m, path, keys := fillTwoOverflowTiers(t)
	l := *m.layout
	damageWord(t, m, path, l.TiersOff+l.Segments*l.TierSize+tierOwnerOff+8, 5)
	m = openOrFail(t, path)
	problems, err := m.Check()
	named := func(s string) bool {
		return slices.ContainsFunc(problems, func(p Problem) bool { return strings.Contains(p.Err.Error(), s) })
	}
	if err != nil || !named("says it is at 5") || !named("mapctl dump --salvage") || !named("no chain reaches it") {
		t.Errorf("Check = %v, %v; want the position word named, with the way to save what the cut drops", problems, err)
	}
	if lostOf(m, numberedKeys(keys)) != 0 {
		t.Error("before Repair, a key does not read: the links are sound")
	}
	rep, err := m.Repair()
	if err != nil {
		t.Fatal(err)
	}
	if lostOf(m, numberedKeys(keys)) == 0 {
		t.Error("Repair kept every key: it inferred the tier's position")
	}
	keptAndClean(t, m, numberedKeys(keys), rep)
}

// relinkedIn is how many overflow tiers rep's rebuilds linked again.
func relinkedIn(rep Repaired) int64 {
	var n int64
	for _, r := range rep.Rebuilt {
		n += r.Relinked
	}
	return n
}
