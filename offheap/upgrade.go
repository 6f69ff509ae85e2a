package offheap

import (
	"fmt"
	"os"
	"sync/atomic"
)

// UpgradeResult says what Upgrade did.
type UpgradeResult struct {
	// From is the format version of the file's header when Upgrade found
	// it: 1 if Upgrade rewrote it, FormatVersion if it was current.
	From int
	// Mended lists the header copies Upgrade rewrote in a current file,
	// as a writable Open would: an upgrade cut short after copy B leaves
	// copy A damaged, and running Upgrade again finishes it.
	Mended []string
}

// Upgrade rewrites the header page of the map file at path, if it is
// format version 1 (one copy of the header), as the current version: two
// copies of the same header, every field and the layout record kept as
// they were, so the map's data, which lies after the page, is the same
// map. A file whose header is current is left as it is, but for a header
// copy that does not verify, which is rewritten from the other as a
// writable Open would (Mended).
//
// It holds the file's exclusive creation lock (flock) throughout, so no
// two upgrades, and no creation, run at once. Before it writes anything
// it calls alone with the file mapped writable: alone returns an error to
// refuse (a process has the map open), or a function Upgrade calls once
// the header is written, releasing what alone took.
//
// The order makes it crash-safe. A version-1 page's layout record ends
// before its second half, which is zero (Upgrade refuses a page where it
// is not): copy B is written there first, its state (ready) last, and
// synced; then copy A over the first half, and the page synced again. Cut
// short while copy B is written, the page opens as the version 1 it was
// (decodeHeader reads a version-1 page with its second half read as zero
// when copy B does not verify); once copy B verifies, it opens by copy B
// as version 2 whatever copy A holds, and the next writable Open, or
// Upgrade, rewrites copy A from it.
func Upgrade(path string, alone func(f *File) (release func(), err error)) (UpgradeResult, error) {
	var res UpgradeResult
	fail := func(err error) (UpgradeResult, error) { return res, &fileError{Path: path, Op: "upgrade", Err: err} }
	if err := checkPlatform(); err != nil {
		return fail(err)
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return fail(notRegular(st.Mode()))
	}
	fd, err := openPath(path, os.O_RDWR, 0o600)
	if err != nil {
		return fail(pathless(err))
	}
	closeFd := true
	defer func() {
		if closeFd {
			fd.Close()
		}
	}()
	if err := flockTimeout(fd, true, defaultInitTimeout); err != nil {
		return fail(err)
	}
	defer unflock(fd) //nolint:errcheck // closing fd drops it too
	page, size, err := readHeaderPage(fd)
	if err != nil {
		return fail(err)
	}
	h, faults, err := decodeHeader(page)
	if err != nil {
		return fail(err)
	}
	res.From = int(h.version)
	switch {
	case h.version == FormatVersion && !mends(faults):
		return res, nil
	case h.version != FormatVersion && size != h.fileSize:
		// (A current file may have grown past its recorded size; only
		// its header copies are mended here.)
		return fail(wrongSize(fd, path, size, h.fileSize, false))
	case h.version != FormatVersion && len(h.layout) > MaxLayoutSize:
		return fail(fmt.Errorf("%w: its %d-byte layout record is longer than a version-%d copy holds (%d bytes)", ErrCorrupt, len(h.layout), FormatVersion, MaxLayoutSize))
	case h.version != FormatVersion && faults == nil && !allZero(page[copyB:]):
		return fail(fmt.Errorf("%w: bytes %d..%d of its version-1 header are not zero, where copy B goes; copy the map into a new one instead (dump and load)", ErrCorrupt, copyB, HeaderSize-1))
	}
	r, err := mapFile(fd, h.fileSize, true)
	if err != nil {
		return fail(err)
	}
	f := newFile(r, fd, path, &h, &OpenOptions{}, false)
	closeFd = false
	defer f.Close()
	if h.version == FormatVersion {
		if res.Mended, err = mendCopies(r, &h, faults); err != nil {
			return fail(err)
		}
		return res, nil
	}
	release, err := alone(f)
	if err != nil {
		return fail(err)
	}
	defer release()
	v2 := h
	v2.version, v2.state = FormatVersion, stateReady
	if err := upgradeCopy(r, copyB, &v2, "copy B"); err != nil {
		return fail(err)
	}
	if err := upgradeCopy(r, copyA, &v2, "copy A"); err != nil {
		return fail(err)
	}
	return res, nil
}

// readHeaderPage reads the first HeaderSize bytes of fd's file (fewer if
// it is shorter) and returns them with the file's size.
func readHeaderPage(fd *os.File) ([]byte, int64, error) {
	st, err := fd.Stat()
	if err != nil {
		return nil, 0, pathless(err)
	}
	page := make([]byte, min(st.Size(), HeaderSize))
	if _, err := fd.ReadAt(page, 0); err != nil {
		return nil, 0, pathless(err)
	}
	return page, st.Size(), nil
}

// upgradeCopy writes the copy of h at off in r, in two halves, then its
// state word, then syncs the page, marking each step for tests that stop
// the upgrade there (testUpgradeStep).
func upgradeCopy(r *Region, off int64, h *header, name string) error {
	want := make([]byte, headerCopySize)
	encodeCopy(want, h)
	c := r.Bytes(off, headerCopySize)
	copy(c[:hdrState], want[:hdrState])
	copy(c[hdrState+4:headerCopySize/2], want[hdrState+4:headerCopySize/2])
	testUpgradeStep(name + " half written")
	copy(c[headerCopySize/2:], want[headerCopySize/2:])
	testUpgradeStep(name + " written")
	atomic.StoreUint32(r.Uint32(off+hdrState), h.state)
	testUpgradeStep(name + " ready")
	if err := r.syncRange(0, HeaderSize); err != nil {
		return err
	}
	testUpgradeStep(name + " synced")
	return nil
}

// testUpgradeStep marks the steps of Upgrade, for tests that stop it
// after each.
var testUpgradeStep = func(string) {}
