//go:build linux

package hashmap

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/internal/testutil"
)

// withoutStamps makes the maps the test creates files without tier stamps,
// as older builds made them, whose Repair follows a link only to a tier
// whose owner and position words say it is that link's.
func withoutStamps(t *testing.T) {
	t.Helper()
	testCreateWithoutStamps = true
	t.Cleanup(func() { testCreateWithoutStamps = false })
}

// zeroBytes writes n zero bytes at off of the file at path.
func zeroBytes(t *testing.T, path string, off, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, n), off); err != nil {
		t.Fatal(err)
	}
}

// TestZeroedSegmentIsReported zeroes a segment of a filled map, and one of
// an empty map, plain and cache, in the file: its header, its first tier, its first tier's
// header, or header and first tier together. Check names the segment
// every time, Repair reports what it rebuilt there (the first tier's loss
// as Zeroed), and Check finds nothing after. A segment zeroed whole does
// not read as an empty one: every first tier carries a stamp from the
// file's creation, which zeros lack.
func TestZeroedSegmentIsReported(t *testing.T) {
	for _, c := range []struct{ cache, filled bool }{{false, true}, {false, false}, {true, true}, {true, false}} {
		cache, filled := c.cache, c.filled
		for _, what := range []string{"header", "first tier", "first tier header", "header and first tier"} {
			t.Run(fmt.Sprintf("cache=%v/filled=%v/%s", cache, filled, what), func(t *testing.T) {
				m, path := openTemp(t, &Options{Entries: 64, Segments: 2, MaxBloatFactor: 3, Cache: cache})
				keys := 0
				if filled {
					for ; tiersInUse(m) < 4; keys++ {
						if err := m.Put([]byte(fmt.Sprintf("key-%d", keys)), bytes.Repeat([]byte("v"), 24)); err != nil {
							t.Fatal(err)
						}
					}
				}
				l := *m.layout
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
				const seg = 1
				if what == "header" && !filled {
					t.Skip("an empty segment's header zeroed reads as it was: nothing is lost, nothing to report")
				}
				if strings.Contains(what, "header") && what != "first tier header" {
					zeroBytes(t, path, l.SegmentsOff+seg*64, 64)
				}
				switch what {
				case "first tier", "header and first tier":
					zeroBytes(t, path, l.TiersOff+seg*l.TierSize, l.TierSize)
				case "first tier header":
					zeroBytes(t, path, l.TiersOff+seg*l.TierSize, 64)
				}
				m = openOrFail(t, path)
				defer m.Close()
				problems, err := m.Check()
				if err != nil {
					t.Fatal(err)
				}
				if !slices.ContainsFunc(problems, func(p Problem) bool { return p.Segment == seg }) {
					t.Fatalf("Check = %v: segment %d not named", problems, seg)
				}
				rep, err := m.Repair()
				if err != nil {
					t.Fatal(err)
				}
				i := slices.IndexFunc(rep.Rebuilt, func(r SegmentRepair) bool { return r.Segment == seg })
				if i < 0 {
					t.Fatalf("Repair = %+v: segment %d not reported", rep, seg)
				}
				if r := rep.Rebuilt[i]; strings.Contains(what, "first tier") != r.Zeroed {
					t.Errorf("Repair of segment %d: %+v; Zeroed should say whether the first tier was zeroed", seg, r)
				}
				if problems, err := m.Check(); err != nil || len(problems) != 0 {
					t.Errorf("Check after Repair: %v %v", problems, err)
				}
				// Keys of the other segment, and those of the zeroed one
				// outside its first tier, are all still there.
				for i := range keys {
					k := fmt.Sprintf("key-%d", i)
					if xxhash.Sum64String(k)&m.segMask == seg {
						continue
					}
					if _, err := m.Get([]byte(k)); err != nil {
						t.Errorf("%s: %v", k, err)
					}
				}
			})
		}
	}
}

// TestFileWithoutStampsKeepsWorking: a map created without tier stamps,
// as older builds made it, fills past its first tiers, checks clean,
// reopens without the flag, and Repair cuts a damaged link, reporting the
// entries it drops (keptAndClean).
func TestFileWithoutStampsKeepsWorking(t *testing.T) {
	withoutStamps(t)
	m, path, keys := fillTwoOverflowTiers(t)
	if m.layout.Stamps {
		t.Fatal("created with stamps")
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Fatalf("Check: %v %v", problems, err)
	}
	l := *m.layout
	if w := readWordOf(t, m, l.TiersOff+tierOwnerOff); w != 0 {
		t.Errorf("first tier's owner word %#x in a file without stamps, want 0", w)
	}
	seg := int64(0)
	if readWordOf(t, m, l.TiersOff) == 0 {
		seg = 1
	}
	damageWord(t, m, path, l.TiersOff+seg*l.TierSize, 0) // a segment's first link
	m = openOrFail(t, path)
	defer m.Close()
	if m.layout.Stamps {
		t.Fatal("reopened with stamps")
	}
	if problems, err := m.Check(); err != nil || len(problems) == 0 {
		t.Fatalf("Check of a cut link: %v %v", problems, err)
	}
	repairKeepsAll(t, m, numberedKeys(keys))
}

// readWordOf is the word at off of m's mapping.
func readWordOf(t *testing.T, m *Map, off int64) uint64 {
	t.Helper()
	return m.file.Region.Uint64s(off, 1)[0]
}

