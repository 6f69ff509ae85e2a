package registry

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/sharedmap/sharedmap/internal/formatdoc"
)

// TestFormatDocMatchesRegistry holds docs/FORMAT.md's registry tables to
// the offsets the area header and the slots are written with.
func TestFormatDocMatchesRegistry(t *testing.T) {
	d, f := formatdoc.Load(t, "../.."), formatdoc.F
	d.Expect(t, "3.4 Process registry", "Area header", []formatdoc.Row{
		f(0, "8", fmt.Sprintf("magic `%q`", magic)), f(hSlots, "8", "slots"), f(hLedgers, "8", "ledger words per slot"),
		f(hGeneration, "8", "generation"), f(hCounters, "8", "counter words per slot"),
		f(hLockDev, "8", "device of the lock file"), f(hLockIno, "8", "inode number of that lock file"),
		f(hHighWater, strconv.Itoa(areaHeaderSize-hHighWater), "high-water mark"),
	})
	d.Expect(t, "3.4 Process registry", "Slot i is at", []formatdoc.Row{
		f(sState, "8", "state"), f(sPID, "8", "pid"), f(sStartTicks, "8", "process start time"),
		f(sGeneration, "8", "generation at claim"), f(sClaimedAt, "8", "claimed at"),
		f(sClaimedAt+8, strconv.Itoa(sJournal-sClaimedAt-8), "reserved"),
		f(sJournal, strconv.Itoa(JournalBytes), "lock-episode journal"),
		f(slotHeaderSize, "8 x MaxSegments", "ledger of segment i's lock"),
	})
	d.Says(t, fmt.Sprintf("Slot i is at area + %d + i x `SlotSize`", areaHeaderSize), fmt.Sprintf("`%q` in a registry with a high-water mark", magicHighWater))
}
