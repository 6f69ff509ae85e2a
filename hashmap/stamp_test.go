//go:build linux

package hashmap

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// withoutStamps makes the maps the test creates files without tier stamps,
// as older builds made them, whose Repair weighs a tier's owner and
// position words, links and keys to tell what it is.
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
// reopens without the flag, and repairs a damaged link by the owner and
// position words it has instead.
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
// Recover weigh owner and position words, links and keys: the maps this
// version creates have stamps, and the inference kept for older files
// must keep doing what those tests hold it to.
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