// TestChainRepairWithoutStamps runs the tests of damaged tier headers,
// links and pool counts again on files without stamps, whose Repair and
// Recover infer nothing: they cut a chain at the first link to a tier
// whose owner and position words do not say it is that link's, and give
// up the tiers no chain then reaches. Where those tests want every key
// kept (keptAndClean, lossReported), a file without stamps must instead
// report each key lost as dropped in its segment.
func TestChainRepairWithoutStamps(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"RecoverKeepsATierWithADamagedOwner", TestRecoverKeepsATierWithADamagedOwner},
		{"RecoverLeavesAnotherChainsTier", TestRecoverLeavesAnotherChainsTier},
		{"RepairPrefersTheTierThatSaysItBelongs", TestRepairPrefersTheTierThatSaysItBelongs},
		{"RepairLeavesAnotherChainsTierWithNoOwner", TestRepairLeavesAnotherChainsTierWithNoOwner},
		{"RepairRelinksATierAnotherChainsLinkHeld", TestRepairRelinksATierAnotherChainsLinkHeld},
		{"RepairMendsThePoolCount", TestRepairMendsThePoolCount},
		{"CheckSeesAnOwnedTierBeyondTheCount", TestCheckSeesAnOwnedTierBeyondTheCount},
		{"RepairKeepsATierWhoseOwnerNamesAnother", TestRepairKeepsATierWhoseOwnerNamesAnother},
		{"RepairKeepsALinkedTierWithoutItsOwner", TestRepairKeepsALinkedTierWithoutItsOwner},
		{"RepairRelinksTiersCutLoose", TestRepairRelinksTiersCutLoose},
		{"RepairFollowsTheTiersOwnWords", TestRepairFollowsTheTiersOwnWords},
		{"RecoverRelinksATierCutLoose", TestRecoverRelinksATierCutLoose},
		{"RepairAndRecoverLeaveNoStaleTier", TestRepairAndRecoverLeaveNoStaleTier},
		{"RepairDisownsATierItCannotPlace", TestRepairDisownsATierItCannotPlace},
		{"APoolTierNotZeroIsRefused", TestAPoolTierNotZeroIsRefused},
		{"RangeGoesPastABrokenChain", TestRangeGoesPastABrokenChain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withoutStamps(t)
			tc.test(t)
		})
	}
}

func init() { opsRoles["attach-die"] = attachDie }

// attachDie (args: step) puts keys until it kills itself at the step-th
// step of attaching an overflow tier, counted over every attach, saying
// first how many of its Puts had returned.
func attachDie(m *Map, args []string) error {
	at, stored, steps := argInt(args, 0), 0, 0
	testhook.OnStep = func() {
		pc, _, _, _ := runtime.Caller(3) // OnStep, Step, testStep, then the step's function
		if !strings.HasSuffix(runtime.FuncForPC(pc).Name(), "(*Segment).attachTier") {
			return
		}
		if steps++; steps == at {
			testutil.Report("stored %d", stored)
			_ = os.Stdout.Sync()
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	for ; ; stored++ {
		k := growthKey(8, stored)
		if err := m.Put(k, growthValue(k)); err != nil {
			return err
		}
	}
}

// TestUnstampedAttachDiesAtEveryStep: in a file without stamps, a writer
// SIGKILLed at each step of attaching its first and its second overflow
// tier (taken from the pool; owner word written; position word written;
// linked) leaves a file whose recovery at the next Open drops nothing,
// holds every key whose Put had returned, checks clean, and takes more
// keys. The attach protocol is what makes that so without inference: the
// words come before the link and entries only after it, so a tier no
// chain reaches is empty, and recovery gives it up.
func TestUnstampedAttachDiesAtEveryStep(t *testing.T) {
	withoutStamps(t)
	for at := 1; at <= 8; at++ {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m")
			m := mustOpen(t, path, &Options{Entries: 64, AverageKeySize: 12, AverageValueSize: 40, Segments: 2, MaxBloatFactor: 4, LockTimeout: killLockTimeout})
			if m.layout.Stamps {
				t.Fatal("created with stamps")
			}
			m.Close()
			stored := -1
			for _, r := range runKilled(t, helperCmd("attach-die", path, fmt.Sprint(at))) {
				if r[0] == "stored" {
					stored, _ = strconv.Atoi(r[1])
				}
			}
			if stored < 0 {
				t.Fatalf("the writer did not reach attach step %d", at)
			}
			m = mustOpen(t, path, &Options{LockTimeout: killLockTimeout})
			defer m.Close()
			rec := m.RecoveredAtOpen()
			if len(rec.DeadProcesses) != 1 {
				t.Fatalf("recovery at open: %+v, want the dead writer", rec)
			}
			for _, s := range rec.Segments {
				if s.Dropped+s.Doubled != 0 {
					t.Errorf("recovery at open dropped entries: %+v", s)
				}
			}
			for i := range stored {
				k := growthKey(8, i)
				if v, err := m.Get(k); err != nil || !bytes.Equal(v, growthValue(k)) {
					t.Fatalf("key %d of %d stored before the death: %q, %v", i, stored, v, err)
				}
			}
			if problems, err := m.Check(); err != nil || len(problems) > 0 {
				t.Fatalf("Check: %v, %v", problems, err)
			}
			for i := stored; i < stored+20; i++ {
				k := growthKey(8, i)
				if err := m.Put(k, growthValue(k)); err != nil {
					t.Fatalf("Put %d after the death: %v", i, err)
				}
			}
			if problems, err := m.Check(); err != nil || len(problems) > 0 {
				t.Fatalf("Check after more Puts: %v, %v", problems, err)
			}
		})
	}
}
