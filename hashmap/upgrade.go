package hashmap

import (
	"github.com/sharedmap/sharedmap/offheap"
)

// UpgradeResult says what Upgrade did.
type UpgradeResult struct {
	// From is the file header's format version as Upgrade found it: 1 if
	// Upgrade rewrote it, To if the file was current.
	From int
	// To is the current format version, which the file has now.
	To int
	// Mended lists the header copies Upgrade rewrote in a file that was
	// current, as a writable Open would: an upgrade cut short after its
	// first copy leaves the second damaged, and Upgrade run again
	// finishes it so.
	Mended []string
	// LacksGrowth and LacksStamps say that the file, a store map, does not
	// grow (it was made with MaxSize NoGrowth, or before growth), or that
	// its tiers carry no stamps (it was made before them). The header
	// rewrite gives neither, since each changes the data's layout: Resize
	// rewrites the map into a file that has both.
	LacksGrowth, LacksStamps bool
}

// Upgrade brings the file header of the map at path to the current format
// version, in place. A version-1 header (one copy, as builds before the
// two copies wrote it; Open opens such a file only read-only, with
// ErrNeedsUpgrade) is rewritten as two copies of the same header: every
// field and the layout record are kept, and nothing after the header page
// changes, so every entry is kept. A file that is current is left as it
// is, but for a header copy that does not verify, rewritten from the
// other.
//
// It needs the map to itself: it holds the file's creation lock and the
// registry's recovery lock, under which every writer joins, and refuses
// with an error matching ErrNotAlone while any process has the map open
// for writing (an older build may have a version-1 file open so).
// Processes that only read need not close: they read the header when they
// open, and every state of the page during the upgrade opens.
//
// The layout of the data stays as it was: a file made before growth or
// tier stamps gains neither (LacksGrowth, LacksStamps); Resize rewrites
// such a map into a file that has both.
//
// It is crash-safe: killed at any point, or cut by a power failure, it
// leaves a file that opens, as version 1 until the first new copy is
// whole and synced, as version 2 from then on; Upgrade run again finishes
// what it began.
func Upgrade(path string) (UpgradeResult, error) {
	res, err := offheap.Upgrade(path, upgradeAlone)
	if err != nil {
		return UpgradeResult{}, classifyOpenError(err)
	}
	r := UpgradeResult{From: res.From, To: offheap.FormatVersion, Mended: res.Mended}
	if m, err := Open(path, &Options{ReadOnly: true}); err == nil {
		r.LacksGrowth, r.LacksStamps = !m.layout.Grows && !m.layout.Cache, !m.layout.Stamps
		m.Close()
	}
	return r, nil
}

// upgradeAlone takes the recovery lock of f's registry, if it has one, and
// returns its release, or an error if a process has the map open for
// writing (see aloneWith).
func upgradeAlone(f *offheap.File) (func(), error) {
	return aloneWith(f, "the header is rewritten", false)
}
