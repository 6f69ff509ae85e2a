package offheap

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// maxTailRead bounds how much of a file's bytes past its recorded size
// wrongSize reads to tell whether they are zeros: holes are skipped
// (SEEK_DATA), so only data written there is read.
const maxTailRead = 64 << 20

// wrongSize is Open's error for a file of size bytes whose header records
// another size: which sizes, what likely happened, and the command that
// puts it right or saves what it holds.
//
// In a file that may grow, recorded is the length it should have: the one
// its header records, or where its last whole tier ends.
func wrongSize(fd *os.File, path string, size, recorded int64, grows bool) error {
	p := shellQuote(path)
	if grows && size > recorded {
		zero, _ := zeroFrom(fd, recorded, size)
		kind := "not all zeros"
		if zero {
			kind = "zeros"
		}
		return fmt.Errorf("%w: %d bytes, but the map's tiers end at %d: %d bytes of %s were added at the end (sharedmap grows a map by whole tiers: something else extended it); "+
			"truncate -s %d %s removes them", ErrSize, size, recorded, size-recorded, kind, recorded, p)
	}
	if size < recorded {
		return fmt.Errorf("%w: %d bytes, the header records %d: the last %d bytes are gone (something cut the file: a truncate, a copy that stopped short, a full disk); "+
			"mapctl dump --salvage %s writes out every entry the rest still holds, and truncate -s %d %s grows it back so that it opens, its missing part reading as empty (the entries that were there are lost)",
			ErrTruncated, size, recorded, recorded-size, p, recorded, p)
	}
	zero, err := zeroFrom(fd, recorded, size)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %d bytes, the header records %d: %d bytes were added at the end (sharedmap never changes a map's size; reading them: %v); "+
			"keep a copy of them if they matter, then truncate -s %d %s removes them", ErrSize, size, recorded, size-recorded, err, recorded, p)
	case zero:
		return fmt.Errorf("%w: %d bytes, the header records %d: %d bytes of zeros were added at the end (sharedmap never changes a map's size: something else extended it); "+
			"truncate -s %d %s removes them", ErrSize, size, recorded, size-recorded, recorded, p)
	}
	return fmt.Errorf("%w: %d bytes, the header records %d: %d bytes were added at the end and not all are zeros (something else wrote past the map's end); "+
		"keep a copy of them if they matter, then truncate -s %d %s removes them (mapctl dump --salvage %s reads the map as it is)",
		ErrSize, size, recorded, size-recorded, recorded, p, p)
}

// zeroFrom reports whether the bytes [from, to) of fd are all zero,
// reading at most maxTailRead bytes of data (holes read as zero and are
// skipped); past that bound it gives up with an error saying so.
func zeroFrom(fd *os.File, from, to int64) (bool, error) {
	off, none, err := seekData(fd, from)
	switch {
	case none:
		return true, nil // no data past from: a hole to the end
	case err != nil:
		off = from // no SEEK_DATA here: read it all
	}
	buf := make([]byte, 64<<10)
	read := int64(0)
	for off < to {
		if read >= maxTailRead {
			return false, fmt.Errorf("the first %d bytes of data among them are zeros; the rest was not read", read)
		}
		n, err := fd.ReadAt(buf[:min(int64(len(buf)), to-off)], off)
		for _, c := range buf[:n] {
			if c != 0 {
				return false, nil
			}
		}
		off += int64(n)
		read += int64(n)
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
	return true, nil
}

// shellQuote quotes path for a POSIX shell, if it needs quoting, so that
// the commands an error suggests can be pasted as they are.
func shellQuote(path string) string {
	if path != "" && strings.IndexFunc(path, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+,:@%=", r))
	}) < 0 {
		return path
	}
	return "'" + strings.ReplaceAll(path, "'", `'\''`) + "'"
}
