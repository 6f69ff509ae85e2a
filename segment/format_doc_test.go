package segment

import (
	"fmt"
	"math/bits"
	"strconv"
	"testing"

	"github.com/sharedmap/sharedmap/internal/formatdoc"
)

// TestFormatDocMatchesLayout holds docs/FORMAT.md to this package's
// constants: every field of the segment header, the counters, the undo
// record, the tier header and the entry header must appear in its section
// at the offset the code uses, and the figures the text quotes (the slot
// load limit, the second home's multiplier, the slot's reference bit) must
// be the code's.
func TestFormatDocMatchesLayout(t *testing.T) {
	d, f := formatdoc.Load(t, ".."), formatdoc.F
	d.Expect(t, "3.5 Global state", "", []formatdoc.Row{
		f(gExtraTiersUsed, "8", "extraTiersUsed"), f(gGrowthSteps, "8", "growth steps logged"),
		f(gGrowthLog, fmt.Sprintf("%d x %d", growthStepBytes, maxGrowthSteps), "growth log"),
	})
	d.Says(t, fmt.Sprintf("| %d | grows |", flagGrows), fmt.Sprintf("at most %d (flag `grows`", maxGrowthSteps))
	splitting := Layout{Splits: true}
	d.Says(t, fmt.Sprintf("| %d | splits |", flagSplits), fmt.Sprintf("| %d | 8 | flag `splits`: segments in use", gSegments), fmt.Sprintf("| %d | 8 | flag `splits`: the same word again", gSegmentsCopy),
		fmt.Sprintf("| %d | 8 | flag `splits`: split claim", gSplitClaim), fmt.Sprintf("holds at most %d steps", maxGrowthStepsOf(&splitting)),
		fmt.Sprintf("max(%d x Segments, 1024)", splitFactor))
	d.Says(t, fmt.Sprintf("| %d | large values |", flagLargeValues), fmt.Sprintf("| 0 | 4 | magic %#x", descriptorMagic),
		fmt.Sprintf("| %d | 8 | XXH64 (seed 0) of the whole value |", DescriptorSize-8), fmt.Sprintf("under a %d-byte part key", PartKeySize),
		"bit 31 marks a descriptor, bit 30 a part", fmt.Sprintf("none under %d", minPartSize))
	d.Expect(t, "3.6 Segment header", "", []formatdoc.Row{
		f(shLock, "8", "lock word"), f(shSleepers, "4", "sleepers"), f(shClearing, "4", "clearing"), f(shSeq, "8", "seq"),
		f(shEntries, "8", "entries"), f(shTiers, "8", "overflow tiers"), f(shHand, "8", "cache maps: CLOCK hand"),
		f(shEvicted, "8", "cache maps: entries evicted"), f(shExpired, "8", "cache maps: expired"),
	})
	d.Expect(t, "3.7 Segment counters", "", []formatdoc.Row{
		f(stPuts, "8", "puts"), f(stDeletes, "8", "deletes"), f(stLockWaits, "8", "lockWaits"),
		f(stLockTimeouts, "8", "lockTimeouts"), f(stCompactions, "8", "compactions"), f(stRelocations, "8", "relocations"),
	})
	d.Expect(t, "3.8 Undo record", "Source: `segment/undo.go`", []formatdoc.Row{
		f(udAt*8, "8", "at"), f(udSeq*8, "8", "seq"), f(udLen*8, "8", "len"),
		f(undoHeaderSize, fmt.Sprintf("UndoSize - %d", undoHeaderSize), "data"),
	})
	d.Expect(t, "3.9 Tier", "", []formatdoc.Row{
		f(0, strconv.Itoa(tierHeaderSize), "tier header"), f(tierHeaderSize, "8 x Slots", "hash lookup slots"),
	})
	d.Expect(t, "3.9 Tier", "Tier header", []formatdoc.Row{
		f(thNext, "8", "next"), f(thEntries, "8", "entries"), f(thLowestFree, "8", "lowestFree"),
		f(thUsedChunks, "8", "usedChunks"), f(thOwner, "8", "owner"), f(thOrder, "8", "order"),
		f(thMove, "8", "move journal"), f(thMoveDone, "8", "moveDone"),
	})
	d.Expect(t, "3.10 Entry", "Source: `segment/layout.go`", []formatdoc.Row{
		f(ehKeyLen, "4", "key length"), f(ehValueLen, "4", "stored value length"), f(ehChunks, "4", "chunks in the run"),
		f(ehChecksum, "4", "checksum"), f(entryHeaderSize, "klen", "key"),
	})
	d.Says(t,
		fmt.Sprintf("(SegmentsOff + %d i)", segmentHeaderSize),
		fmt.Sprintf("at most %d per 1000 slots", maxLoadPermille),
		fmt.Sprintf("uint32(tag x 0x%X)", uint32(secondHomeMultiplier)),
		fmt.Sprintf("| %d | cache maps: CLOCK reference bit", bits.TrailingZeros64(refBit)),
	)
}
